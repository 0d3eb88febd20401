"""(Gpu spec, cluster facts) -> Plan: driver modes, preflight verdict, chart values, Flux objects.

Pure. The same function serves the operator and the offline `kyma-gpu plan` command.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kyma_gpu.api.models import DriverMode, GpuNodeStatus, GpuSpec
from kyma_gpu.facts.cluster import ClusterFacts
from kyma_gpu.facts.node import NodeFacts, OsFamily
from kyma_gpu.plan.flux import FluxSettings, Owner, flux_objects
from kyma_gpu.rules.catalog import Catalog, ChartFacts
from kyma_gpu.rules.context import PoolContext, RuleContext
from kyma_gpu.rules.engine import Provenance, deep_merge, evaluate, matches
from kyma_gpu.rules.installer import InstallerRelease

PER_POOL = "PerPool"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Finding:
    """One preflight observation. Reasons are stable CamelCase words."""

    severity: Severity
    reason: str
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


@dataclass(frozen=True, slots=True)
class DriverPool:
    """GPU nodes that share an OS family and a driver mode."""

    os: OsFamily
    mode: DriverMode
    nodes: tuple[NodeFacts, ...]


@dataclass(frozen=True)
class Plan:
    """Everything the operator will ask Flux for, and why."""

    nodes: tuple[GpuNodeStatus, ...]
    pools: tuple[DriverPool, ...]
    driver_mode: str
    driver_branch: str
    driver_version: str | None
    installer_release: str | None
    chart_name: str
    chart_version: str
    chart_repository: str
    preflight: Preflight
    values: dict[str, Any]
    provenance: Provenance
    rules_applied: tuple[str, ...]
    objects: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def helm_release(self) -> dict[str, Any] | None:
        return next((o for o in self.objects if o["kind"] == "HelmRelease"), None)

    @property
    def source(self) -> dict[str, Any] | None:
        return next((o for o in self.objects if o["kind"] != "HelmRelease"), None)

    @property
    def driver_summary(self) -> str:
        """The version shown in status: a branch for precompiled, a full version upstream."""
        if self.driver_mode == DriverMode.PRECOMPILED:
            return self.driver_branch
        return self.driver_version or self.driver_branch

    def document(self) -> dict[str, Any]:
        """The plan as the YAML document `kyma-gpu plan` prints."""
        return {
            "preflight": {
                "verdict": self.preflight.verdict,
                "findings": [
                    {"severity": str(f.severity), "reason": f.reason, "message": f.message}
                    for f in self.preflight.findings
                ],
            },
            "nodes": [n.model_dump(by_alias=True, exclude_none=True) for n in self.nodes],
            "driver": {
                "mode": self.driver_mode,
                "branch": self.driver_branch,
                "version": self.driver_version,
                "installerRelease": self.installer_release,
                "pools": [
                    {"os": str(p.os), "mode": str(p.mode), "nodes": [n.name for n in p.nodes]}
                    for p in self.pools
                ],
            },
            "chart": {
                "name": self.chart_name,
                "version": self.chart_version,
                "repository": self.chart_repository,
            },
            "rulesApplied": list(self.rules_applied),
            "values": self.values,
            "provenance": dict(sorted(self.provenance.items())),
            "objects": list(self.objects),
        }


def _node_mode(node: NodeFacts, spec_mode: DriverMode, auto: Mapping[str, str]) -> DriverMode:
    if spec_mode is not DriverMode.AUTO:
        return spec_mode
    if node.preinstalled_driver:
        return DriverMode.PREINSTALLED
    return DriverMode(auto.get(str(node.os), auto.get("unknown", "Upstream")))


def driver_pools(
    facts: ClusterFacts, spec_mode: DriverMode, auto: Mapping[str, str]
) -> tuple[DriverPool, ...]:
    """Group GPU nodes by (OS family, driver mode), in a stable order."""
    groups: dict[tuple[OsFamily, DriverMode], list[NodeFacts]] = {}
    for node in facts.gpu_nodes:
        groups.setdefault((node.os, _node_mode(node, spec_mode, auto)), []).append(node)
    return tuple(
        DriverPool(os=os, mode=mode, nodes=tuple(nodes))
        for (os, mode), nodes in sorted(groups.items())
    )


def _cluster_mode(pools: tuple[DriverPool, ...], fallback: DriverMode) -> str:
    if not pools:
        return str(fallback)
    if len(pools) == 1 or all(p.mode is DriverMode.PREINSTALLED for p in pools):
        return str(pools[0].mode)
    return PER_POOL


def _exposed_preinstalled_findings(pools: Sequence[DriverPool], mode: str) -> list[Finding]:
    """Preinstalled nodes that a per-pool NVIDIADriver of their OS would also select.

    An NVIDIADriver selects by OS ID only; the NVIDIA operator keeps its driver off a node
    only when the node is labelled nvidia.com/gpu.deploy.driver=false."""
    if mode != PER_POOL:
        return []
    driven = {p.os for p in pools if p.mode is not DriverMode.PREINSTALLED}
    exposed = [
        n.name
        for p in pools
        if p.mode is DriverMode.PREINSTALLED and p.os in driven
        for n in p.nodes
        if not n.driver_excluded
    ]
    if not exposed:
        return []
    return [
        Finding(
            Severity.WARNING,
            "PreinstalledNodeNotExcluded",
            f"nodes {', '.join(exposed)} have their own driver, but the per-pool NVIDIADriver of "
            "their OS selects them too and would deploy a second one; label them "
            "nvidia.com/gpu.deploy.driver=false (a worker pool label), which the NVIDIA "
            "operator honours",
        )
    ]


def make_plan(
    spec: GpuSpec,
    facts: ClusterFacts,
    catalog: Catalog,
    owner: Owner | None = None,
) -> Plan:
    """The plan. Never raises for bad cluster data: problems become preflight findings."""
    defaults = catalog.defaults
    findings: list[Finding] = []
    auto = defaults.auto_driver_mode
    assumed_os = OsFamily.GARDENLINUX
    fallback_mode = (
        spec.driver.mode
        if spec.driver.mode is not DriverMode.AUTO
        else DriverMode(auto[str(assumed_os)])
    )
    pools = driver_pools(facts, spec.driver.mode, auto)
    mode = _cluster_mode(pools, fallback_mode)
    os_families = [str(p.os) for p in pools] or [str(assumed_os)]
    driver_os = os_families[0] if len(set(os_families)) == 1 else "mixed"

    if not facts.gpu_nodes:
        findings.append(
            Finding(
                Severity.WARNING,
                "NoGpuNodes",
                "no GPU nodes detected; the GPU stack is installed and prepared for Garden Linux "
                f"({facts.cpu_node_count} CPU-only nodes ignored). Add a GPU worker pool.",
            )
        )
    for node in facts.unknown_os_nodes:
        findings.append(
            Finding(
                Severity.WARNING,
                "UnknownOs",
                f"node {node.name}: OS {node.os_image or '(empty osImage)'!r} is not known to the "
                f"module; using {_node_mode(node, spec.driver.mode, auto)} driver mode",
            )
        )
    if spec.driver.mode is DriverMode.UPSTREAM and any(
        n.os is OsFamily.GARDENLINUX for n in facts.gpu_nodes
    ):
        findings.append(
            Finding(
                Severity.WARNING,
                "UpstreamOnGardenLinux",
                "spec.driver.mode Upstream on Garden Linux nodes: NVIDIA's driver container "
                "compiles on the node and Garden Linux has no compilers; use Auto or Precompiled",
            )
        )
    for node in facts.unknown_machine_type_nodes:
        findings.append(
            Finding(
                Severity.INFO,
                "UnknownMachineType",
                f"node {node.name}: machine type {node.machine_type or '(none)'} is not in the "
                f"registry; GPU detected by {', '.join(node.evidence)}",
            )
        )

    # Installer release and driver version.
    uses_installer = any(
        p.mode is DriverMode.PRECOMPILED and p.os is OsFamily.GARDENLINUX for p in pools
    ) or (not pools and fallback_mode is DriverMode.PRECOMPILED)
    release_tag = spec.driver.installer_release or defaults.installer_release
    installer = catalog.installer(release_tag)
    if installer is None and uses_installer:
        findings.append(
            Finding(
                Severity.ERROR,
                "UnknownInstallerRelease",
                f"spec.driver.installerRelease {release_tag!r} is not adopted by this module "
                f"(known: {', '.join(catalog.installer_releases())})",
            )
        )
    branch = (
        spec.driver.version.split(".")[0]
        if spec.driver.version
        else (installer.default_branch if installer else "")
    )
    full_version: str | None = None
    if spec.driver.version:
        if "." in spec.driver.version:
            full_version = spec.driver.version
        elif installer is not None:
            full_version = installer.full_version(spec.driver.version)
    needs_full = any(p.mode is DriverMode.UPSTREAM for p in pools) or (
        not pools and fallback_mode is DriverMode.UPSTREAM
    )
    if needs_full and spec.driver.version and full_version is None:
        findings.append(
            Finding(
                Severity.ERROR,
                "UnknownDriverVersion",
                f"spec.driver.version {spec.driver.version!r}: the Upstream driver container needs "
                "a full version (e.g. 590.48.01) and no known release maps this branch to one",
            )
        )

    # Chart.
    chart_version = spec.operator_version or defaults.chart_version
    chart = catalog.chart(chart_version)
    if chart is None:
        findings.append(
            Finding(
                Severity.WARNING,
                "UnknownChartVersion",
                f"chart version {chart_version} has no facts in values-rules/charts/; images and "
                "the default driver version cannot be checked before Flux installs it",
            )
        )

    if installer is not None:
        findings.extend(_matrix_findings(pools, installer, branch))

    installer_repo = f"{defaults.installer_repository}/{release_tag}"
    context: dict[str, Any] = {
        "cluster.gpuNodes": len(facts.gpu_nodes),
        "cluster.osFamilies": os_families,
        "driver.mode": mode,
        "driver.os": driver_os,
        "driver.branch": branch,
        "driver.version": full_version,
        "installer.release": release_tag,
        "installer.used": uses_installer,
        "installer.repository": installer_repo,
        "nvidia.repository": defaults.nvidia_driver_repository,
        "source.imageRegistry": spec.source.image_registry,
        "source.imagePullSecrets": list(spec.source.image_pull_secrets),
        "source.imagePullSecretRefs": [{"name": n} for n in spec.source.image_pull_secrets],
        **{
            f"components.{name}": enabled
            for name, enabled in spec.components.model_dump(by_alias=True).items()
        },
    }
    pool_contexts = [
        _pool_context(
            p,
            branch,
            full_version,
            chart,
            installer_repo,
            defaults.os_release_id,
            defaults.nvidia_driver_repository,
            spec.source.image_registry,
        )
        for p in pools
        if p.mode is not DriverMode.PREINSTALLED
    ]
    # Through the models of values-rules/context.md: an undocumented key or a wrong type fails.
    context = RuleContext.checked(context)
    pool_contexts = [PoolContext.checked(c) for c in pool_contexts]
    findings.extend(_exposed_preinstalled_findings(pools, mode))
    if mode == PER_POOL:
        stranded = [
            n.name
            for p in pools
            if p.os is OsFamily.UNKNOWN and p.mode is not DriverMode.PREINSTALLED
            for n in p.nodes
        ]
        if stranded:
            findings.append(
                Finding(
                    Severity.WARNING,
                    "NoDriverForUnknownOs",
                    f"mixed fleet: nodes {', '.join(stranded)} have an OS the module does not "
                    "know, so no per-pool NVIDIADriver can select them and they get no driver; "
                    "label them gpu.kyma-project.io/driver-preinstalled=true if they have one",
                )
            )
    if mode == PER_POOL and chart is None and not full_version:
        findings.append(
            Finding(
                Severity.ERROR,
                "UnknownDriverVersion",
                "mixed fleet: the upstream pool needs a driver version; set spec.driver.version",
            )
        )

    if installer is None and uses_installer:
        values: dict[str, Any] = {}
        provenance: Provenance = {}
        applied: tuple[str, ...] = ()
    else:
        evaluation = evaluate(catalog.rules.rules, context, pool_contexts, catalog.values_file)
        values, provenance, applied = (
            evaluation.values,
            evaluation.provenance,
            evaluation.applied,
        )
        if matches(catalog.rules.mirror_when, context) and spec.source.image_registry:
            if chart is None:
                findings.append(
                    Finding(
                        Severity.ERROR,
                        "MirrorNeedsChartFacts",
                        f"spec.source.imageRegistry is set but chart {chart_version} has no facts "
                        "in values-rules/charts/, so its images cannot be redirected",
                    )
                )
            else:
                mirror_values(values, provenance, chart, spec.source.image_registry)
                applied = (*applied, "image-mirror")
        if spec.values:
            deep_merge(values, spec.values, "spec.values", provenance)
            applied = (*applied, "spec.values")

    chart_repository = spec.source.chart_repository or defaults.chart_repository
    chart_name = spec.source.chart_name
    plan_nodes = tuple(
        GpuNodeStatus(
            name=n.name,
            provider=n.provider,
            machine_type=n.machine_type,
            gpu_model=n.gpu_model,
            gpu_count=n.gpu_count,
            os=str(n.os),
            os_version=n.os_version,
            driver_mode=str(p.mode),
            pool=n.pool,
        )
        for p in pools
        for n in p.nodes
    )
    # What status reports as the driver: none for a host driver; for the NVIDIA driver
    # container, the version the chart installs when the spec names none.
    shown_branch, shown_version = branch, full_version
    if mode == DriverMode.PREINSTALLED:
        shown_branch, shown_version = "", None
    elif mode == DriverMode.UPSTREAM and shown_version is None and chart is not None:
        shown_version = chart.default_driver_version
        shown_branch = shown_version.split(".")[0]
    preflight = Preflight(tuple(findings))
    objects: tuple[dict[str, Any], ...] = ()
    if preflight.verdict != "error":
        objects = flux_objects(
            FluxSettings.from_defaults(defaults),
            chart_repository=chart_repository,
            chart_name=chart_name,
            chart_version=chart_version,
            insecure=spec.source.insecure,
            secret_ref=spec.source.secret_ref,
            values=values,
            owner=owner,
        )
    return Plan(
        nodes=tuple(sorted(plan_nodes, key=lambda n: n.name)),
        pools=pools,
        driver_mode=mode,
        driver_branch=shown_branch,
        driver_version=shown_version,
        installer_release=release_tag if uses_installer else None,
        chart_name=chart_name,
        chart_version=chart_version,
        chart_repository=chart_repository,
        preflight=preflight,
        values=values,
        provenance=provenance,
        rules_applied=applied,
        objects=objects,
    )


def _pool_context(
    pool: DriverPool,
    branch: str,
    full_version: str | None,
    chart: ChartFacts | None,
    installer_repo: str,
    os_release_id: Mapping[str, str],
    nvidia_repo: str,
    mirror: str | None = None,
) -> dict[str, Any]:
    precompiled = pool.mode is DriverMode.PRECOMPILED
    if precompiled:
        version = branch
    else:
        version = full_version or (chart.default_driver_version if chart else "")
    garden_linux = precompiled and pool.os is OsFamily.GARDENLINUX
    repository = installer_repo if garden_linux else nvidia_repo
    return {
        "pool.name": f"gpu-{pool.os}",
        "pool.os": str(pool.os),
        "pool.osReleaseId": os_release_id.get(str(pool.os), str(pool.os)),
        "pool.mode": str(pool.mode),
        "pool.usePrecompiled": precompiled,
        # The NVIDIADriver objects live in extraObjects, which the chart-image mirror does not
        # know: point them at the mirror here.
        "pool.repository": _replace_registry(repository, mirror) if mirror else repository,
        # The installer re-publishes its branch tags for new kernels (docs/operations.md).
        "pool.imagePullPolicy": "Always" if garden_linux else "IfNotPresent",
        "pool.version": version,
    }


def _matrix_findings(
    pools: tuple[DriverPool, ...], installer: InstallerRelease, branch: str
) -> list[Finding]:
    findings: list[Finding] = []
    for pool in pools:
        if pool.mode is not DriverMode.PRECOMPILED or pool.os is not OsFamily.GARDENLINUX:
            continue
        # Once per distinct (version, arch): a pool of 500 nodes has a handful of them.
        answers: dict[tuple[str | None, str], str | None] = {}
        for key in {(n.os_version, n.arch) for n in pool.nodes}:
            answers[key] = installer.problem(key[0], branch, key[1])
        problems = {n.name: answers[(n.os_version, n.arch)] for n in pool.nodes}
        bad = {name: why for name, why in problems.items() if why}
        if not bad:
            continue
        severity = Severity.ERROR if len(bad) == len(pool.nodes) else Severity.WARNING
        for name, why in sorted(bad.items()):
            findings.append(Finding(severity, "NoDriverImage", f"node {name}: {why}"))
    return findings


def _replace_registry(repository: str, mirror: str) -> str:
    """nvcr.io/nvidia/k8s -> <mirror>/nvidia/k8s (the first path element is the registry)."""
    parts = repository.split("/", 1)
    has_host = "." in parts[0] or ":" in parts[0] or parts[0] == "localhost"
    path = parts[1] if has_host and len(parts) > 1 else repository
    return f"{mirror.rstrip('/')}/{path}"


def mirror_values(
    values: dict[str, Any], provenance: Provenance, chart: ChartFacts, mirror: str
) -> None:
    """Point every image of the chart at the mirror, keeping paths (rules' repositories too)."""
    for image in chart.images:
        node: Any = values
        keys = image.path.split(".")
        current = image.repository
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get("repository"), str):
            current = node["repository"]
        fragment: dict[str, Any] = {"repository": _replace_registry(current, mirror)}
        for key in reversed(keys):
            fragment = {key: fragment}
        deep_merge(values, copy.deepcopy(fragment), "image-mirror", provenance)
