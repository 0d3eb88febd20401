"""Preflight: checks of the resolved plan inputs, each returning findings. Pure."""

from __future__ import annotations

from collections.abc import Callable

from kyma_gpu.api.conditions import PreflightReason as R
from kyma_gpu.api.models import ClusterDriverMode, DriverMode
from kyma_gpu.facts.node import LABEL_DEPLOY_DRIVER, LABEL_NFD_NVIDIA_PCI, OsFamily
from kyma_gpu.plan.driver import Resolved
from kyma_gpu.plan.findings import Finding, Preflight, Severity, Verdict
from kyma_gpu.plan.images import branch_not_built, garden_linux_images, upstream_images
from kyma_gpu.plan.pools import node_findings, settle

__all__ = ("CHECKS", "Check", "Finding", "Preflight", "Severity", "Verdict", "preflight_findings")


Check = Callable[[Resolved], list[Finding]]


def no_gpu_nodes(r: Resolved) -> list[Finding]:
    if r.facts.gpu_nodes:
        return []
    message = (
        "no GPU nodes detected; the GPU stack is installed and prepared for Garden Linux "
        f"({r.facts.cpu_node_count} CPU-only nodes ignored). Add a GPU worker pool."
    )
    return [Finding(Severity.WARNING, R.NO_GPU_NODES, message)]


def unknown_os(r: Resolved) -> list[Finding]:
    problems = {
        n.name: f"OS {n.os_image or '(empty osImage)'!r} is not known to the module; using "
        f"{r.node_mode(n)} driver mode"
        for n in r.facts.unknown_os_nodes
    }
    return node_findings(r.worker_pools, R.UNKNOWN_OS, problems, blocking=False)


def upstream_on_garden_linux(r: Resolved) -> list[Finding]:
    if r.spec.driver.mode is not DriverMode.UPSTREAM or not any(
        n.os is OsFamily.GARDENLINUX for n in r.facts.gpu_nodes
    ):
        return []
    message = (
        "spec.driver.mode Upstream on Garden Linux nodes: NVIDIA's driver container "
        "compiles on the node and Garden Linux has no compilers; use Auto or Precompiled"
    )
    return [Finding(Severity.WARNING, R.UPSTREAM_ON_GARDEN_LINUX, message)]


def unknown_machine_type(r: Resolved) -> list[Finding]:
    problems = {
        n.name: f"machine type {n.machine_type or '(none)'} is not in the registry; GPU detected "
        f"by {', '.join(n.evidence)}"
        for n in r.facts.unknown_machine_type_nodes
    }
    return node_findings(
        r.worker_pools, R.UNKNOWN_MACHINE_TYPE, problems, blocking=False, severity=Severity.INFO
    )


def unknown_installer_release(r: Resolved) -> list[Finding]:
    if r.installer is not None or not r.uses_installer:
        return []
    message = (
        f"spec.driver.installerRelease {r.release_tag!r} is not adopted by this module "
        f"(known: {', '.join(r.catalog.installer_releases())})"
    )
    return [Finding(Severity.ERROR, R.UNKNOWN_INSTALLER_RELEASE, message)]


def unknown_driver_version(r: Resolved) -> list[Finding]:
    version = r.spec.driver.version
    if not (r.wants(DriverMode.UPSTREAM) and version and r.full_version is None):
        return []
    nvidia = r.catalog.nvidia_drivers
    message = (
        f"spec.driver.version {version!r}: NVIDIA's driver container needs a full version (e.g. "
        f"590.48.01), and NVIDIA's catalog has no driver of branch {version} "
        f"(branches: {', '.join(nvidia.branches())}; {nvidia.where})"
    )
    return [Finding(Severity.ERROR, R.UNKNOWN_DRIVER_VERSION, message)]


def unbuilt_precompiled_version(r: Resolved) -> list[Finding]:
    """A full version the installer release does not build must not become its branch."""
    version, installer = r.unbuilt_version, r.installer
    if version is None or installer is None:
        return []
    message = (
        f"spec.driver.version {version!r}: installer release {installer.tag} does not build it "
        f"(builds: {', '.join(installer.drivers)}); its Garden Linux images are per branch, and "
        f"branch {r.branch}'s holds {installer.full_version(r.branch)}. Set spec.driver.version "
        f"to the branch ({r.branch!r}) or to a version the release builds"
    )
    return [Finding(Severity.ERROR, R.UNKNOWN_DRIVER_VERSION, message)]


def unknown_chart_version(r: Resolved) -> list[Finding]:
    if r.chart is not None:
        return []
    message = (
        f"chart version {r.chart_version} has no facts in values-rules/charts/; images and "
        "the default driver version cannot be checked before Flux installs it"
    )
    return [Finding(Severity.WARNING, R.UNKNOWN_CHART_VERSION, message)]


def preinstalled_not_excluded(r: Resolved) -> list[Finding]:
    """Preinstalled nodes that a per-pool NVIDIADriver of their OS would also select.

    An NVIDIADriver selects by OS ID only; the NVIDIA operator keeps its driver off a node
    only when the node is labelled nvidia.com/gpu.deploy.driver=false. It also removes its
    nvidia.com/gpu.deploy.* labels from a node that NFD has not yet labelled with the NVIDIA
    PCI device (pci-10de.present), so a node joining with the first label only loses it to
    that race: the message asks for both."""
    if r.mode is not ClusterDriverMode.PER_POOL:
        return []
    driven = {p.os for p in r.pools if p.mode is not DriverMode.PREINSTALLED}
    exposed = [
        n.name
        for p in r.pools
        if p.mode is DriverMode.PREINSTALLED and p.os in driven
        for n in p.nodes
        if not n.driver_excluded
    ]
    if not exposed:
        return []
    message = (
        f"nodes {', '.join(exposed)} have their own driver, but the per-pool NVIDIADriver of "
        f"their OS selects them too and would deploy a second one; give their worker pool the "
        f"labels {LABEL_DEPLOY_DRIVER}=false, which the NVIDIA operator honours, and "
        f"{LABEL_NFD_NVIDIA_PCI}=true (else the NVIDIA operator removes the first from a node "
        "that NFD has not labelled yet, as a new node is)"
    )
    return [Finding(Severity.WARNING, R.PREINSTALLED_NODE_NOT_EXCLUDED, message)]


def no_driver_for_unknown_os(r: Resolved) -> list[Finding]:
    if r.mode is not ClusterDriverMode.PER_POOL:
        return []
    why = (
        "mixed fleet: their OS is not known to the module, so no per-pool NVIDIADriver selects "
        "them and they get no driver; label them gpu.kyma-project.io/driver-preinstalled=true "
        "if they have one"
    )
    stranded = {
        n.name: why
        for p in r.pools
        if p.os is OsFamily.UNKNOWN and p.mode is not DriverMode.PREINSTALLED
        for n in p.nodes
    }
    return node_findings(r.worker_pools, R.NO_DRIVER_FOR_UNKNOWN_OS, stranded)


def mixed_fleet_without_version(r: Resolved) -> list[Finding]:
    if r.mode is not ClusterDriverMode.PER_POOL or r.chart is not None or r.full_version:
        return []
    message = "mixed fleet: the upstream pool needs a driver version; set spec.driver.version"
    return [Finding(Severity.ERROR, R.UNKNOWN_DRIVER_VERSION, message)]


# In this order: the findings keep it in status and in `kyma-gpu plan`.
CHECKS: tuple[Check, ...] = (
    no_gpu_nodes,
    unknown_os,
    upstream_on_garden_linux,
    unknown_machine_type,
    unknown_installer_release,
    unknown_driver_version,
    unbuilt_precompiled_version,
    unknown_chart_version,
    branch_not_built,
    garden_linux_images,
    upstream_images,
    preinstalled_not_excluded,
    no_driver_for_unknown_os,
    mixed_fleet_without_version,
)


def preflight_findings(r: Resolved, checks: tuple[Check, ...] = CHECKS) -> list[Finding]:
    """The findings of the checks, those about worker pools settled (pools.settle)."""
    return settle([finding for check in checks for finding in check(r)], r.worker_pools)
