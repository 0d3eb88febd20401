"""Status aggregation: (plan, observed Flux, DaemonSets, ClusterPolicy, workloads) -> Gpu.status.

Pure and total: every input combination gives a status. Conditions keep their
lastTransitionTime while their status does not change, so that an unchanged world yields a
byte-identical status and the operator writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from kyma_gpu.api.models import (
    DRIVER_VERSION_PATTERN,
    STATUS_NODES_LIMIT,
    ComponentStatus,
    Condition,
    ConditionStatus,
    GpuState,
    GpuStatus,
)
from kyma_gpu.plan.plan import Plan, Preflight, Severity
from kyma_gpu.status.deletion import Uninstall, uninstall_wait, workloads_wait
from kyma_gpu.status.observed import (
    ClusterPolicyFacts,
    DaemonSetFacts,
    FluxCondition,
    HelmReleaseFacts,
)


class ConditionType(StrEnum):
    """The conditions on Gpu.status, with the reasons each may carry."""

    READY = "Ready"
    """Summary: True when the GPU stack is installed and every component is ready. Reasons:
    Ready | Processing | Error | Deleting | NotTheSingleton | InvalidSpec."""
    NODES_DETECTED = "NodesDetected"
    """GpuNodesFound | NoGpuNodes."""
    PREFLIGHT = "Preflight"
    """PreflightPassed, or the worst finding's reason (NoDriverImage, UnknownOs, ...)."""
    RELEASE_READY = "ReleaseReady"
    """Mirrors the HelmRelease Ready condition (InstallSucceeded, InstallFailed, SourceNotReady,
    ...), or NotApplied | ApplyFailed | ReleasePending | Progressing | Uninstalling."""
    DRIVER_READY = "DriverReady"
    """DriverDaemonSetsReady | DriverPreinstalled | DriverNotReady | WaitingForDriver |
    NoGpuNodes."""
    COMPONENTS_READY = "ComponentsReady"
    """ComponentsReady | ComponentsNotReady | NodeFeaturesMissing | WaitingForComponents."""
    FLUX_AVAILABLE = "FluxAvailable"
    """Which Flux the module relies on (status/flux.py): ModuleFlux | ClusterFlux, or
    InstallingFlux | FluxIncompatible | Unknown."""
    SOURCE_READY = "SourceReady"
    """Mirrors the chart source's Ready condition (Succeeded, FetchFailed, ...) or
    WaitingForSource | Progressing. False with a healthy release: installed, no upgrades."""
    WORKLOADS_PROTECTED = "WorkloadsProtected"
    """During deletion: GpuWorkloadsRunning | NoGpuWorkloads | ProtectionSkipped."""
    UNINSTALLED = "Uninstalled"
    """During deletion, while Flux objects remain: UninstallInProgress | UninstallStalled."""


_DRIVER_VERSION = re.compile(DRIVER_VERSION_PATTERN)

# HelmRelease Ready=False reasons that mean "still working on it", not a failure.
_FLUX_PROGRESS_REASONS = {"Progressing", "ProgressingWithRetry", "DependencyNotReady"}
# helm-controller says SourceNotReady both for a broken chart source (a missing version, an
# unreachable repository: a failure) and while source-controller catches up with a new chart
# version (not a failure). These are the messages of the latter (helm-controller v1.6 isReady).
_SOURCE_CATCHING_UP = (
    "latest generation of object has not been reconciled",
    "does not have an artifact",
)


def _in_progress(ready: FluxCondition) -> bool:
    if ready.reason == "SourceNotReady":
        return ready.message.endswith(_SOURCE_CATCHING_UP)
    return ready.reason in _FLUX_PROGRESS_REASONS


def flux_failed(reason: str, message: str) -> bool:
    """A Flux Ready=False (as mirrored into ReleaseReady or SourceReady) that is a failure,
    not Flux still working on it."""
    return not _in_progress(FluxCondition("Ready", "False", reason, message, None))


class NodesReason(StrEnum):
    """Reasons of NodesDetected."""

    GPU_NODES_FOUND = "GpuNodesFound"
    NO_GPU_NODES = "NoGpuNodes"


NO_GPU_NODES_MESSAGE = (
    "no GPU nodes right now; the GPU worker pool may be scaled to zero (autoscaler minimum 0). "
    "The GPU stack stays installed and serves GPU nodes as they join; if the cluster has no GPU "
    "worker pool, add one"
)
"""NodesDetected=False is a normal state: a pool that scales to zero has no nodes for hours."""
_INFORMATIVE_FINDINGS = {str(NodesReason.NO_GPU_NODES)}
"""Plan findings that the status shows as information, not as a Warning."""


def _status_findings(plan: Plan) -> Preflight:
    """The plan's findings as the status weighs them: no GPU nodes is information."""
    return Preflight(
        tuple(
            replace(f, severity=Severity.INFO) if f.reason in _INFORMATIVE_FINDINGS else f
            for f in plan.preflight.findings
        )
    )


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything the operator saw in the cluster, in compact form."""

    helm_release: HelmReleaseFacts | None = None
    source: HelmReleaseFacts | None = None
    """The chart source (HelmRepository or OCIRepository) the HelmRelease reads."""
    daemonsets: tuple[DaemonSetFacts, ...] = ()
    cluster_policy: ClusterPolicyFacts | None = None
    gpu_workloads: tuple[str, ...] = ()
    """namespace/name of running pods that request nvidia.com/gpu."""
    nodes_without_features: tuple[str, ...] = ()
    """GPU nodes without the NFD labels the NVIDIA operator needs (facts.node.NFD_LABELS_NEEDED)."""
    deleting: bool = False
    skip_protection: bool = False
    """The Gpu's annotation lets the deletion go ahead while pods use GPUs."""
    uninstall: Uninstall = field(default_factory=Uninstall)
    """Our Flux objects being deleted, and which of them are past the bound."""
    applied: bool = True
    """False when the Flux objects could not be written (the error is in apply_error)."""
    apply_error: str = ""
    extra_findings: tuple[str, ...] = field(default_factory=tuple)
    driver_version_before: str | None = None
    """status.driverVersion as last written: while a driver rollout replaces pods, the
    versions seen before it still run on some nodes."""


def _cond(
    type_: ConditionType, status: ConditionStatus, reason: str, message: str, generation: int | None
) -> Condition:
    return Condition(
        type=str(type_),
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
    )


def _features_missing_message(nodes: Sequence[str], policy: ClusterPolicyFacts | None) -> str:
    shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    state = policy.state if policy and policy.state else "not reported"
    return (
        f"ClusterPolicy cluster-policy is {state}, and GPU nodes lack the node-feature-discovery "
        f"labels system-os_release.ID and kernel-version.full, which the NVIDIA operator needs "
        f"to pick a driver: {shown}. Check that an NFD worker pod runs on each (kubectl get pods "
        f"-n gpu-operator -l role=worker -o wide); a taint it does not tolerate keeps it off"
    )


def _release_condition(
    plan: Plan, observed: Observed, generation: int | None
) -> tuple[Condition, bool]:
    """(ReleaseReady condition, is a hard failure)."""
    hr = observed.helm_release
    if plan.helm_release is None:
        return (
            _cond(
                ConditionType.RELEASE_READY,
                "False",
                "NotApplied",
                "the plan has errors; the HelmRelease was not written (see Preflight)",
                generation,
            ),
            False,
        )
    if not observed.applied:
        return (
            _cond(
                ConditionType.RELEASE_READY,
                "False",
                "ApplyFailed",
                f"writing the Flux objects failed: {observed.apply_error}",
                generation,
            ),
            True,
        )
    name = f"{plan.helm_release['metadata']['namespace']}/{plan.helm_release['metadata']['name']}"
    if hr is None:
        return (
            _cond(
                ConditionType.RELEASE_READY,
                "Unknown",
                "ReleasePending",
                f"waiting for Flux to pick up HelmRelease {name}",
                generation,
            ),
            False,
        )
    ready = hr.condition("Ready")
    # A condition counts only when it speaks of the current generation: its own
    # observedGeneration (Flux stamps it on every condition), else the status's.
    seen = (
        ready.observed_generation
        if ready is not None and ready.observed_generation is not None
        else hr.observed_generation
    )
    if ready is None or seen is None or seen < hr.generation:
        return (
            _cond(
                ConditionType.RELEASE_READY,
                "Unknown",
                "Progressing",
                f"HelmRelease {name}: Flux has not yet reconciled generation {hr.generation}",
                generation,
            ),
            False,
        )
    stalled = hr.condition("Stalled")
    reconciling = hr.condition("Reconciling")
    message = f"HelmRelease {name}: {ready.message}".rstrip(": ")
    if ready.status == "True":
        return _cond(ConditionType.RELEASE_READY, "True", ready.reason, message, generation), False
    if ready.status == "False":
        failed = (stalled is not None and stalled.status == "True") or not _in_progress(ready)
        return (
            _cond(
                ConditionType.RELEASE_READY,
                "False",
                ready.reason or "NotReady",
                message,
                generation,
            ),
            failed,
        )
    reason = (reconciling.reason if reconciling and reconciling.status == "True" else "") or (
        ready.reason or "Progressing"
    )
    return _cond(ConditionType.RELEASE_READY, "Unknown", reason, message, generation), False


def _source_condition(observed: Observed, generation: int | None) -> Condition:
    src = observed.source
    if src is None:
        return _cond(
            ConditionType.SOURCE_READY,
            "Unknown",
            "WaitingForSource",
            "no chart source observed yet",
            generation,
        )
    name = f"{src.kind} {src.namespace}/{src.name}"
    ready = src.condition("Ready")
    seen = (
        ready.observed_generation
        if ready and ready.observed_generation is not None
        else src.observed_generation
    )
    if ready is None or seen is None or seen < src.generation:
        return _cond(
            ConditionType.SOURCE_READY,
            "Unknown",
            "Progressing",
            f"{name}: Flux has not yet reconciled generation {src.generation}",
            generation,
        )
    status: ConditionStatus = "Unknown"
    if ready.status == "True":
        status = "True"
    elif ready.status == "False" and not _in_progress(ready):
        status = "False"
    message = f"{name}: {ready.message}".rstrip(": ")
    return _cond(ConditionType.SOURCE_READY, status, ready.reason or "Unknown", message, generation)


def _daemonset_summary(sets: Sequence[DaemonSetFacts]) -> str:
    return ", ".join(f"{d.name} ({d.available}/{d.desired})" for d in sets)


def aggregate(
    plan: Plan,
    observed: Observed,
    generation: int | None,
    previous: Sequence[Condition] = (),
    now: str = "",
) -> GpuStatus:
    """The whole status. `previous` carries lastTransitionTime; `now` stamps new transitions."""
    conditions: list[Condition] = []
    warnings: list[str] = []
    errors: list[str] = []

    gpu_nodes = len(plan.nodes)
    if gpu_nodes:
        pools = ", ".join(f"{len(p.nodes)} {p.os} ({p.mode})" for p in plan.pools)
        conditions.append(
            _cond(
                ConditionType.NODES_DETECTED,
                "True",
                "GpuNodesFound",
                f"{gpu_nodes} GPU node{'s' if gpu_nodes != 1 else ''}: {pools}",
                generation,
            )
        )
    else:
        conditions.append(
            _cond(
                ConditionType.NODES_DETECTED,
                "False",
                NodesReason.NO_GPU_NODES,
                NO_GPU_NODES_MESSAGE,
                generation,
            )
        )

    preflight = _status_findings(plan)
    worst = preflight.worst()
    if worst is None or worst.severity is Severity.INFO:
        info = _joined([f.message for f in preflight.findings])
        conditions.append(
            _cond(ConditionType.PREFLIGHT, "True", "PreflightPassed", info, generation)
        )
    else:
        notes = [f.message for f in preflight.findings if f.severity is worst.severity]
        conditions.append(
            _cond(ConditionType.PREFLIGHT, "False", worst.reason, _joined(notes), generation)
        )
        (errors if worst.severity is Severity.ERROR else warnings).append(worst.message)

    release, release_failed = _release_condition(plan, observed, generation)
    if observed.deleting:
        release = _cond(
            ConditionType.RELEASE_READY,
            "Unknown",
            "Uninstalling",
            "the Gpu is being deleted; Flux uninstalls the release once the HelmRelease is gone",
            generation,
        )
        release_failed = False
    conditions.append(release)
    if release_failed:
        errors.append(release.message)
    source = _source_condition(observed, generation)
    conditions.append(source)
    if source.status == "False" and not release_failed:
        (warnings if release.status == "True" else errors).append(source.message)

    driver_sets = [d for d in observed.daemonsets if d.driver]
    other_sets = [d for d in observed.daemonsets if not d.driver]
    if plan.driver_mode == "Preinstalled":
        driver = _cond(
            ConditionType.DRIVER_READY,
            "True",
            "DriverPreinstalled",
            "the nodes' own driver is used",
            generation,
        )
    elif not driver_sets:
        driver = _cond(
            ConditionType.DRIVER_READY,
            "True" if gpu_nodes == 0 and release.status == "True" else "Unknown",
            "NoGpuNodes" if gpu_nodes == 0 else "WaitingForDriver",
            "no driver DaemonSet yet" if gpu_nodes else "no GPU nodes need a driver",
            generation,
        )
    elif all(d.ready for d in driver_sets):
        driver = _cond(
            ConditionType.DRIVER_READY,
            "True",
            "DriverDaemonSetsReady",
            _daemonset_summary(driver_sets),
            generation,
        )
    else:
        driver = _cond(
            ConditionType.DRIVER_READY,
            "False",
            "DriverNotReady",
            "not ready: " + _daemonset_summary([d for d in driver_sets if not d.ready]),
            generation,
        )
    conditions.append(driver)

    policy = observed.cluster_policy
    not_ready = [d for d in other_sets if not d.ready]
    if observed.nodes_without_features and policy is not None:
        # The NVIDIA operator skips such nodes: they get no driver, even with the policy ready.
        components = _cond(
            ConditionType.COMPONENTS_READY,
            "False",
            "NodeFeaturesMissing",
            _features_missing_message(observed.nodes_without_features, policy),
            generation,
        )
    elif policy is not None and policy.state == "ready" and not not_ready:
        components = _cond(
            ConditionType.COMPONENTS_READY,
            "True",
            "ComponentsReady",
            f"ClusterPolicy ready; {len(other_sets)} DaemonSets ready",
            generation,
        )
    elif policy is None and not other_sets:
        components = _cond(
            ConditionType.COMPONENTS_READY,
            "Unknown",
            "WaitingForComponents",
            "no ClusterPolicy status and no GPU operand DaemonSets yet",
            generation,
        )
    else:
        parts = []
        if policy is None or policy.state != "ready":
            state = policy.state if policy and policy.state else "not reported"
            detail = f" ({policy.message})" if policy and policy.message else ""
            parts.append(f"ClusterPolicy cluster-policy is {state}{detail}")
        if not_ready:
            parts.append("not ready: " + _daemonset_summary(not_ready))
        components = _cond(
            ConditionType.COMPONENTS_READY,
            "False",
            "ComponentsNotReady",
            "; ".join(parts),
            generation,
        )
    conditions.append(components)

    deletion = _deletion_waits(observed, generation) if observed.deleting else []
    conditions += [cond for cond, _ in deletion]

    all_ready = all(c.status == "True" for c in (release, driver, components)) and not errors
    if observed.deleting:
        state, message = _deletion_summary(deletion)
        summary = _cond(ConditionType.READY, "False", "Deleting", message, generation)
    elif errors:
        state, message = GpuState.ERROR, errors[0]
        summary = _cond(ConditionType.READY, "False", "Error", message, generation)
    elif all_ready:
        state = GpuState.WARNING if warnings else GpuState.READY
        message = warnings[0] if warnings else _ready_message(gpu_nodes)
        summary = _cond(ConditionType.READY, "True", "Ready", message, generation)
    else:
        waiting = next(c for c in (release, driver, components) if c.status != "True")
        state = GpuState.PROCESSING
        message = f"{waiting.type}: {waiting.message}" if waiting.message else waiting.type
        summary = _cond(ConditionType.READY, "False", "Processing", message, generation)
    conditions.insert(0, summary)

    hr = observed.helm_release
    ready_nodes = nodes_ready(observed.daemonsets, gpu_nodes)
    return GpuStatus(
        state=state,
        message=message,
        observed_generation=generation,
        conditions=stamp(conditions, previous, now),
        gpu_node_count=gpu_nodes,
        gpu_nodes_ready=ready_nodes,
        ready_nodes=f"{ready_nodes}/{gpu_nodes}",
        nodes=list(plan.nodes[:STATUS_NODES_LIMIT]),
        components=[
            ComponentStatus(name=d.name, ready=d.ready, desired=d.desired, available=d.available)
            for d in sorted(observed.daemonsets, key=lambda d: d.name)
        ],
        driver_mode=plan.driver_mode,
        driver_version=running_driver_version(observed.daemonsets, observed.driver_version_before),
        desired_driver_version=plan.driver_summary or None,
        installer_release=plan.installer_release,
        chart_version=plan.chart_version,
        installed_chart_version=hr.installed_chart_version if hr else None,
        helm_release=(
            f"{plan.helm_release['metadata']['namespace']}/{plan.helm_release['metadata']['name']}"
            if plan.helm_release
            else None
        ),
    )


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
    return ", ".join(sorted(versions, key=_version_key)) or None


def _deletion_waits(observed: Observed, generation: int | None) -> list[tuple[Condition, GpuState]]:
    """The deletion's conditions in the order it meets them, each with the state it implies."""
    pods = () if observed.skip_protection else observed.gpu_workloads
    waits = [workloads_wait(pods, observed.skip_protection)]
    uninstall = uninstall_wait(observed.uninstall) if not pods or observed.skip_protection else None
    if uninstall is not None:
        waits.append(uninstall)
    return [
        (_cond(ConditionType(w.type), w.status, str(w.reason), w.message, generation), w.state)
        for w in waits
    ]


FINDINGS_SHOWN = 10
"""A condition message names at most this many findings: one per node on a big cluster would
outgrow the API server's object size limit (`kyma-gpu plan` lists them all)."""


def _joined(messages: Sequence[str]) -> str:
    shown = "; ".join(messages[:FINDINGS_SHOWN])
    more = len(messages) - FINDINGS_SHOWN
    return (
        f"{shown}; and {more} more findings (kyma-gpu plan lists them all)" if more > 0 else shown
    )


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
    before = {c.type: c for c in previous}
    out = []
    for cond in conditions:
        old = before.get(cond.type)
        if old is not None and old.status == cond.status and old.last_transition_time:
            out.append(cond.model_copy(update={"last_transition_time": old.last_transition_time}))
        else:
            out.append(cond.model_copy(update={"last_transition_time": now or None}))
    return out
