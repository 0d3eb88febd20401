"""The reconcile loop's state machine. Pure: facts in, one `Step` out.

`decide` looks at the Gpu, the observed facts and the last failed write, picks the phase, and
returns the one action of that phase (an `Action`: add the finalizer, apply, delete, list the
Flux objects, remove the module's Flux, remove the finalizer), the status the Gpu should show,
and when to look again. The loop (reconcile/loop.py) carries the action out through the
adapter and calls `decide` again with what the writes returned; it stops when a step has
nothing left to do. Deletion is a phase of the same machine.

    not the singleton ............................ Refused
    being deleted, finalizer gone ................ Released (nothing to do)
    being deleted, GPU pods not yet listed ....... WaitingForWorkloads (watch pods)
    being deleted, GPU pods running .............. WaitingForWorkloads (status names them)
      ... unless the skip annotation is set ...... (go on without looking at pods)
    being deleted, Flux objects left ............. Uninstalling (delete them, HelmRelease first;
                                                   Error past the uninstall timeout + grace)
    being deleted, the module's own Flux left .... RemovingFlux (list the Flux objects of all
                                                   kinds; then its controllers, and its CRDs
                                                   unless others' objects use them; while one
                                                   of the module's terminates, list again
                                                   after a while)
    being deleted, nothing left .................. Released (remove the finalizer)
    spec invalid, or it cannot be planned ........ Invalid (InvalidSpec, PlanFailed)
    no finalizer yet ............................. Initializing (add it)
    plan has errors .............................. Blocked (status only, nothing applied)
    the cluster's Flux is too old or partial ..... FluxIncompatible (Error, nothing applied)
    no Flux, or the module's own is outdated ..... ProvidingFlux (apply the Flux bundle)
    the module's own Flux not served yet ......... Progressing (wait for its CRDs)
    Flux objects differ from the plan ............ Applying (server-side apply)
      ... and the last attempt failed ............ Failed (status; retry at its time)
    applied, status Error ........................ Failed
    applied, not everything ready ................ Progressing
    applied, everything ready .................... Ready
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from kyma_gpu.api.admission import admission_message
from kyma_gpu.api.conditions import ConditionType, ReadyReason
from kyma_gpu.api.models import (
    SINGLETON_NAME,
    Condition,
    GpuSpec,
    GpuState,
    GpuStatus,
    HealthSpec,
    Remediation,
)
from kyma_gpu.facts import ClusterFacts, NodeFacts, cluster_facts
from kyma_gpu.plan import Owner, Plan
from kyma_gpu.plan.actions import LiveObject, plan_actions
from kyma_gpu.plan.provision import (
    FluxApi,
    FluxImages,
    FluxMode,
    FluxVerdict,
    Leftover,
    Removal,
    bundle,
    bundle_current,
    bundle_hash,
    external_flux,
    hand_over_message,
    removal,
    shard,
    verdict,
)
from kyma_gpu.status import (
    ClusterPolicyFacts,
    DaemonSetFacts,
    HelmReleaseFacts,
    Observed,
    PullFailure,
)
from kyma_gpu.status import aggregate as aggregate_status
from kyma_gpu.status.aggregate import plan_health, stamp
from kyma_gpu.status.deletion import (
    SKIP_PROTECTION_ANNOTATION,
    Deleting,
    Uninstall,
    uninstall_of,
)
from kyma_gpu.status.events import EventType, GpuEvent
from kyma_gpu.status.flux import with_flux
from kyma_gpu.status.health import Health
from kyma_gpu.status.remediation import NodeWrite, marks_key, node_writes

FINALIZER = "gpu.kyma-project.io/finalizer"
TRANSIENT_RETRIES_BEFORE_STATUS = 3
"""A conflict or a throttled write is retried quietly; only repeated failures reach status."""


class Phase(StrEnum):
    REFUSED = "Refused"
    INVALID = "Invalid"
    INITIALIZING = "Initializing"
    BLOCKED = "Blocked"
    APPLYING = "Applying"
    FAILED = "Failed"
    PROGRESSING = "Progressing"
    READY = "Ready"
    WAITING_FOR_WORKLOADS = "WaitingForWorkloads"
    UNINSTALLING = "Uninstalling"
    FLUX_INCOMPATIBLE = "FluxIncompatible"
    PROVIDING_FLUX = "ProvidingFlux"
    MARKING_NODES = "MarkingNodes"
    REMOVING_FLUX = "RemovingFlux"
    RELEASED = "Released"


@dataclass(frozen=True, slots=True)
class GpuObject:
    """The compact facts of a Gpu: what the machine reads of it."""

    name: str
    uid: str
    generation: int | None
    resource_version: str
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    deleting: bool
    finalizers: tuple[str, ...]
    skip_protection: bool = False
    """The annotation that lets a deletion go ahead while pods use GPUs."""


def gpu_object(body: Mapping[str, Any]) -> GpuObject:
    meta = body.get("metadata") or {}
    generation = meta.get("generation")
    return GpuObject(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        generation=generation if isinstance(generation, int) else None,
        resource_version=str(meta.get("resourceVersion", "")),
        spec=dict(body.get("spec") or {}),
        status=dict(body.get("status") or {}),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
        skip_protection=(meta.get("annotations") or {}).get(SKIP_PROTECTION_ANNOTATION) == "true",
    )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the observers hold right now, flattened."""

    nodes: tuple[NodeFacts, ...] = ()
    flux: tuple[LiveObject, ...] = ()
    flux_status: tuple[HelmReleaseFacts, ...] = ()
    daemonsets: tuple[DaemonSetFacts, ...] = ()
    cluster_policy: ClusterPolicyFacts | None = None
    gpu_cluster: ClusterPolicyFacts | None = None
    """The DRA stack's GPUCluster gpu-cluster."""
    gpu_workloads: tuple[str, ...] | None = None
    image_pulls: tuple[PullFailure, ...] = ()
    """Pods of the GPU operator's namespace that cannot pull an image."""
    """namespace/name of running GPU pods; None while they are not observed."""
    flux_api: FluxApi = field(default_factory=external_flux)
    """The Flux CRDs and APIs (the default: a compatible Flux of the cluster's own)."""
    flux_leftovers: tuple[Leftover, ...] | None = None
    """The Flux objects of every kind and namespace (a few per kind, metadata only), listed
    when the module's own Flux is to go; None until listed in this pass."""


@dataclass(frozen=True, slots=True)
class Failure:
    """The last write that failed, and for which actions."""

    key: str
    error: str
    permanent: bool
    attempts: int
    retry_at: float


class EventReason(StrEnum):
    """The reasons of the Events the machine itself asks for (the others come from status
    changes: status/events.py)."""

    FLUX_HANDED_OVER = "FluxHandedOver"


# -- the actions: what one step carries out (reconcile/loop.py matches them in Loop._act) --


@dataclass(frozen=True, slots=True)
class AddFinalizer:
    """Add gpu.kyma-project.io/finalizer, before anything is applied."""


@dataclass(frozen=True, slots=True)
class Apply:
    """Server-side apply `objects` in order; delete `stale`, the objects the plan no longer has."""

    objects: tuple[Mapping[str, Any], ...]
    stale: tuple[LiveObject, ...] = ()


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete the module's Flux objects (the HelmRelease first): the uninstall."""

    objects: tuple[LiveObject, ...]


@dataclass(frozen=True, slots=True)
class ListFlux:
    """List the Flux objects of every kind (metadata only) into `Snapshot.flux_leftovers`: a
    read, for the decision how the module's own Flux goes."""


@dataclass(frozen=True, slots=True)
class RemoveFlux:
    """Delete the module's own Flux controllers, then its CRDs, or, when objects the module did
    not create use them, unlabel the CRDs and leave them (`announce` says so)."""

    hand_over: bool
    announce: GpuEvent | None = None


@dataclass(frozen=True, slots=True)
class RemoveFinalizer:
    """Release the Gpu: nothing of the module is left."""


@dataclass(frozen=True, slots=True)
class MarkNodes:
    """Set or clear the Node condition KymaGpuUnhealthy, cordon or uncordon (spec.health)."""

    writes: tuple[NodeWrite, ...]


Action = AddFinalizer | Apply | Delete | ListFlux | RemoveFlux | RemoveFinalizer | MarkNodes


@dataclass(frozen=True, slots=True)
class Step:
    phase: Phase
    action: Action | None = None
    """What this step carries out; None: nothing (a status at most)."""
    status: GpuStatus | None = None
    """The status the Gpu should show; None: leave it as it is."""
    watch_pods: bool = False
    requeue_after: float | None = None
    """Look again after this many seconds even if nothing changes (a retry)."""
    key: str = ""
    """Identifies the writes of this step, to match a failure to them."""
    status_if_failed: GpuStatus | None = None
    """The status to show while these writes wait for a retry after failing."""

    @property
    def writes(self) -> bool:
        """The step carries an action out (a write, or the list that a removal needs)."""
        return self.action is not None


Planner = Callable[[GpuSpec, ClusterFacts, Owner], Plan]


@dataclass(frozen=True, slots=True)
class Inputs:
    gpu: GpuObject
    snap: Snapshot
    planner: Planner
    failure: Failure | None = None
    clock: float = 0.0
    """Monotonic seconds, compared with Failure.retry_at."""
    now: str = ""
    """Wall-clock timestamp for condition transitions."""
    flux_images: FluxImages = field(default_factory=FluxImages)
    """The images of the Flux the module installs (the manager's environment)."""
    module_namespace: str = "kyma-system"
    """Where the module's Flux objects (and its own Flux) live."""
    removal_wait_seconds: float = 5.0
    """RemovingFlux looks again after this long while one of the module's objects terminates
    (LoopSettings.removal_wait_seconds)."""


def decide(inputs: Inputs) -> Step:
    """The phase and its one action; a write that failed lately waits for its retry time."""
    step = _natural(inputs)
    failed = inputs.failure
    if not step.writes or failed is None or failed.key != step.key:
        return step
    if inputs.clock >= failed.retry_at:
        return step
    return Step(Phase.FAILED, status=step.status_if_failed or step.status,
                watch_pods=step.watch_pods,
                requeue_after=failed.retry_at - inputs.clock)  # fmt: skip


def _natural(inputs: Inputs) -> Step:
    gpu = inputs.gpu
    if gpu.name != SINGLETON_NAME:
        return Step(Phase.REFUSED, status=refused_status(gpu, inputs.now))
    spec = _parse(gpu)
    if gpu.deleting:
        return _deleting(inputs, spec if isinstance(spec, GpuSpec) else None)
    if isinstance(spec, ValidationError):
        return Step(Phase.INVALID, status=invalid_status(gpu, spec, inputs.now))
    if FINALIZER not in gpu.finalizers:
        return Step(Phase.INITIALIZING, AddFinalizer(), key="finalizer")
    plan = _safe_plan(inputs, spec)
    if isinstance(plan, str):
        status = _error_status(gpu, ReadyReason.PLAN_FAILED, plan, inputs.now)
        return Step(Phase.INVALID, status=status)
    return _running(inputs, plan)


def _parse(gpu: GpuObject) -> GpuSpec | ValidationError:
    try:
        return GpuSpec.model_validate(gpu.spec)
    except ValidationError as err:
        return err


def _plan(inputs: Inputs, spec: GpuSpec) -> Plan:
    owner = Owner(uid=inputs.gpu.uid, name=inputs.gpu.name)
    return inputs.planner(spec, cluster_facts(inputs.snap.nodes), owner)


def _safe_plan(inputs: Inputs, spec: GpuSpec) -> Plan | str:
    """The plan, or why there is none: a spec the model accepts but the module cannot plan
    (or serialise, as once at 300 levels of spec.values) must show in the status, not fail
    every pass in silence, and must not stop a deletion."""
    try:
        return _plan(inputs, spec)
    except (RecursionError, ValueError, TypeError) as err:
        return (
            f"the module cannot plan this spec ({type(err).__name__}: {err}); nothing is "
            "applied. This is a defect of the module: report it with the Gpu's spec"
        )


def _running(inputs: Inputs, plan: Plan) -> Step:
    if plan.helm_release is None:
        return Step(Phase.BLOCKED, status=_status(inputs, plan))
    flux = verdict(inputs.snap.flux_api)
    waiting = _flux_step(inputs, plan, flux)
    if waiting is not None:
        return waiting
    objects = shard(plan.objects) if flux.mode is FluxMode.PROVIDED else plan.objects
    actions = plan_actions(objects, inputs.snap.flux)
    if actions.apply or actions.delete:
        key = _key(actions.apply, actions.delete)
        status = _loud_status(inputs, plan, key)
        return Step(Phase.APPLYING, Apply(actions.apply, actions.delete), key=key,
                    status_if_failed=status)  # fmt: skip
    status = _status(inputs, plan)
    marks = _node_writes(inputs, plan)
    if marks:
        # the status follows the marks (it shows them): written by the next step
        return Step(Phase.MARKING_NODES, MarkNodes(marks), key=marks_key(marks),
                    status_if_failed=status)  # fmt: skip
    return Step(_phase_of(status), status=status)


def _node_writes(inputs: Inputs, plan: Plan) -> tuple[NodeWrite, ...]:
    """GPU health remediation's writes; none (and no work) while it is off and no node carries
    a mark of the manager's."""
    nodes = inputs.snap.nodes
    if plan.health.remediation is Remediation.OFF and not any(n.mark for n in nodes):
        return ()
    return node_writes(plan_health(plan), plan.health, nodes)


def _loud_status(inputs: Inputs, plan: Plan, key: str) -> GpuStatus | None:
    """The status of a failed write: after repeated transient failures, or a permanent one."""
    failed = inputs.failure
    if failed is None or failed.key != key:
        return None
    if failed.permanent or failed.attempts >= TRANSIENT_RETRIES_BEFORE_STATUS:
        return _status(inputs, plan, error=failed.error)
    return None


def _flux_step(inputs: Inputs, plan: Plan, flux: FluxVerdict) -> Step | None:
    """What Flux needs before the plan's objects can go in; None when it is ready."""
    if flux.mode is FluxMode.INCOMPATIBLE:
        status = _error_status(inputs.gpu, ReadyReason.FLUX_INCOMPATIBLE, flux.message, inputs.now)
        return Step(Phase.FLUX_INCOMPATIBLE, status=status)
    wanted = flux.mode in (FluxMode.ABSENT, FluxMode.PROVIDED)
    images = inputs.flux_images
    if wanted and not bundle_current(inputs.snap.flux_api, images):
        key = f"flux-bundle-{bundle_hash(images)}"
        return Step(Phase.PROVIDING_FLUX, Apply(bundle(images)), key=key,
                    status_if_failed=_loud_status(inputs, plan, key))  # fmt: skip
    if not flux.served:
        return Step(Phase.PROGRESSING, status=_status(inputs, plan))
    return None


def _phase_of(status: GpuStatus) -> Phase:
    if status.state is GpuState.ERROR:
        return Phase.FAILED
    ready = next((c for c in status.conditions if c.type == ConditionType.READY), None)
    return Phase.READY if ready is not None and ready.status == "True" else Phase.PROGRESSING


def _deleting(inputs: Inputs, spec: GpuSpec | None) -> Step:
    gpu, snap = inputs.gpu, inputs.snap
    if FINALIZER not in gpu.finalizers:
        return Step(Phase.RELEASED)
    protect = not gpu.skip_protection
    if protect and snap.gpu_workloads is None:
        return Step(Phase.WAITING_FOR_WORKLOADS, watch_pods=True)
    planned = _safe_plan(inputs, spec) if spec is not None else None
    plan = planned if isinstance(planned, Plan) else None
    if protect and snap.gpu_workloads:
        status = _status(inputs, plan) if plan is not None else None
        return Step(Phase.WAITING_FOR_WORKLOADS, status=status, watch_pods=True)
    # HelmRelease first: Flux uninstalls the release while its source is still there.
    doomed = tuple(
        sorted((o for o in snap.flux if not o.deleting), key=lambda o: o.kind != "HelmRelease")
    )
    uninstall = uninstall_of(_deleting_flux(snap.flux, inputs.now), inputs.now)
    status = _status(inputs, plan, uninstall=uninstall) if plan is not None else None
    if snap.flux:
        return Step(Phase.UNINSTALLING, Delete(doomed) if doomed else None, status=status,
                    watch_pods=protect, key=_key((), doomed),
                    requeue_after=uninstall.next_stall_in)  # fmt: skip
    return _uninstalled(inputs, protect)


def _uninstalled(inputs: Inputs, protect: bool) -> Step:
    """Flux uninstalled the release: the module's Node marks go, then its own Flux, then the
    finalizer."""
    cleared = _cleared_marks(inputs.snap.nodes)
    if cleared:
        return Step(Phase.MARKING_NODES, MarkNodes(cleared), watch_pods=protect,
                    key=marks_key(cleared))  # fmt: skip
    if _own_flux_left(inputs.snap.flux_api):
        return replace(_removing_flux(inputs), watch_pods=protect)
    return Step(Phase.RELEASED, RemoveFinalizer(), watch_pods=protect, key="release")


def _cleared_marks(nodes: Sequence[NodeFacts]) -> tuple[NodeWrite, ...]:
    """A deletion leaves no mark of the module's behind: its conditions False, its cordons
    lifted (with remediation off, node_writes clears every mark)."""
    if not any(n.mark is not None and (n.mark.unhealthy or n.mark.cordoned) for n in nodes):
        return ()
    return node_writes(Health(), HealthSpec(), nodes)


def _removing_flux(inputs: Inputs) -> Step:
    """The module's own Flux goes once the Flux objects of every kind are known: not while one
    of the module's is still terminating (its controller must finish it; no observer watches
    that kind, so look again after `removal_wait_seconds`, and list again then); its CRDs stay,
    handed over, while objects the module did not create use them. The list and the removal
    share a key: a failed removal holds the next list back until its retry is due."""
    leftovers = inputs.snap.flux_leftovers
    if leftovers is None:
        return Step(Phase.REMOVING_FLUX, ListFlux(), key="flux-remove")
    match removal(leftovers, inputs.module_namespace):
        case Removal.WAIT:
            return Step(Phase.REMOVING_FLUX, requeue_after=inputs.removal_wait_seconds)
        case Removal.HAND_OVER:
            message = hand_over_message(leftovers)
            event = GpuEvent(EventType.NORMAL, EventReason.FLUX_HANDED_OVER, message)
            return Step(Phase.REMOVING_FLUX, RemoveFlux(True, event), key="flux-remove")
        case Removal.DELETE_CRDS:
            return Step(Phase.REMOVING_FLUX, RemoveFlux(False), key="flux-remove")


def _own_flux_left(api: FluxApi) -> bool:
    """The module's own Flux is still there (and not already on its way out)."""
    return verdict(api).mode is FluxMode.PROVIDED and not all(c.deleting for c in api.crds.values())


def _deleting_flux(flux: Sequence[LiveObject], now: str) -> tuple[Deleting, ...]:
    """Our Flux objects as deleting: those with a deletionTimestamp, and those this step deletes
    (since now), so that the status does not change when the deletions land."""

    def timeout(obj: LiveObject) -> str | None:
        if obj.kind != "HelmRelease":
            return None
        uninstall = obj.spec.get("uninstall") or {}
        value = uninstall.get("timeout") or obj.spec.get("timeout")
        return str(value) if value else None

    return tuple(
        Deleting(f"{o.kind}/{o.namespace}/{o.name}", o.deleted_at or now, timeout(o)) for o in flux
    )


def _status(
    inputs: Inputs, plan: Plan, error: str = "", uninstall: Uninstall | None = None
) -> GpuStatus:
    snap = inputs.snap
    observed = Observed(
        helm_release=_find(snap.flux_status, plan.helm_release),
        source=_find(snap.flux_status, plan.source),
        daemonsets=snap.daemonsets,
        cluster_policy=snap.cluster_policy,
        gpu_cluster=snap.gpu_cluster,
        gpu_workloads=snap.gpu_workloads or (),
        image_pulls=snap.image_pulls,
        nodes_without_features=tuple(n.name for n in snap.nodes if n.is_gpu and n.nfd_missing),
        driver_upgrades=tuple(
            (n.name, n.driver_upgrade)
            for n in snap.nodes
            if n.driver_upgrade is not None and n.is_gpu and not n.preinstalled_driver
        ),
        deleting=inputs.gpu.deleting,
        skip_protection=inputs.gpu.skip_protection,
        uninstall=uninstall or Uninstall(),
        applied=not error,
        apply_error=error,
        driver_version_before=_str_or_none(inputs.gpu.status.get("driverVersion")),
    )
    previous = conditions_of(inputs.gpu.status)
    status = aggregate_status(plan, observed, inputs.gpu.generation, previous, inputs.now)
    return with_flux(status, verdict(snap.flux_api), previous, inputs.now)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _find(
    facts: Sequence[HelmReleaseFacts], obj: Mapping[str, Any] | None
) -> HelmReleaseFacts | None:
    """The observed status of one planned Flux object."""
    if obj is None:
        return None
    want = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
    return next((f for f in facts if (f.kind, f.namespace, f.name) == want), None)


def _key(apply: Sequence[Mapping[str, Any]], delete: Sequence[LiveObject]) -> str:
    parts = [json.dumps(obj, sort_keys=True, default=str) for obj in apply]
    parts += [f"delete {o.kind}/{o.namespace}/{o.name}" for o in delete]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# -- statuses of a Gpu that is not reconciled --


def conditions_of(status: Mapping[str, Any]) -> list[Condition]:
    out = []
    for raw in status.get("conditions") or []:
        try:
            out.append(Condition.model_validate(raw))
        except ValidationError:
            continue
    return out


def _error_status(gpu: GpuObject, reason: ReadyReason, message: str, now: str) -> GpuStatus:
    cond = Condition(
        type=ConditionType.READY, status="False", reason=reason, message=message,
        observed_generation=gpu.generation,
    )  # fmt: skip
    return GpuStatus(
        state=GpuState.ERROR,
        message=message,
        observed_generation=gpu.generation,
        conditions=stamp([cond], conditions_of(gpu.status), now),
    )


def refused_status(gpu: GpuObject, now: str) -> GpuStatus:
    message = (
        f"Gpu {gpu.name!r} is ignored: the module serves one Gpu named {SINGLETON_NAME!r}; "
        f"delete this one and create {SINGLETON_NAME!r}"
    )
    return _error_status(gpu, ReadyReason.NOT_THE_SINGLETON, message, now)


def invalid_status(gpu: GpuObject, err: ValidationError, now: str) -> GpuStatus:
    """In the API server's words: an old Gpu may predate a rule that admission now enforces."""
    return _error_status(gpu, ReadyReason.INVALID_SPEC, admission_message(err), now)
