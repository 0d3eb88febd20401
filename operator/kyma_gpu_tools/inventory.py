"""Every image that can run because of the module, for a registry that must hold them all. Pure.

Two views. `release_images`: everything a release of the module can run (the chart facts'
images of one chart version, NVIDIA's driver container per OS it is published for, the Garden
Linux driver of the installer release per kernel, the manager, the module's Flux).
`plan_images`: what one plan runs on one fleet (the components its values switch on, the
driver images of its pools' kernels and OSes, with the mirror already applied), plus the
manager and the module's Flux. `kyma-gpu images` prints either, and checks a registry for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kyma_gpu import __version__
from kyma_gpu.api.models import DriverMode
from kyma_gpu.api.operations import GpuStack
from kyma_gpu.extensions.own_flux.bundle import FluxBundle
from kyma_gpu.facts.node import NodeFacts, OsFamily
from kyma_gpu.plan.plan import Plan
from kyma_gpu.rules.catalog import Catalog, ChartFacts
from kyma_gpu.rules.chart import image_reference

MANAGER_REPOSITORY = "europe-docker.pkg.dev/kyma-project/prod/gpu-manager"
"""The manager's image without its tag (config/manager/deployment.yaml; a unit test keeps the
two equal). The tag is the module's version."""
KERNEL = "<kernel>"
OS = "<os>"
OFF_BY_DEFAULT = frozenset(
    {"dcgm", "gds", "gdrcopy", "nodeStatusExporter", "vgpuManager", "kataManager"}
)
"""Components the chart switches off where the values do not say (its values.yaml)."""


@dataclass(frozen=True, slots=True)
class Image:
    """One image reference and what runs it (a values path, manager, or a Flux controller)."""

    reference: str
    component: str


def module_images() -> list[Image]:
    """The manager and the Flux controllers it installs on a cluster without Flux."""
    found = [Image(f"{MANAGER_REPOSITORY}:{__version__}", "manager")]
    for obj in FluxBundle().objects():
        if obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["containers"]:
                found.append(Image(str(container["image"]), str(obj["metadata"]["name"])))
    return found


def release_images(catalog: Catalog, chart: ChartFacts, installer_tag: str) -> list[Image]:
    """Everything one release of the module can run, placeholders for kernels."""
    found: list[Image] = []
    for image in chart.images:
        ref = image_reference(
            {"repository": image.repository, "image": image.image, "version": image.version}
        )
        published = catalog.nvidia_drivers.entry(image.version or "")
        if image.path == "driver" and published is not None:
            found += [Image(f"{ref}-{tag}", "driver") for tag in sorted(published.os)]
        else:
            found.append(Image(ref, image.path))
    installer = catalog.installer(installer_tag)
    if installer is not None:
        repository = f"{catalog.defaults.installer_repository}/{installer_tag}/driver"
        tag = f"{installer.default_branch}-{KERNEL}-gardenlinux0"
        found.append(Image(f"{repository}:{tag}", "driver"))
    return unique([*found, *module_images()])


def plan_images(plan: Plan, catalog: Catalog) -> list[Image]:
    """What the plan runs: the switched-on components, the drivers per kernel and OS."""
    chart = catalog.chart(plan.chart_version)
    values = plan.values
    found: list[Image] = []
    drivers = _driver_images(plan, catalog)
    for image in chart.images if chart is not None else ():
        if image.path == "driver" or not _runs(image.path, values, plan.stack, bool(drivers)):
            continue
        node = _at(values, image.path)
        merged = {"repository": image.repository, "image": image.image,
                  "version": image.version, **_image_keys(node)}  # fmt: skip
        found.append(Image(image_reference(merged), image.path))
    vgpu = _at(values, "vgpuManager")
    if vgpu.get("enabled") is True and vgpu.get("repository"):
        found.append(Image(image_reference(_image_keys(vgpu)), "vgpuManager"))
    return unique([*found, *drivers, *module_images()])


def unique(images: Iterable[Image]) -> list[Image]:
    """Once each reference, in order."""
    seen: dict[str, Image] = {}
    for image in images:
        seen.setdefault(image.reference, image)
    return list(seen.values())


def _at(values: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    node: Any = values
    for key in path.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def _image_keys(node: Mapping[str, Any]) -> dict[str, Any]:
    """repository, image and version of a values node (NFD's `tag` is its version; either may
    carry the release's digest: `v0.19.0@sha256:...`)."""
    keys = {k: node[k] for k in ("repository", "image", "version") if node.get(k) is not None}
    if "version" not in keys and node.get("tag") is not None:
        keys["version"] = node["tag"]
    return keys


def _runs(path: str, values: Mapping[str, Any], stack: GpuStack, drivers: bool) -> bool:
    """Whether the plan's values switch the component of a chart image on."""
    root = path.split(".", maxsplit=1)[0]
    if root == "driver":  # driver.manager: an init container of every driver pod
        return drivers
    if root == "draDriver":
        return stack is GpuStack.DRA
    switch = _at(values, "nfd" if root == "node-feature-discovery" else root).get("enabled")
    return bool(switch) if switch is not None else root not in OFF_BY_DEFAULT


def _driver_images(plan: Plan, catalog: Catalog) -> list[Image]:
    """The driver images of the plan's NVIDIADriver objects, or of the chart's own driver."""
    values = plan.values
    specs = [o.get("spec") or {} for o in values.get("extraObjects") or ()
             if isinstance(o, Mapping) and o.get("kind") == "NVIDIADriver"]  # fmt: skip
    driver = _at(values, "driver")
    if not specs and driver.get("enabled", True) is not False and plan.pools:
        specs = [driver]
    found: list[Image] = []
    for spec in specs:
        base = image_reference({"repository": spec.get("repository"),
                                "image": spec.get("image") or "driver"})  # fmt: skip
        precompiled = bool(spec.get("usePrecompiled"))
        mode = DriverMode.PRECOMPILED if precompiled else DriverMode.UPSTREAM
        nodes = [n for p in plan.pools if p.mode is mode for n in p.nodes]
        tags = sorted({_tag(n, precompiled, catalog) for n in nodes}) or [_placeholder(precompiled)]
        found += [Image(f"{base}:{spec.get('version')}-{tag}", "driver") for tag in tags]
    return found


def _tag(node: NodeFacts, precompiled: bool, catalog: Catalog) -> str:
    """The part of the driver image's tag after the version: kernel and OS, or OS."""
    if precompiled:
        os = "gardenlinux0" if node.os is OsFamily.GARDENLINUX else _os(node, catalog)
        return f"{node.kernel or KERNEL}-{os}"
    return _os(node, catalog)


def _os(node: NodeFacts, catalog: Catalog) -> str:
    return catalog.nvidia_drivers.os_tag(node.os, node.os_version) or OS


def _placeholder(precompiled: bool) -> str:
    return f"{KERNEL}-gardenlinux0" if precompiled else OS
