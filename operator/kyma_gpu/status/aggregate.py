"""Status aggregation: (plan, observed Flux, DaemonSets, ClusterPolicy, ...) -> Gpu.status.

Pure and total: every input combination gives a status. One function per condition
(status/judge.py), then `summarize` computes Ready from them, as helm-controller does.
Conditions keep their lastTransitionTime while their status does not change, so that an
unchanged world yields a byte-identical status and the operator writes nothing. Every message
is cut to facts.echo.MESSAGE_LIMIT and every reason to REASON_LIMIT whatever they quote, and
every list is bounded, so the status stays below STATUS_SIZE_LIMIT whatever other objects say.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from kyma_gpu.api.conditions import ConditionType, ReadyReason
from kyma_gpu.api.models import (
    DRIVER_VERSION_PATTERN,
    STATUS_COMPONENTS_LIMIT,
    STATUS_NODES_LIMIT,
    ComponentStatus,
    Condition,
    GpuState,
    GpuStatus,
    SharingStatus,
)
from kyma_gpu.api.operations import GpuStack
from kyma_gpu.facts import DriverUpgradeState, ObservedNode
from kyma_gpu.facts.echo import MESSAGE_LIMIT, REASON_LIMIT, cut, listed
from kyma_gpu.facts.stack import (
    DaemonSetFacts,
    FluxObjectFacts,
    OperatorStateFacts,
    PullFailure,
)
from kyma_gpu.plan.plan import Plan
from kyma_gpu.plan.pools import blocked_nodes
from kyma_gpu.status import judge as c
from kyma_gpu.status.deletion import Uninstall, Wait, uninstall_wait
from kyma_gpu.status.judge import NO_GPU_NODES_MESSAGE, Judgement, cond, flux_failed

__all__ = (
    "STATUS_SIZE_LIMIT",
    "ConditionType",
    "Evidence",
    "StatusHook",
    "StatusPart",
    "aggregate",
    "flux_failed",
    "stamp",
    "summarize",
)

_DRIVER_VERSION = re.compile(DRIVER_VERSION_PATTERN)
DRIVER_VERSIONS_SHOWN = 8
"""status.driverVersion names at most this many running versions (a fleet runs one or two):
every DaemonSet of the GPU operator's namespace with the driver's label adds its own."""
STATUS_SIZE_LIMIT = 384 * 1024
"""The Gpu's status, serialized as JSON, stays below this whatever other objects say. It follows
from the bounds, at about 250 kB: 12 conditions of at most MESSAGE_LIMIT characters (52 kB),
status.message (4 kB), 100 nodes of at most 1.4 kB (a 253-character name, node facts cut to
256: 140 kB), 64 components (20 kB), 20 unhealthy nodes (20 kB), 64 pools (10 kB). A quarter
of the API server's 1.5 MiB request limit; tests/unit/test_echo_bounds.py holds it with every
input at its worst."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the status reads of a snapshot for one Gpu and its plan: the plan's HelmRelease and
    chart source, the operands, the GPU nodes, the deletion's progress. status/snapshot.py
    `gpu_status` makes it of a `Snapshot`; `aggregate` reads nothing else of the cluster."""

    helm_release: FluxObjectFacts | None = None
    chart_source: FluxObjectFacts | None = None
    """The chart source (HelmRepository or OCIRepository) the HelmRelease reads."""
    daemonsets: tuple[DaemonSetFacts, ...] = ()
    cluster_policy: OperatorStateFacts | None = None
    gpu_cluster: OperatorStateFacts | None = None
    """The DRA stack's GPUCluster gpu-cluster."""
    observed: Mapping[str, tuple[object, ...] | None] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """The facts of the extensions' list-watches on demand, by resource key (the snapshot's
    `observed`): read by their status parts."""
    nodes_without_features: tuple[str, ...] = ()
    """GPU nodes without the NFD labels the NVIDIA operator needs (facts.node.NFD_LABELS_NEEDED)."""
    image_pulls: tuple[PullFailure, ...] = ()
    """Pods of the GPU operator's namespace that cannot pull an image."""
    gpu_nodes: tuple[ObservedNode, ...] = ()
    """The GPU nodes with their per-node state (the upgrade label, what the extensions keep):
    read by the extensions' status parts."""
    deleting: bool = False
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """The Gpu's annotations of the module's (`GpuObject.annotations`): read by the
    extensions' status parts."""
    uninstall: Uninstall = field(default_factory=Uninstall)
    """Our Flux objects being deleted, and which of them are past the bound."""
    applied: bool = True
    """False when the Flux objects could not be written (the error is in apply_error)."""
    apply_error: str = ""
    driver_upgrades: tuple[tuple[str, DriverUpgradeState], ...] = ()
    """GPU nodes that get the NVIDIA driver and carry an upgrade state label, with the state."""
    driver_version_before: str | None = None
    """status.driverVersion as last written: while a driver rollout replaces pods, the
    versions seen before it still run on some nodes."""


@dataclass(frozen=True, slots=True)
class StatusPart:
    """What an extension adds to the status (its `StatusHook`'s answer): conditions after the
    core's, the deletion's waits before the core's (Uninstalled), and GpuStatus fields. Ready
    stays the core's summary: it reads the waits of a deletion, never the conditions."""

    conditions: tuple[Condition, ...] = ()
    waits: tuple[Wait, ...] = ()
    """Shown while the Gpu is being deleted, in the deletion's order."""
    holds: bool = False
    """One of `waits` holds the deletion before the uninstall: Uninstalled is not shown yet."""
    fields: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    """GpuStatus fields (by their Python names) and their values."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.fields) - set(GpuStatus.model_fields))
        if unknown:
            raise ValueError(f"no GpuStatus fields: {unknown}")
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))


StatusHook = Callable[[Plan, "Evidence", int | None], StatusPart]
"""An extension's status part: (the plan, the evidence, the Gpu's generation) -> what it adds.
Pure."""


def aggregate(
    plan: Plan,
    observed: Evidence,
    generation: int | None,
    previous: Sequence[Condition] = (),
    now: str = "",
    hooks: Sequence[StatusHook] = (),
) -> GpuStatus:
    """The whole status. `previous` carries lastTransitionTime; `now` stamps new transitions;
    `hooks` are the extensions' status parts, in their order."""
    parts = [hook(plan, observed, generation) for hook in hooks]
    judgements = conditions_of(plan, observed, generation)
    deletion = _deletion_waits(observed, parts, generation) if observed.deleting else []
    state, summary = summarize(judgements, deletion, observed.deleting, len(plan.nodes), generation,
                               degraded_message(plan, observed, judgements))  # fmt: skip
    conditions = [summary, *(v.condition for v in judgements),
                  *(c for p in parts for c in p.conditions), *(w for w, _ in deletion)]  # fmt: skip
    status = _status(plan, observed, state, summary.message, generation,
                     stamp(conditions, previous, now))  # fmt: skip
    fields = {name: value for p in parts for name, value in p.fields.items()}
    return status.model_copy(update=fields) if fields else status


def conditions_of(plan: Plan, observed: Evidence, generation: int | None) -> list[Judgement]:
    """NodesDetected, Preflight, ReleaseReady, SourceReady, DriverReady, ComponentsReady,
    PoolsReady."""
    apply_error = None if observed.applied else observed.apply_error
    release = (
        c.uninstalling(generation)
        if observed.deleting
        else c.release_ready(plan, observed.helm_release, apply_error, generation)
    )
    return [
        c.nodes_detected(plan, generation),
        c.preflight(plan, generation),
        release,
        c.source_ready(observed.chart_source, release, generation),
        c.driver_ready(plan, observed.daemonsets, release, generation, observed.driver_upgrades),
        _components(plan, observed, generation),
        c.pools_ready(plan, generation),
    ]


def _components(plan: Plan, observed: Evidence, generation: int | None) -> Judgement:
    """ComponentsReady of the plan's stack: the ClusterPolicy's, or the GPUCluster's."""
    dra = plan.stack is GpuStack.DRA
    if not dra and observed.gpu_cluster is not None and not observed.deleting:
        return c.stack_conflict(generation)
    if observed.image_pulls and not observed.deleting:
        return c.image_pull_failed(observed.image_pulls, generation)
    return c.components_ready(
        observed.gpu_cluster if dra else observed.cluster_policy,
        observed.daemonsets,
        observed.nodes_without_features,
        generation,
        c.GPU_CLUSTER if dra else c.CLUSTER_POLICY,
        len(plan.nodes),
    )


_GATES = (ConditionType.RELEASE_READY, ConditionType.DRIVER_READY, ConditionType.COMPONENTS_READY)
"""The conditions Ready waits for; the others inform (or fail it through their errors)."""


def degraded_message(plan: Plan, observed: Evidence, judgements: Sequence[Judgement]) -> str:
    """With blocked or degraded worker pools: why the Gpu is Warning although a gate waits, when
    the release is ready and as many GPU nodes can run GPU pods as the other pools have (the
    pools' own driver and device plugin pods cannot get ready); else empty."""
    bad = sum(len(nodes) for nodes in blocked_nodes(plan.preflight.findings).values())
    good = len(plan.nodes) - bad
    release = next((v for v in judgements if v.condition.type == ConditionType.RELEASE_READY), None)
    if not bad or good <= 0 or release is None or not release.ready:
        return ""
    if nodes_ready(observed.daemonsets, len(plan.nodes)) < good:
        return ""
    pools = next(v for v in judgements if v.condition.type == ConditionType.POOLS_READY)
    served = f"the GPU stack serves the {good} GPU nodes of the other pools"
    return f"{served}; {pools.condition.message}"


def summarize(
    judgements: Sequence[Judgement],
    deletion: Sequence[tuple[Condition, GpuState]],
    deleting: bool,
    gpu_nodes: int,
    generation: int | None,
    degraded: str = "",
) -> tuple[GpuState, Condition]:
    """The state and the Ready condition: deleting, else the first error, else ready (with
    the first warning), else degraded (blocked worker pools keep a gate waiting, the others are
    served: degraded_message), else the first gate still waiting."""
    errors = [v.error for v in judgements if v.error]
    warnings = [v.warning for v in judgements if v.warning]
    gates = [v.condition for v in judgements if v.condition.type in _GATES]
    if deleting:
        state, message = _deletion_summary(deletion)
        return state, cond(ConditionType.READY, "False", ReadyReason.DELETING, message, generation)
    if errors:
        return GpuState.ERROR, cond(ConditionType.READY, "False", ReadyReason.ERROR, errors[0],
                                    generation)  # fmt: skip
    waiting = next((g for g in gates if g.status != "True"), None)
    if waiting is None:
        state = GpuState.WARNING if warnings else GpuState.READY
        message = warnings[0] if warnings else _ready_message(gpu_nodes)
        return state, cond(ConditionType.READY, "True", ReadyReason.READY, message, generation)
    if degraded:
        return GpuState.WARNING, cond(ConditionType.READY, "True", ReadyReason.DEGRADED, degraded,
                                      generation)  # fmt: skip
    message = f"{waiting.type}: {waiting.message}" if waiting.message else waiting.type
    return GpuState.PROCESSING, cond(ConditionType.READY, "False", ReadyReason.PROCESSING,
                                     message, generation)  # fmt: skip


def _status(
    plan: Plan,
    observed: Evidence,
    state: GpuState,
    message: str,
    generation: int | None,
    conditions: list[Condition],
) -> GpuStatus:
    hr = observed.helm_release
    gpu_nodes = len(plan.nodes)
    ready_nodes = nodes_ready(observed.daemonsets, gpu_nodes)
    release = plan.helm_release["metadata"] if plan.helm_release else None
    return GpuStatus(
        state=state,
        message=cut(message, MESSAGE_LIMIT),
        observed_generation=generation,
        conditions=conditions,
        gpu_node_count=gpu_nodes,
        gpu_nodes_ready=ready_nodes,
        ready_nodes=f"{ready_nodes}/{gpu_nodes}",
        nodes=list(plan.nodes[:STATUS_NODES_LIMIT]),
        components=[
            ComponentStatus(name=d.name, ready=d.ready, desired=d.desired, available=d.available)
            for d in sorted(observed.daemonsets, key=lambda d: d.name)[:STATUS_COMPONENTS_LIMIT]
        ],
        component_count=len(observed.daemonsets),
        driver_mode=plan.driver_mode,
        driver_version=running_driver_version(observed.daemonsets, observed.driver_version_before),
        desired_driver_version=plan.driver_summary or None,
        installer_release=plan.installer_release,
        chart_version=plan.chart_version,
        installed_chart_version=hr.installed_chart_version if hr else None,
        helm_release=f"{release['namespace']}/{release['name']}" if release else None,
        stack=plan.stack,
        sharing=sharing_status(plan, observed),
    )


def sharing_status(plan: Plan, observed: Evidence) -> SharingStatus | None:
    """What the device plugin is told to share, and whether it runs so: the ClusterPolicy
    names the configuration, and the device plugin and MPS control daemon DaemonSets mount it
    and have rolled out with it."""
    sharing = plan.sharing
    if sharing is None:
        return None
    policy = observed.cluster_policy
    named = policy is not None and policy.device_plugin_config == sharing.config_map
    plugins = [d for d in observed.daemonsets if d.device_plugin]
    consumers = [d for d in observed.daemonsets if d.sharing_consumer]
    rolled = bool(plugins) and all(
        sharing.config_map in d.config_maps and d.rolled_out and d.ready for d in consumers
    )
    return SharingStatus(mode=sharing.mode, replicas=sharing.replicas,
                         profiles=list(sharing.profiles), config_map=sharing.config_map,
                         active=named and rolled)  # fmt: skip


def _ready_message(gpu_nodes: int) -> str:
    if gpu_nodes:
        return "the GPU stack is installed and ready"
    return "the GPU stack is installed and ready; " + NO_GPU_NODES_MESSAGE.split(". ", 1)[0]


def nodes_ready(sets: Sequence[DaemonSetFacts], gpu_nodes: int) -> int:
    """GPU nodes that can run GPU pods: the device plugin's ready pods (it registers
    nvidia.com/gpu once the driver and the toolkit on its node work), else the driver
    DaemonSets' ready pods. Capped at the GPU nodes the module counts."""
    counted = [d for d in sets if d.device_plugin] or [d for d in sets if d.driver]
    return min(gpu_nodes, sum(d.number_ready for d in counted))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def running_driver_version(sets: Sequence[DaemonSetFacts], before: str | None) -> str | None:
    """The driver versions whose pods run, from the driver DaemonSets' images: a DaemonSet's
    version once some of its pods run its current template. While one rolls out (the NVIDIA
    operator's driver DaemonSets update OnDelete, node by node), the versions seen `before`
    stay listed: its other pods still run them."""
    versions: set[str] = set()
    rolling = False
    for ds in sets:
        if not ds.driver or ds.desired == 0:
            continue
        if ds.version and ds.current and ds.updated > 0:
            versions.add(ds.version)
        rolling = rolling or not ds.rolled_out
    if rolling and before:
        versions.update(v.strip() for v in before.split(",") if _DRIVER_VERSION.match(v.strip()))
    return listed(sorted(versions, key=_version_key), DRIVER_VERSIONS_SHOWN) or None


def _deletion_waits(
    observed: Evidence, parts: Sequence[StatusPart], generation: int | None
) -> list[tuple[Condition, GpuState]]:
    """The deletion's conditions in the order it meets them (the extensions' waits, then
    Uninstalled unless one of theirs holds it), each with the state it implies."""
    waits = [w for p in parts for w in p.waits]
    uninstall = None if any(p.holds for p in parts) else uninstall_wait(observed.uninstall)
    if uninstall is not None:
        waits.append(uninstall)
    return [(Condition(type=str(w.type), status=w.status, reason=str(w.reason),
                       message=w.message, observed_generation=generation), w.state)
            for w in waits]  # fmt: skip


def _deletion_summary(deletion: Sequence[tuple[Condition, GpuState]]) -> tuple[GpuState, str]:
    """The worst wait decides the state (Error, then Warning); otherwise the latest open wait
    says what happens."""
    rank = {GpuState.ERROR: 0, GpuState.WARNING: 1}
    worst = min((w for w in deletion if w[1] in rank), key=lambda w: rank[w[1]], default=None)
    if worst is not None:
        return worst[1], worst[0].message
    current = next((c for c, _ in reversed(deletion) if c.status != "True"), None)
    return GpuState.DELETING, current.message if current else "uninstalling the GPU stack"


def stamp(
    conditions: Sequence[Condition], previous: Sequence[Condition], now: str
) -> list[Condition]:
    """The conditions with lastTransitionTime (kept from `previous` while the status holds),
    their messages and reasons cut to MESSAGE_LIMIT and REASON_LIMIT."""
    before = {old.type: old for old in previous}
    out = []
    for condition in conditions:
        old = before.get(condition.type)
        kept = old is not None and old.status == condition.status and old.last_transition_time
        since = old.last_transition_time if kept and old is not None else (now or None)
        out.append(condition.model_copy(update={
            "last_transition_time": since,
            "message": cut(condition.message, MESSAGE_LIMIT),
            "reason": cut(condition.reason, REASON_LIMIT),
        }))  # fmt: skip
    return out
