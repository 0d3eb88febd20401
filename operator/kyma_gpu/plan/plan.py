"""(Gpu spec, cluster facts) -> Plan: driver modes, preflight verdict, chart values, Flux objects.

Pure. The same function serves the operator and the offline `kyma-gpu plan` command. The steps:
resolve the driver modes, run the preflight checks, build the rule context, evaluate the rules,
pin the images by the release's digests, point them at a mirror, build the Flux objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

from kyma_gpu.api.conditions import PreflightReason
from kyma_gpu.api.models import ClusterDriverMode, GpuNodeStatus, GpuSpec, HealthSpec
from kyma_gpu.api.operations import GpuStack, SharingMode
from kyma_gpu.facts.cluster import ClusterFacts
from kyma_gpu.plan.allowed import (
    AllowedSources,
    Wanted,
    image_findings,
    pinned_digest,
    platform_spec,
    source_findings,
)
from kyma_gpu.plan.driver import DriverPool, Resolved, resolve
from kyma_gpu.plan.features import FEATURE_CHECKS
from kyma_gpu.plan.flux_objects import FluxSettings, Owner, flux_objects
from kyma_gpu.plan.mirror import mirror_values, pin_digests
from kyma_gpu.plan.narrowing import for_version, post_renderers
from kyma_gpu.plan.node_checks import NODE_CHECKS
from kyma_gpu.plan.pools import WorkerPool
from kyma_gpu.plan.preflight import (
    CHECKS,
    Finding,
    Preflight,
    Severity,
    Verdict,
    preflight_findings,
)
from kyma_gpu.plan.rule_context import Contexts, rule_context
from kyma_gpu.plan.sharing import config_map_name, device_plugin_configs
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.engine import Provenance, deep_merge, evaluate, matches
from kyma_gpu.rules.installer import branch_of

__all__ = (
    "AllowedSources",
    "DriverPool",
    "Finding",
    "Plan",
    "PlanMemo",
    "Preflight",
    "Severity",
    "Verdict",
    "make_plan",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SharingPlan:
    """spec.sharing as the device plugin gets it."""

    mode: SharingMode
    replicas: int | None
    profiles: tuple[str, ...]
    config_map: str
    """The ConfigMap the chart creates (a hash of its data in the name)."""

    def document(self) -> dict[str, Any]:
        return {"mode": str(self.mode), "replicas": self.replicas,
                "profiles": list(self.profiles), "configMap": self.config_map}  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """Everything the operator will ask Flux for, and why."""

    nodes: tuple[GpuNodeStatus, ...]
    pools: tuple[DriverPool, ...]
    driver_mode: ClusterDriverMode
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
    stack: GpuStack = GpuStack.DEVICE_PLUGIN
    sharing: SharingPlan | None = None
    """None unless spec.sharing configures the device plugin."""
    worker_pools: tuple[WorkerPool, ...] = ()
    """The GPU nodes by Gardener worker pool."""
    health: HealthSpec = field(default_factory=HealthSpec)
    """spec.health: what the manager does to nodes whose GPUs are unhealthy."""
    auto_upgrade: bool = True
    """spec.driver.upgradePolicy.autoUpgrade: the NVIDIA upgrade controller replaces driver
    pods that are not on their DaemonSet's template."""

    @property
    def helm_release(self) -> dict[str, Any] | None:
        return next((o for o in self.objects if o["kind"] == "HelmRelease"), None)

    @property
    def source(self) -> dict[str, Any] | None:
        return next((o for o in self.objects if o["kind"] != "HelmRelease"), None)

    @property
    def driver_summary(self) -> str:
        """The version shown in status: a branch for precompiled, a full version upstream."""
        if self.driver_mode is ClusterDriverMode.PRECOMPILED:
            return self.driver_branch
        return self.driver_version or self.driver_branch

    def document(self) -> dict[str, Any]:
        """The plan as the YAML document `kyma-gpu plan` prints."""
        blocked = self.preflight.blocked
        return {
            "preflight": {
                "verdict": str(self.preflight.verdict),
                **({"blockedPools": list(blocked)} if blocked else {}),
                "findings": [_finding_document(f) for f in self.preflight.findings],
            },
            "nodes": [n.model_dump(by_alias=True, exclude_none=True) for n in self.nodes],
            "pools": [self._pool_document(p) for p in self.worker_pools],
            "driver": {
                "mode": str(self.driver_mode),
                "branch": self.driver_branch,
                "version": self.driver_version,
                "installerRelease": self.installer_release,
                "pools": [_driver_pool_document(p) for p in self.pools],
            },
            "chart": {
                "name": self.chart_name,
                "version": self.chart_version,
                "repository": self.chart_repository,
            },
            "stack": str(self.stack),
            **({"sharing": self.sharing.document()} if self.sharing else {}),
            "rulesApplied": list(self.rules_applied),
            "values": self.values,
            "provenance": dict(sorted(self.provenance.items())),
            "objects": list(self.objects),
        }

    def pool_state(self, name: str) -> str:
        """blocked (no node gets a working GPU), degraded (some do not), or ok."""
        if name in self.preflight.blocked:
            return "blocked"
        return "degraded" if name in self.preflight.degraded else "ok"

    def _pool_document(self, pool: WorkerPool) -> dict[str, Any]:
        reasons = {str(f.reason) for f in self.preflight.findings if f.pool == pool.name}
        return {
            "name": pool.name,
            "nodes": len(pool.nodes),
            "verdict": self.pool_state(pool.name),  # the document's key, kept for its readers
            "reasons": sorted(reasons),
        }


def _finding_document(f: Finding) -> dict[str, Any]:
    where = {"pool": f.pool, "nodes": list(f.nodes)} if f.pool is not None else {}
    return {"severity": str(f.severity), "reason": str(f.reason), **where, "message": f.message}


def _driver_pool_document(p: DriverPool) -> dict[str, Any]:
    version = {"version": p.version, "versionSource": str(p.source)} if p.source else {}
    return {"os": str(p.os), "mode": str(p.mode), **version, "nodes": [n.name for n in p.nodes]}


@dataclass(frozen=True, slots=True)
class Values:
    """The chart values, where each came from, and the rules that made them."""

    values: dict[str, Any] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=dict)
    applied: tuple[str, ...] = ()


def make_plan(
    spec: GpuSpec,
    facts: ClusterFacts,
    catalog: Catalog,
    owner: Owner | None = None,
    allowed_sources: AllowedSources | None = None,
) -> Plan:
    """The plan. Never raises for bad cluster data: problems become preflight findings.
    `allowed_sources`: the chart sources a cluster administrator allows (None: NVIDIA's only)."""
    allowed_sources = allowed_sources or AllowedSources()
    resolved = resolve(platform_spec(spec, allowed_sources), facts, catalog)
    wanted = wanted_source(resolved)
    supported = catalog.chart_versions()
    findings = source_findings(
        wanted, allowed_sources, supported, catalog.defaults.module_namespace
    )
    findings += image_findings(spec, allowed_sources)
    findings += preflight_findings(resolved, (*CHECKS, *FEATURE_CHECKS, *NODE_CHECKS))
    values = evaluate_rules(resolved, rule_context(resolved), findings)
    pools = tuple(p.name for p in resolved.worker_pools)
    preflight = Preflight(tuple(findings), pools)
    if preflight.verdict is Verdict.ERROR:
        return _assemble(resolved, preflight, values, ())
    defaults, source = resolved.catalog.defaults, resolved.spec.source
    narrowings = for_version(resolved.catalog.chart_rbac.narrowings, resolved.chart_version)
    objects = flux_objects(
        FluxSettings.from_defaults(defaults),
        chart_repository=source.chart_repository or defaults.chart_repository,
        chart_name=source.chart_name,
        chart_version=resolved.chart_version,
        insecure=source.insecure,
        secret_ref=source.secret_ref,
        values=values.values,
        owner=owner,
        digest=pinned_digest(wanted, allowed_sources, supported),
        post_renderers=post_renderers(narrowings),
    )
    return _assemble(resolved, preflight, values, objects)


def wanted_source(r: Resolved) -> Wanted:
    """The chart source the Gpu asks for, the module's defaults filled in."""
    source = r.spec.source
    return Wanted(
        url=source.chart_repository or r.catalog.defaults.chart_repository,
        chart_name=source.chart_name,
        version=r.chart_version,
        secret_ref=source.secret_ref,
        insecure=source.insecure,
    )


def evaluate_rules(r: Resolved, contexts: Contexts, findings: list[Finding]) -> Values:
    """Rules, then the release's digests, then the mirror, then spec.values. Nothing while the
    installer is unknown."""
    if r.installer is None and r.uses_installer:
        return Values()
    rules = r.catalog.rules
    evaluation = evaluate(rules.rules, contexts.cluster, contexts.pools, r.catalog.values_file)
    values, provenance = evaluation.values, evaluation.provenance
    applied = evaluation.applied
    if r.chart is not None and r.catalog.image_digests:
        pin_digests(values, provenance, r.chart, r.catalog.image_digests)
        applied = (*applied, "image-digests")
    if matches(rules.mirror_when, contexts.cluster) and r.spec.source.image_registry:
        mirrored = mirror(r, values, provenance)
        findings.extend(mirrored)
        if not mirrored:
            applied = (*applied, "image-mirror")
    if r.spec.values:
        deep_merge(values, r.spec.values, "spec.values", provenance)
        applied = (*applied, "spec.values")
    findings.extend(template_findings(values))
    return Values(values, provenance, applied)


TEMPLATE_OPEN = "{{"


def template_findings(values: dict[str, Any]) -> list[Finding]:
    """The chart renders extraObjects with `tpl`: a string there holding {{ would run as
    template code at install (`{{ .Values.x | b64dec }}` emits any YAML). The typed fields
    that reach them cannot hold braces; this is the check that they never do."""
    found = []
    stack: list[tuple[str, Any]] = [("extraObjects", values.get("extraObjects"))]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            stack += [(f"{path}.{k}", v) for k, v in node.items()]
            stack += [(f"{path}.<key {k}>", k) for k in node]
        elif isinstance(node, list):
            stack += [(f"{path}[{i}]", v) for i, v in enumerate(node)]
        elif isinstance(node, str) and TEMPLATE_OPEN in node:
            found.append(path)
    if not found:
        return []
    message = (
        f"the chart's values {', '.join(sorted(found))} hold Helm template delimiters "
        f"({TEMPLATE_OPEN}): the chart renders extraObjects with tpl, so they would run as "
        "template code at install; nothing is applied. This is a defect of the module"
    )
    return [Finding(Severity.ERROR, PreflightReason.TEMPLATE_IN_EXTRA_OBJECTS, message)]


def mirror(r: Resolved, values: dict[str, Any], provenance: Provenance) -> list[Finding]:
    """Point the chart's images at spec.source.imageRegistry; a finding when it cannot."""
    registry = r.spec.source.image_registry
    if registry is None:
        return []
    if r.chart is None:
        message = (
            f"spec.source.imageRegistry is set but chart {r.chart_version} has no facts "
            "in values-rules/charts/, so its images cannot be redirected"
        )
        return [Finding(Severity.ERROR, PreflightReason.MIRROR_NEEDS_CHART_FACTS, message)]
    mirror_values(values, provenance, r.chart, registry)
    return []


def _node_statuses(pools: tuple[DriverPool, ...]) -> tuple[GpuNodeStatus, ...]:
    statuses = (
        GpuNodeStatus(
            name=n.name,
            provider=n.provider,
            machine_type=n.machine_type,
            gpu_model=n.gpu_model,
            gpu_count=n.gpu_count,
            os=str(n.os),
            os_version=n.os_version,
            arch=n.arch,
            driver_mode=str(p.mode),
            pool=n.pool,
        )
        for p in pools
        for n in p.nodes
    )
    return tuple(sorted(statuses, key=lambda n: n.name))


def _shown_driver(r: Resolved) -> tuple[str, str | None]:
    """What status reports as the driver: none for a host driver; for the NVIDIA driver
    container, the version the chart installs when the spec names none."""
    if r.mode is ClusterDriverMode.PREINSTALLED:
        return "", None
    if r.mode is ClusterDriverMode.UPSTREAM and r.full_version is None and r.chart is not None:
        version = r.chart.default_driver_version
        return branch_of(version), version
    if r.mode is ClusterDriverMode.PRECOMPILED:
        return r.branch, _precompiled_version(r)
    return r.branch, r.full_version


def _precompiled_version(r: Resolved) -> str | None:
    """The full version spec.driver.version means for the installer: as given, or the newest
    of its branch that the release builds."""
    version = r.spec.driver.version
    if not version or "." in version:
        return version
    return r.installer.full_version(version) if r.installer is not None else None


def _assemble(
    r: Resolved, preflight: Preflight, values: Values, objects: tuple[dict[str, Any], ...]
) -> Plan:
    shown_branch, shown_version = _shown_driver(r)
    return Plan(
        nodes=_node_statuses(r.pools),
        pools=r.pools,
        driver_mode=r.mode,
        driver_branch=shown_branch,
        driver_version=shown_version,
        installer_release=r.release_tag if r.uses_installer else None,
        chart_name=r.spec.source.chart_name,
        chart_version=r.chart_version,
        chart_repository=r.spec.source.chart_repository or r.catalog.defaults.chart_repository,
        preflight=preflight,
        values=values.values,
        provenance=values.provenance,
        rules_applied=values.applied,
        objects=objects,
        stack=r.spec.stack,
        sharing=_sharing(r.spec),
        worker_pools=r.worker_pools,
        health=r.spec.health,
        auto_upgrade=r.spec.driver.upgrade_policy.auto_upgrade,
    )


def _sharing(spec: GpuSpec) -> SharingPlan | None:
    sharing = spec.sharing
    if not sharing.configured:
        return None
    configs = device_plugin_configs(sharing, spec.components.mig_strategy)
    profiles = tuple(p.name for p in sharing.profiles)
    return SharingPlan(sharing.mode, sharing.replicas, profiles, config_map_name(configs))


PlanKey = tuple[str, ClusterFacts, Owner, str]

KEPT = 4
"""Plans kept: the current one and a few before it (a spec edited back and forth)."""


@dataclass
class PlanMemo:
    """make_plan, remembered for the last KEPT keys (cachetools' LRU): the spec, the planning
    facts, the owner and the chart sources allowed. The Loop owns one; nothing else remembers.

    The facts hold no per-node state (facts/node.py ObservedNode keeps it apart), so a change
    of a node's upgrade label, devices or mark leaves the key equal and makes no new plan.
    The facts' hash is a summary (ClusterFacts.__hash__) and equal facts cost an identity check
    per node: the store keeps the object of an unchanged Node, and a hit is stored again under
    the new key, so that a node whose facts were made again compares by identity from then
    on."""

    catalog: Catalog
    plans: LRUCache[PlanKey, Plan] = field(default_factory=lambda: LRUCache(maxsize=KEPT))

    def plan(
        self, spec: GpuSpec, facts: ClusterFacts, owner: Owner, allowed_sources: AllowedSources
    ) -> Plan:
        key = (spec.model_dump_json(), facts, owner, allowed_sources.key)
        plan = self.plans.pop(key, None)
        if plan is None:
            plan = make_plan(spec, facts, self.catalog, owner, allowed_sources)
        self.plans[key] = plan
        return plan
