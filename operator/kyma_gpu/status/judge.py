"""One function per condition of Gpu.status. Pure.

Each returns a `Judgement`: the condition, and what it means for the summary (an error that
makes the Gpu `Error`, a warning that makes a ready Gpu `Warning`). `aggregate.summarize`
computes Ready from them, as helm-controller's summarize does from its conditions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kyma_gpu.api.conditions import (
    ComponentsReason,
    ConditionType,
    DriverReason,
    FluxMirrored,
    NodesReason,
    PoolsReason,
    PreflightReason,
    Reason,
    ReleaseReason,
    SourceReason,
)
from kyma_gpu.api.models import Condition, ConditionStatus
from kyma_gpu.facts import DriverUpgradeState
from kyma_gpu.facts.echo import LIST_LIMIT, cut, echoed_text, listed
from kyma_gpu.facts.stack import (
    DaemonSetFacts,
    FluxCondition,
    FluxObjectFacts,
    OperatorStateFacts,
    PullFailure,
)
from kyma_gpu.plan.plan import Plan, Preflight, Severity
from kyma_gpu.plan.plan import Verdict as PlanVerdict
from kyma_gpu.plan.pools import blocked_nodes
from kyma_gpu.rules.installer import branch_of
from kyma_gpu.status.upgrades import Rollout, failed_message, progress_message, rollout

# HelmRelease Ready=False reasons that mean "still working on it", not a failure.
_FLUX_PROGRESS_REASONS = frozenset({"Progressing", "ProgressingWithRetry", "DependencyNotReady"})
# helm-controller says SourceNotReady both for a broken chart source (a missing version, an
# unreachable repository: a failure) and while source-controller catches up with a new chart
# version (not a failure). These are the messages of the latter (helm-controller v1.6 isReady).
_SOURCE_CATCHING_UP = (
    "latest generation of object has not been reconciled",
    "does not have an artifact",
)
NO_GPU_NODES_MESSAGE = (
    "no GPU nodes right now; the GPU worker pool may be scaled to zero (autoscaler minimum 0). "
    "The GPU stack stays installed and serves GPU nodes as they join; if the cluster has no GPU "
    "worker pool, add one"
)
"""NodesDetected=False is a normal state: a pool that scales to zero has no nodes for hours."""
ALL_POOLS_BLOCKED = "no GPU worker pool can be served, so nothing is applied"
_INFORMATIVE_FINDINGS = frozenset({str(NodesReason.NO_GPU_NODES)})
"""Plan findings that the status shows as information, not as a Warning."""
FINDINGS_SHOWN = 10
"""A condition message names at most this many findings: one per node on a big cluster would
outgrow the API server's object size limit (`kyma-gpu plan` lists them all)."""


@dataclass(frozen=True, slots=True)
class Judgement:
    condition: Condition
    error: str = ""
    """Not empty: the Gpu is Error with this message."""
    warning: str = ""
    """Not empty: a ready Gpu is Warning with this message."""

    @property
    def ready(self) -> bool:
        return self.condition.status == "True"


def cond(
    type_: ConditionType, status: ConditionStatus, reason: Reason, message: str,
    generation: int | None,
) -> Condition:  # fmt: skip
    """A condition; its reason one of the module's enums, or Flux's own (`FluxMirrored`)."""
    return Condition(type=str(type_), status=status, reason=str(reason), message=message,
                     observed_generation=generation)  # fmt: skip


def in_progress(ready: FluxCondition) -> bool:
    if ready.reason == "SourceNotReady":
        return ready.message.endswith(_SOURCE_CATCHING_UP)
    return ready.reason in _FLUX_PROGRESS_REASONS


def flux_failed(reason: str, message: str) -> bool:
    """A Flux Ready=False (as mirrored into ReleaseReady or SourceReady) that is a failure,
    not Flux still working on it."""
    return not in_progress(FluxCondition("Ready", "False", FluxMirrored(reason), message, None))


def joined(messages: Sequence[str]) -> str:
    shown = "; ".join(messages[:FINDINGS_SHOWN])
    more = len(messages) - FINDINGS_SHOWN
    return (
        f"{shown}; and {more} more findings (kyma-gpu plan lists them all)" if more > 0 else shown
    )


# -- NodesDetected, Preflight --


def nodes_detected(plan: Plan, generation: int | None) -> Judgement:
    count = len(plan.nodes)
    if not count:
        return Judgement(cond(ConditionType.NODES_DETECTED, "False", NodesReason.NO_GPU_NODES,
                            NO_GPU_NODES_MESSAGE, generation))  # fmt: skip
    pools = ", ".join(f"{len(p.nodes)} {p.os} ({p.mode})" for p in plan.pools)
    message = f"{count} GPU node{'s' if count != 1 else ''}: {pools}"
    return Judgement(cond(ConditionType.NODES_DETECTED, "True", NodesReason.GPU_NODES_FOUND,
                        message, generation))  # fmt: skip


def _status_findings(plan: Plan) -> Preflight:
    """The plan's findings as the status weighs them: no GPU nodes is information."""
    return Preflight(
        tuple(
            replace(f, severity=Severity.INFO) if f.reason in _INFORMATIVE_FINDINGS else f
            for f in plan.preflight.findings
        ),
        plan.preflight.pools,
    )


def preflight(plan: Plan, generation: int | None) -> Judgement:
    """The worst findings. An error of the plan makes the Gpu Error; a blocked worker pool's
    error only Warning (the plan is applied for the others; PoolsReady names the pool)."""
    findings = _status_findings(plan)
    worst = findings.worst()
    if worst is None or worst.severity is Severity.INFO:
        info = joined([f.message for f in findings.findings])
        return Judgement(cond(ConditionType.PREFLIGHT, "True", PreflightReason.PASSED, info,
                            generation))  # fmt: skip
    notes = [f.message for f in findings.findings if f.severity is worst.severity]
    condition = cond(ConditionType.PREFLIGHT, "False", worst.reason, joined(notes), generation)
    if findings.verdict is not PlanVerdict.ERROR:
        return Judgement(condition, warning=worst.message)
    errors = (f for f in findings.findings if f.severity is Severity.ERROR and not f.pool)
    fleet = next(errors, None)
    if fleet is not None:
        return Judgement(condition, error=fleet.message)
    return Judgement(condition, error=f"{ALL_POOLS_BLOCKED}: {worst.message}")


def _some(names: Sequence[str]) -> str:
    """At most FINDINGS_SHOWN names: a cluster may have thousands of pools."""
    return listed(names, FINDINGS_SHOWN)


def _pool_note(plan: Plan, name: str, bad: int) -> str:
    size = next((len(p.nodes) for p in plan.worker_pools if p.name == name), bad)
    reasons = sorted({str(f.reason) for f in plan.preflight.findings if f.pool == name and
                      f.blocking})  # fmt: skip
    state = "blocked" if name in plan.preflight.blocked else "degraded"
    return f"worker pool {name} is {state} ({bad} of {size} nodes get no working GPU: " + (
        f"{', '.join(reasons)})"
    )


def pools_ready(plan: Plan, generation: int | None) -> Judgement:
    """Does every GPU worker pool get a working stack? False names the blocked and degraded
    pools: a warning, since the plan serves the others (unless it serves none: then Preflight
    says the error)."""
    kind = ConditionType.POOLS_READY
    if not plan.worker_pools:
        return Judgement(cond(kind, "True", PoolsReason.NO_GPU_NODES, "no GPU worker pools",
                            generation))  # fmt: skip
    bad = blocked_nodes(plan.preflight.findings)
    if not bad:
        names = _some([f"{p.name} ({len(p.nodes)})" for p in plan.worker_pools])
        return Judgement(cond(kind, "True", PoolsReason.SERVED,
                            f"every GPU worker pool is served: {names}", generation))  # fmt: skip
    notes = [_pool_note(plan, name, len(nodes)) for name, nodes in sorted(bad.items())]
    served = [p.name for p in plan.worker_pools if p.name not in bad]
    tail = f"; served: {_some(served)}" if served else "; no worker pool is served"
    reason = PoolsReason.BLOCKED if plan.preflight.blocked else PoolsReason.DEGRADED
    message = joined(notes) + tail + " (the Preflight condition says why)"
    condition = cond(kind, "False", reason, message, generation)
    said = "" if plan.preflight.verdict is PlanVerdict.ERROR else message
    return Judgement(condition, warning=said)


# -- ReleaseReady, SourceReady: Flux mirrored --


def _seen(ready: FluxCondition | None, facts: FluxObjectFacts) -> bool:
    """The Ready condition speaks of the current generation: its own observedGeneration
    (Flux stamps it on every condition), else the status's."""
    if ready is None:
        return False
    seen = ready.observed_generation if ready.observed_generation is not None else (
        facts.observed_generation
    )  # fmt: skip
    return seen is not None and seen >= facts.generation


def release_ready(
    plan: Plan, hr: FluxObjectFacts | None, apply_error: str | None, generation: int | None
) -> Judgement:
    """Mirrors the HelmRelease Ready condition, once it speaks of the current generation.
    apply_error: None when the Flux objects were written, else why not."""
    kind = ConditionType.RELEASE_READY
    if plan.helm_release is None:
        message = "the plan has errors; the HelmRelease was not written (see Preflight)"
        return Judgement(cond(kind, "False", ReleaseReason.NOT_APPLIED, message, generation))
    if apply_error is not None:
        failed = cond(kind, "False", ReleaseReason.APPLY_FAILED,
                      f"writing the Flux objects failed: {echoed_text(apply_error)}",
                      generation)  # fmt: skip
        return Judgement(failed, error=failed.message)
    meta = plan.helm_release["metadata"]
    name = f"{meta['namespace']}/{meta['name']}"
    if hr is None:
        message = f"waiting for Flux to pick up HelmRelease {name}"
        return Judgement(cond(kind, "Unknown", ReleaseReason.RELEASE_PENDING, message, generation))
    ready = hr.condition("Ready")
    if ready is None or not _seen(ready, hr):
        message = f"HelmRelease {name}: Flux has not yet reconciled generation {hr.generation}"
        return Judgement(cond(kind, "Unknown", ReleaseReason.PROGRESSING, message, generation))
    message = f"HelmRelease {name}: {ready.message}".rstrip(": ")
    return _mirrored_release(hr, ready, message, generation)


def _mirrored_release(
    hr: FluxObjectFacts, ready: FluxCondition, message: str, generation: int | None
) -> Judgement:
    kind = ConditionType.RELEASE_READY
    if ready.status == "True":
        return Judgement(cond(kind, "True", ready.reason, message, generation))
    if ready.status == "False":
        stalled = hr.condition("Stalled")
        failed = (stalled is not None and stalled.status == "True") or not in_progress(ready)
        condition = cond(kind, "False", ready.reason or ReleaseReason.NOT_READY, message,
                         generation)  # fmt: skip
        return Judgement(condition, error=message if failed else "")
    reconciling = hr.condition("Reconciling")
    said = reconciling.reason if reconciling and reconciling.status == "True" else None
    reason = said or ready.reason or ReleaseReason.PROGRESSING
    return Judgement(cond(kind, "Unknown", reason, message, generation))


def uninstalling(generation: int | None) -> Judgement:
    message = "the Gpu is being deleted; Flux uninstalls the release once the HelmRelease is gone"
    return Judgement(cond(ConditionType.RELEASE_READY, "Unknown", ReleaseReason.UNINSTALLING,
                        message, generation))  # fmt: skip


def source_ready(
    src: FluxObjectFacts | None, release: Judgement, generation: int | None
) -> Judgement:
    """Mirrors the chart source's Ready condition. A failing source is an error, unless the
    release is installed (then a warning: no upgrades) or failed already (said there)."""
    kind = ConditionType.SOURCE_READY
    if src is None:
        return Judgement(cond(kind, "Unknown", SourceReason.WAITING_FOR_SOURCE,
                            "no chart source observed yet", generation))  # fmt: skip
    name = f"{src.kind} {src.namespace}/{src.name}"
    ready = src.condition("Ready")
    if ready is None or not _seen(ready, src):
        message = f"{name}: Flux has not yet reconciled generation {src.generation}"
        return Judgement(cond(kind, "Unknown", SourceReason.PROGRESSING, message, generation))
    status: ConditionStatus = "Unknown"
    if ready.status == "True":
        status = "True"
    elif ready.status == "False" and not in_progress(ready):
        status = "False"
    message = f"{name}: {ready.message}".rstrip(": ")
    condition = cond(kind, status, ready.reason or SourceReason.UNKNOWN, message, generation)
    if status != "False" or release.error:
        return Judgement(condition)
    if release.ready:
        return Judgement(condition, warning=message)
    return Judgement(condition, error=message)


# -- DriverReady, ComponentsReady: the GPU operator's operands --


def daemonset_summary(sets: Sequence[DaemonSetFacts]) -> str:
    """At most FINDINGS_SHOWN DaemonSets: anyone who may create them in the GPU operator's
    namespace adds to the list."""
    return _some([f"{d.name} ({d.available}/{d.desired})" for d in sets])


def _not_ready(d: DaemonSetFacts) -> str:
    """Why a DaemonSet is not ready, in its own numbers: pods not available, or all of them
    available but not yet on its current template (a rollout: `2/2` alone reads as ready)."""
    counts = f"{d.available}/{d.desired} available"
    if d.available < d.desired:
        return f"{d.name} ({counts})"
    if d.unavailable > 0:
        return f"{d.name} ({counts}, {d.unavailable} unavailable)"
    if not d.current:
        return f"{d.name} ({counts}; the DaemonSet controller has not yet seen its new template)"
    return f"{d.name} ({counts}, {d.updated}/{d.desired} on its new template: rolling out)"


def not_ready_summary(sets: Sequence[DaemonSetFacts]) -> str:
    """The DaemonSets that are not ready, each with why (at most FINDINGS_SHOWN)."""
    return _some([_not_ready(d) for d in sets])


def driver_ready(
    plan: Plan,
    sets: Sequence[DaemonSetFacts],
    release: Judgement,
    generation: int | None,
    upgrades: Sequence[tuple[str, DriverUpgradeState]] = (),
) -> Judgement:
    """The driver DaemonSets' readiness; while the NVIDIA upgrade controller rolls a new driver
    over the nodes (`upgrades`: GPU node and its state label), where the rollout is."""
    kind = ConditionType.DRIVER_READY
    driver_sets = [d for d in sets if d.driver]
    if plan.driver_mode == "Preinstalled":
        return Judgement(cond(kind, "True", DriverReason.PREINSTALLED,
                            "the nodes' own driver is used", generation))  # fmt: skip
    if upgrades:
        moving = _upgrade_judgement(rollout(upgrades), driver_sets, generation)
        if moving is not None:
            return moving
    if not driver_sets and not plan.nodes:
        status: ConditionStatus = "True" if release.ready else "Unknown"
        return Judgement(cond(kind, status, DriverReason.NO_GPU_NODES,
                            "no GPU nodes need a driver", generation))  # fmt: skip
    if not driver_sets:
        return Judgement(cond(kind, "Unknown", DriverReason.WAITING, "no driver DaemonSet yet",
                            generation))  # fmt: skip
    if all(d.ready for d in driver_sets):
        return _not_yet_planned(plan, driver_sets, generation) or Judgement(cond(
            kind, "True", DriverReason.DAEMONSETS_READY, daemonset_summary(driver_sets),
            generation))  # fmt: skip
    message = "not ready: " + not_ready_summary([d for d in driver_sets if not d.ready])
    return Judgement(cond(kind, "False", DriverReason.NOT_READY, message, generation))


def _not_yet_planned(
    plan: Plan, driver_sets: Sequence[DaemonSetFacts], generation: int | None
) -> Judgement | None:
    """DriverVersionPending or a due DriverUpgrading while every driver pod still reads ready."""
    kind = ConditionType.DRIVER_READY
    pending = version_pending(plan, driver_sets)
    if pending:
        return Judgement(cond(kind, "False", DriverReason.VERSION_PENDING, pending, generation))
    due = upgrade_due(plan, driver_sets)
    if due:
        return Judgement(cond(kind, "False", DriverReason.UPGRADING, due, generation))
    return None


def _planned(version: str, planned: set[str]) -> bool:
    """A DaemonSet's driver is planned: the same version, or of a planned branch (a
    precompiled image's tag names only the branch)."""
    return version in planned or branch_of(version) in planned


def version_pending(plan: Plan, driver_sets: Sequence[DaemonSetFacts]) -> str | None:
    """Why the driver is not yet the planned one: a driver DaemonSet with nodes whose template
    names another version than any driver pool of the plan. Between a version change and the
    NVIDIA operator's new driver template, every DaemonSet still reads ready; an image without
    a version in its tag (a digest) says nothing."""
    planned = {p.version for p in plan.pools if p.version}
    if not planned:
        return None
    stale = sorted({f"{d.name} ({d.version})" for d in driver_sets if d.desired > 0
                    and d.version and not _planned(d.version, planned)})  # fmt: skip
    if not stale:
        return None
    verb = "runs" if len(stale) == 1 else "run"
    return (
        f"the NVIDIA operator has not yet rendered driver {listed(sorted(planned), NODES_SHOWN)}:"
        f" {listed(stale, NODES_SHOWN)} still {verb} another driver"
    )


def upgrade_due(plan: Plan, driver_sets: Sequence[DaemonSetFacts]) -> str | None:
    """A new driver template that the NVIDIA upgrade controller has not yet begun to roll
    out: its driver DaemonSets update OnDelete, so the old pods read ready until it labels
    the nodes. Without autoUpgrade nobody replaces them: the user does, node by node."""
    if not plan.auto_upgrade:
        return None
    due = [f"{d.name} ({d.updated}/{d.desired} pods on its new template)" for d in driver_sets
           if d.desired > 0 and d.current and not d.rolled_out]  # fmt: skip
    if not due:
        return None
    return (
        f"the NVIDIA upgrade controller has not yet begun to replace the driver: "
        f"{listed(due, NODES_SHOWN)}"
    )


def _upgrade_judgement(
    r: Rollout, driver_sets: Sequence[DaemonSetFacts], generation: int | None
) -> Judgement | None:
    """DriverUpgradeFailed (an error), DriverUpgrading, or None when no node is on its way."""
    kind = ConditionType.DRIVER_READY
    if r.failed:
        message = failed_message(r)
        return Judgement(cond(kind, "False", DriverReason.UPGRADE_FAILED, message, generation),
                       error=message)  # fmt: skip
    if not r.moving:
        return None
    message = progress_message(r)
    not_ready = [d for d in driver_sets if not d.ready]
    if not_ready:
        message += "; not ready: " + not_ready_summary(not_ready)
    return Judgement(cond(kind, "False", DriverReason.UPGRADING, message, generation))


NODES_SHOWN = 5
"""Nodes the NodeFeaturesMissing message names; the rest are counted."""
CLUSTER_POLICY = "ClusterPolicy cluster-policy"
GPU_CLUSTER = "GPUCluster gpu-cluster"
"""The stack's custom resource, as messages name it (spec.stack DevicePlugin, DRA)."""


def _features_missing_message(
    nodes: Sequence[str], policy: OperatorStateFacts | None, name: str
) -> str:
    shown = listed(nodes, NODES_SHOWN)
    state = policy.state if policy and policy.state else "not reported"
    return (
        f"{name} is {state}, and GPU nodes lack the node-feature-discovery "
        f"labels system-os_release.ID and kernel-version.full, which the NVIDIA operator needs "
        f"to pick a driver: {shown}. Check that an NFD worker pod runs on each (kubectl get pods "
        f"-n gpu-operator -l role=worker -o wide); a taint it does not tolerate keeps it off"
    )


def _no_gpu_node_seen_message(policy: OperatorStateFacts, name: str, gpu_nodes: int) -> str:
    said = f" ({policy.ready_reason})" if policy.ready_reason else ""
    return (
        f"{name} is ready{said} but the NVIDIA operator has not seen the {gpu_nodes} GPU "
        f"nodes yet: it deploys the operands once node-feature-discovery has labelled them"
    )


STACK_CONFLICT_MESSAGE = (
    "spec.stack is DevicePlugin, but the GPUCluster gpu-cluster of the DRA stack is still there: "
    "the chart keeps it on purpose (deleting it drains the pods that hold GPUs through DRA), and "
    "the NVIDIA operator runs no ClusterPolicy next to it. When its workloads may go, delete it: "
    "kubectl delete gpuclusters.nvidia.com gpu-cluster"
)


def stack_conflict(generation: int | None) -> Judgement:
    condition = cond(ConditionType.COMPONENTS_READY, "False", ComponentsReason.STACK_CONFLICT,
                     STACK_CONFLICT_MESSAGE, generation)  # fmt: skip
    return Judgement(condition, error=STACK_CONFLICT_MESSAGE)


PULL_SHOWN = 5
"""Images a message names; the rest are counted."""


def image_pull_failed(failures: Sequence[PullFailure], generation: int | None) -> Judgement:
    """ComponentsReady False, naming the images the GPU operator's pods cannot pull."""
    pods: dict[tuple[str, str], list[PullFailure]] = {}
    for failure in failures:
        for image, reason in dict.fromkeys(failure.images):  # a pod counts once per image
            pods.setdefault((image, reason), []).append(failure)
    shown = []
    for (image, reason), where in sorted(pods.items())[:PULL_SHOWN]:
        first = where[0]
        node = f" on node {first.node}" if first.node else ""
        others = f" and {len(where) - 1} more" if len(where) > 1 else ""
        shown.append(f"{image} ({reason}: pod {first.pod}{node}{others})")
    rest = len(pods) - len(shown)
    more = f"; and {rest} more images" if rest > 0 else ""
    message = (
        f"{len(failures)} pods of the GPU operator cannot pull their images: "
        f"{cut('; '.join(shown), LIST_LIMIT)}{more}. Check that the registry holds them: "
        "kyma-gpu images "
        "--check (docs/operations.md#check-the-mirror-before-you-switch)"
    )
    return Judgement(cond(ConditionType.COMPONENTS_READY, "False",
                        ComponentsReason.IMAGE_PULL_FAILED, message, generation))  # fmt: skip


def components_ready(
    policy: OperatorStateFacts | None,
    sets: Sequence[DaemonSetFacts],
    nodes_without_features: Sequence[str],
    generation: int | None,
    name: str = CLUSTER_POLICY,
    gpu_nodes: int = 0,
) -> Judgement:
    """The stack's custom resource (`name`: the ClusterPolicy, or the GPUCluster on the DRA
    stack) and the operand DaemonSets other than the drivers; `gpu_nodes`: the plan's."""
    kind = ConditionType.COMPONENTS_READY
    others = [d for d in sets if not d.driver]
    not_ready = [d for d in others if not d.ready]
    if nodes_without_features and policy is not None:
        # The NVIDIA operator skips such nodes: they get no driver, even with the policy ready.
        message = _features_missing_message(nodes_without_features, policy, name)
        return Judgement(cond(kind, "False", ComponentsReason.NODE_FEATURES_MISSING, message,
                            generation))  # fmt: skip
    if gpu_nodes and policy is not None and policy.state == "ready" and not policy.gpu_nodes_seen:
        message = _no_gpu_node_seen_message(policy, name, gpu_nodes)
        return Judgement(cond(kind, "False", ComponentsReason.NOT_READY, message, generation))
    if policy is not None and policy.state == "ready" and not not_ready:
        message = f"{name.split(maxsplit=1)[0]} ready; {len(others)} DaemonSets ready"
        return Judgement(cond(kind, "True", ComponentsReason.READY, message, generation))
    if policy is None and not others:
        message = f"no {name.split(maxsplit=1)[0]} status and no GPU operand DaemonSets yet"
        return Judgement(cond(kind, "Unknown", ComponentsReason.WAITING, message, generation))
    parts = []
    if policy is None or policy.state != "ready":
        state = policy.state if policy and policy.state else "not reported"
        detail = f" ({policy.message})" if policy and policy.message else ""
        parts.append(f"{name} is {state}{detail}")
    if not_ready:
        parts.append("not ready: " + not_ready_summary(not_ready))
    return Judgement(cond(kind, "False", ComponentsReason.NOT_READY, "; ".join(parts), generation))
