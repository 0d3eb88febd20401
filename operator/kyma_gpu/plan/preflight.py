"""Preflight: checks of the resolved plan inputs, each returning findings. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from kyma_gpu.api.conditions import PreflightReason as R
from kyma_gpu.api.models import ClusterDriverMode, DriverMode
from kyma_gpu.facts.node import LABEL_DEPLOY_DRIVER, LABEL_NFD_NVIDIA_PCI, OsFamily
from kyma_gpu.plan.driver import DriverPool, Resolved
from kyma_gpu.rules.installer import InstallerRelease


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Finding:
    """One preflight observation. Reasons are stable CamelCase words."""

    severity: Severity
    reason: R
    message: str


@dataclass(frozen=True, slots=True)
class Preflight:
    findings: tuple[Finding, ...] = ()

    @property
    def verdict(self) -> str:
        """ok, warning or error: the worst finding (info counts as ok)."""
        severities = {f.severity for f in self.findings}
        if Severity.ERROR in severities:
            return "error"
        if Severity.WARNING in severities:
            return "warning"
        return "ok"

    def worst(self) -> Finding | None:
        order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
        return min(self.findings, key=lambda f: order[f.severity], default=None)


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
    return [
        Finding(
            Severity.WARNING,
            R.UNKNOWN_OS,
            f"node {node.name}: OS {node.os_image or '(empty osImage)'!r} is not known to the "
            f"module; using {r.node_mode(node)} driver mode",
        )
        for node in r.facts.unknown_os_nodes
    ]


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
    return [
        Finding(
            Severity.INFO,
            R.UNKNOWN_MACHINE_TYPE,
            f"node {node.name}: machine type {node.machine_type or '(none)'} is not in the "
            f"registry; GPU detected by {', '.join(node.evidence)}",
        )
        for node in r.facts.unknown_machine_type_nodes
    ]


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
    message = (
        f"spec.driver.version {version!r}: the Upstream driver container needs "
        "a full version (e.g. 590.48.01) and no known release maps this branch to one"
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


def no_driver_image(r: Resolved) -> list[Finding]:
    """Garden Linux nodes for which the installer release has no precompiled image."""
    if r.installer is None:
        return []
    findings: list[Finding] = []
    for pool in r.pools:
        if pool.mode is DriverMode.PRECOMPILED and pool.os is OsFamily.GARDENLINUX:
            findings.extend(_pool_image_findings(pool, r.installer, r.branch))
    return findings


def _pool_image_findings(
    pool: DriverPool, installer: InstallerRelease, branch: str
) -> list[Finding]:
    # Once per distinct (version, arch): a pool of 500 nodes has a handful of them.
    answers = {
        key: installer.problem(key[0], branch, key[1])
        for key in {(n.os_version, n.arch) for n in pool.nodes}
    }
    bad = {n.name: why for n in pool.nodes if (why := answers[(n.os_version, n.arch)])}
    severity = Severity.ERROR if len(bad) == len(pool.nodes) else Severity.WARNING
    return [
        Finding(severity, R.NO_DRIVER_IMAGE, f"node {name}: {why}")
        for name, why in sorted(bad.items())
    ]


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
    stranded = [
        n.name
        for p in r.pools
        if p.os is OsFamily.UNKNOWN and p.mode is not DriverMode.PREINSTALLED
        for n in p.nodes
    ]
    if not stranded:
        return []
    message = (
        f"mixed fleet: nodes {', '.join(stranded)} have an OS the module does not "
        "know, so no per-pool NVIDIADriver can select them and they get no driver; "
        "label them gpu.kyma-project.io/driver-preinstalled=true if they have one"
    )
    return [Finding(Severity.WARNING, R.NO_DRIVER_FOR_UNKNOWN_OS, message)]


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
    unknown_chart_version,
    no_driver_image,
    preinstalled_not_excluded,
    no_driver_for_unknown_os,
    mixed_fleet_without_version,
)


def preflight_findings(r: Resolved, checks: tuple[Check, ...] = CHECKS) -> list[Finding]:
    return [finding for check in checks for finding in check(r)]
