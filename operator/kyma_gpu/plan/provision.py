"""Which Flux the module relies on: the cluster's own, or one it installs itself. Pure.

    no Flux CRDs at all ................... Absent: install the bundle (operator/kyma_gpu/data)
    CRDs labelled gpu.kyma-project.io/flux  Provided: the module's own Flux; keep it current
    CRDs of someone else, APIs served ..... External: use it, never write its objects or CRDs
    CRDs of someone else, an API missing .. Incompatible: an Error, nothing is written

The module's own Flux reconciles only the module's objects: its controllers watch kyma-system
only and only objects with the sharding label (`SHARD_LABEL`). Installing, sharding for and
removing that Flux is an extension's (extensions/own_flux/); this module says which Flux there
is, and what the bundle is.
"""

from __future__ import annotations

import hashlib
import importlib.resources
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import yaml

from kyma_gpu.api.resources import FLUX_KINDS, HELM_RELEASE

PROVIDED_LABEL = "gpu.kyma-project.io/flux"
PROVIDED = "provided"
BUNDLE_HASH = "gpu.kyma-project.io/flux-bundle-hash"
SHARD_LABEL = "sharding.fluxcd.io/key"
SHARD = "kyma-gpu"

REQUIRED_APIS = MappingProxyType({k.crd_name: k.api_version for k in FLUX_KINDS})
"""CRD name -> the API version the module writes (Flux 2.6 or newer serves all three)."""
MARKER_CRD = HELM_RELEASE.crd_name
"""Applied last: its bundle hash says the whole bundle is in place."""


class FluxMode(StrEnum):
    UNKNOWN = "Unknown"
    ABSENT = "Absent"
    PROVIDED = "Provided"
    EXTERNAL = "External"
    INCOMPATIBLE = "Incompatible"


class Api(StrEnum):
    """What listing one Flux resource at the module's API version answered."""

    UNKNOWN = "Unknown"
    ABSENT = "Absent"
    SERVED = "Served"
    NOT_SERVED = "NotServed"
    """The CRD exists but the version 404s: an older Flux."""


@dataclass(frozen=True, slots=True)
class CrdFacts:
    """What the module keeps of a Flux CRD: metadata only."""

    uid: str
    provided: bool = False
    bundle_hash: str | None = None
    deleting: bool = False


def crd_facts(meta: Mapping[str, Any]) -> CrdFacts:
    labels = meta.get("labels") or {}
    return CrdFacts(
        uid=str(meta.get("uid", "")),
        provided=labels.get(PROVIDED_LABEL) == PROVIDED,
        bundle_hash=(meta.get("annotations") or {}).get(BUNDLE_HASH),
        deleting=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True, slots=True)
class FluxApi:
    """The Flux CRDs present (by name) and how each required API answers."""

    crds: Mapping[str, CrdFacts] = field(default_factory=dict)
    apis: Mapping[str, Api] = field(default_factory=dict)
    synced: bool = True


def external_flux() -> FluxApi:
    """A compatible Flux of the cluster's own, every API served (the default of a Snapshot)."""
    return FluxApi(
        crds={name: CrdFacts(uid=name) for name in REQUIRED_APIS},
        apis=dict.fromkeys(REQUIRED_APIS, Api.SERVED),
    )


@dataclass(frozen=True, slots=True)
class WhichFlux:
    """Which Flux the module relies on, and what the FluxAvailable condition says of it."""

    mode: FluxMode
    message: str
    served: bool = False
    """Every API the module writes answers: objects can be applied."""


def which_flux(api: FluxApi) -> WhichFlux:
    if not api.synced:
        return WhichFlux(FluxMode.UNKNOWN, "Flux CRDs not observed yet")
    present = [name for name in REQUIRED_APIS if name in api.crds]
    served = all(api.apis.get(name) is Api.SERVED for name in REQUIRED_APIS)
    if not present:
        return WhichFlux(FluxMode.ABSENT, "no Flux on the cluster: the module installs its own")
    if any(api.crds[name].provided for name in present):
        return WhichFlux(FluxMode.PROVIDED, _provided_message(served), served)
    missing = [name for name in REQUIRED_APIS if name not in api.crds]
    if missing:
        return WhichFlux(FluxMode.INCOMPATIBLE, _incomplete_message(missing))
    unserved = [n for n in REQUIRED_APIS if api.apis.get(n) is Api.NOT_SERVED]
    if unserved:
        return WhichFlux(FluxMode.INCOMPATIBLE, _unserved_message(unserved))
    message = "using the cluster's Flux (the module changes none of its objects or CRDs)"
    return WhichFlux(FluxMode.EXTERNAL, message, served)


def _provided_message(served: bool) -> str:
    where = "source-controller and helm-controller in kyma-system"
    if served:
        return f"the module's own Flux: {where}, for the module's objects only"
    return f"installing the module's own Flux ({where}); waiting for its CRDs to be served"


def _incomplete_message(missing: Sequence[str]) -> str:
    return (
        f"the cluster's Flux lacks the CRDs {', '.join(missing)}: the module needs "
        "source-controller and helm-controller of Flux 2.6 or newer; install them, "
        "or remove the partial Flux so that the module installs its own"
    )


def _unserved_message(unserved: Sequence[str]) -> str:
    wanted = ", ".join(f"{name} at {REQUIRED_APIS[name]}" for name in unserved)
    return (
        f"the cluster's Flux is too old: the module needs {wanted} (Flux 2.6 or newer); "
        "upgrade Flux, the module does not touch a Flux it did not install"
    )


# -- the bundle --


CONTROLLERS = ("source-controller", "helm-controller")
IMAGE_ENV = MappingProxyType(
    {
        "source-controller": "KYMA_GPU_FLUX_SOURCE_CONTROLLER_IMAGE",
        "helm-controller": "KYMA_GPU_FLUX_HELM_CONTROLLER_IMAGE",
    }
)
"""The manager Deployment's environment names the images of the bundle's controllers
(config/manager/deployment.yaml): modulectl takes images from there into the module's OCM
component, and Kyma's image localisation rewrites them there, for air-gapped clusters."""


MIRROR_LABEL = "gpu.kyma-project.io/flux-images"
MIRROR_VALUE = "mirror"
"""On a bundle Deployment whose image is not the bundle's own (Kyma's image localisation, or a
mirror in the manager's environment): the admission policy kyma-gpu-manager-mirrors then holds
the image to a registry mirror an administrator lists (kyma_gpu_tools/manager_policy.py)."""


@dataclass(frozen=True, slots=True)
class FluxImages:
    """Images for the bundle's controllers, by controller; a controller not named keeps the
    image the bundle was rendered with (flux/kustomization.yaml)."""

    images: tuple[tuple[str, str], ...] = ()
    digest: str = field(init=False, repr=False, compare=False)
    """The bundle's hash with these images (of the text and the images): on every object."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "digest", _digest(self.images) if self.images else _DIGEST)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FluxImages:
        return cls(tuple((c, env[name]) for c, name in IMAGE_ENV.items() if env.get(name)))


def _digest(images: tuple[tuple[str, str], ...]) -> str:
    source = _TEXT + (repr(images) if images else "")
    return hashlib.sha256(source.encode()).hexdigest()[:16]


_TEXT = importlib.resources.files("kyma_gpu.data").joinpath("flux.yaml").read_text()
"""The rendered flux/ base (hack/flux-bundle.sh), packaged."""
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader where PyYAML has it (a tenth of the pure one's 0.2 s for the bundle)."""
_DIGEST = _digest(())


def _frozen(node: Any) -> Any:
    if isinstance(node, dict):
        return MappingProxyType({k: _frozen(v) for k, v in node.items()})
    return tuple(_frozen(v) for v in node) if isinstance(node, list) else node


def _thawed(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _thawed(v) for k, v in node.items()}
    return [_thawed(v) for v in node] if isinstance(node, tuple) else node


_RENDERED: tuple[Mapping[str, Any], ...] = tuple(
    sorted(
        (_frozen(obj) for obj in yaml.load_all(_TEXT, Loader=_LOADER) if obj),
        key=lambda obj: bool(obj["metadata"]["name"] == MARKER_CRD),
    )
)
"""Its objects, the marker CRD last, parsed when the module is imported (frozen): `bundle`
makes each caller a copy of its own, with the images and the hash."""


def _controller(image: str) -> str | None:
    """ghcr.io/fluxcd/helm-controller:v1.6.4 (or a mirror of it) -> helm-controller."""
    name = image.rsplit("@", 1)[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return name if name in CONTROLLERS else None


def _set_images(objects: Sequence[dict[str, Any]], images: FluxImages) -> None:
    wanted = dict(images.images)
    for obj in objects:
        if obj["kind"] != "Deployment":
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            controller = _controller(container["image"])
            if controller in wanted and wanted[controller] != container["image"]:
                container["image"] = wanted[controller]
                obj["metadata"].setdefault("labels", {})[MIRROR_LABEL] = MIRROR_VALUE


def bundle(images: FluxImages = FluxImages()) -> tuple[Mapping[str, Any], ...]:
    """The rendered flux/ base (hack/flux-bundle.sh) with the given controller images, its
    hash (of the text and the images) on every object and the marker CRD last: a fresh copy."""
    objects: list[dict[str, Any]] = [_thawed(obj) for obj in _RENDERED]
    _set_images(objects, images)
    for obj in objects:
        obj["metadata"].setdefault("annotations", {})[BUNDLE_HASH] = images.digest
    return tuple(objects)


def bundle_hash(images: FluxImages = FluxImages()) -> str:
    return images.digest


def bundle_current(api: FluxApi, images: FluxImages = FluxImages()) -> bool:
    marker = api.crds.get(MARKER_CRD)
    return marker is not None and marker.bundle_hash == bundle_hash(images)


def bundle_crds() -> tuple[str, ...]:
    return tuple(
        o["metadata"]["name"] for o in _RENDERED if o["kind"] == "CustomResourceDefinition"
    )


def bundle_workloads() -> tuple[Mapping[str, Any], ...]:
    """Everything of the bundle but its CRDs: what removing the module's Flux deletes first."""
    return tuple(o for o in bundle() if o["kind"] != "CustomResourceDefinition")
