"""The reconcile loop's state machine. Pure: facts in, one `Step` out.

`Machine.decide` works in two steps, as helm-controller's DetermineReleaseState and
actionForState:

1. `Machine.classify(inputs) -> Seen`: the one situation of the Gpu, the observed facts and
   the allowed sources (not the singleton, being deleted, the Flux objects differ from the plan,
   ...), checked in a fixed order;
2. `Machine.rows[situation]`: the row of the table, with its phase, what it does in words,
   whether its writes are retried, and the function that makes its `Step` (one action at
   most: apply, remove what others wrote, delete, remove the finalizer, or an extension's; the
   status
   the Gpu should show; when to look again).

The core table (`Situation`, `ROWS`) is the card's: detect, hand the Gpu to Flux, mirror
Flux's state into the status, uninstall. The extras are extensions (kyma_gpu/extensions/):
each brings its own situations and rows, and `classify` asks them at the named points of its
order (`Point`). A `Machine` is the core with some extensions; extensions/__init__.py's
`MACHINE` has every registered one, `Machine()` the core alone.

A write that failed lately holds a retried row back as Failed until its retry time. The loop
(reconcile/loop.py) carries the action out through the adapter and calls `decide` again with
what the writes returned; it stops when a step has nothing left to do. Deletion is rows of the
same table. docs/architecture.md shows the tables, generated (`Machine.phase_table`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Protocol

from pydantic import ValidationError

from kyma_gpu.api.conditions import ConditionType, ReadyReason
from kyma_gpu.api.models import (
    SINGLETON_NAME,
    GpuSpec,
    GpuState,
    GpuStatus,
)
from kyma_gpu.api.values import (
    Allowlist,
    ValuesContext,
    default_allowlist,
    pruned_error,
    unlisted_values,
)
from kyma_gpu.facts import ClusterFacts, cluster_facts
from kyma_gpu.facts.gpu import GpuObject
from kyma_gpu.plan import AllowedSources, Owner, Plan
from kyma_gpu.plan.actions import Actions, LiveObject, plan_actions
from kyma_gpu.plan.provision import FluxMode, which_flux
from kyma_gpu.status.aggregate import StatusHook
from kyma_gpu.status.deletion import Deleting, Uninstall, uninstall_of
from kyma_gpu.status.events import Report
from kyma_gpu.status.snapshot import (
    Snapshot,
    error_status,
    gpu_status,
    invalid_status,
    refused_status,
)

FINALIZER = "gpu.kyma-project.io/finalizer"
"""kopf's finalizer on the Gpu (handlers.py sets it as kopf's persistence.finalizer): kopf adds
it before the Gpu's daemon writes anything; the daemon removes it when Flux has uninstalled
(RemoveFinalizer), and ends (handlers.py says why not kopf)."""


class Phase(StrEnum):
    REFUSED = "Refused"
    INVALID = "Invalid"
    INITIALIZING = "Initializing"
    BLOCKED = "Blocked"
    APPLYING = "Applying"
    FAILED = "Failed"
    PROGRESSING = "Progressing"
    READY = "Ready"
    UNINSTALLING = "Uninstalling"
    FLUX_INCOMPATIBLE = "FluxIncompatible"
    RELEASED = "Released"


@dataclass(frozen=True, slots=True)
class Failure:
    """The last write of a Gpu that failed, and the retry policy's answers about it: whether it
    holds a step back (`wait`) and whether the status says so (`loud`). reconcile/effects.py's
    `Retries` records failures, and forgets them when a write goes through."""

    key: str
    """The step's key: the writes that failed (`Step.key`)."""
    error: str
    permanent: bool
    """Only a change mends it (403, 422, 404 without Flux); else a conflict, a throttle, ..."""
    attempts: int
    """How often these writes failed in a row."""
    retry_at: float
    """Monotonic seconds: when they may be tried again."""

    LOUD_AFTER = 3
    """A transient failure is retried quietly; from this attempt on, the status shows it."""

    def wait(self, key: str, clock: float) -> float | None:
        """Seconds until the writes of `key` may go again; None: now (or another's failure)."""
        if key != self.key or clock >= self.retry_at:
            return None
        return self.retry_at - clock

    def loud(self, key: str) -> bool:
        """The status shows the failure of the writes of `key`: at once when it is permanent,
        from the `LOUD_AFTER`th attempt when it is transient."""
        return key == self.key and (self.permanent or self.attempts >= self.LOUD_AFTER)


# -- the actions: what one step carries out (reconcile/loop.py matches them in Loop._act) --


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
class RemoveFinalizer:
    """Release the Gpu: nothing of the module is left (kopf added the finalizer)."""


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Remove what other field managers wrote to the module's Flux objects (their `foreign`
    fields), and say so in a Warning Event."""

    objects: tuple[LiveObject, ...]


@dataclass(frozen=True, slots=True)
class ExtensionAction:
    """An extension's writes: the extension carries them out (extensions/base.py,
    `Extension.actions`)."""


@dataclass(frozen=True, slots=True)
class ExtensionRead:
    """A read, not a write, of an extension's: what the next decision needs that no informer
    watches. The extension carries it out (`Extension.reads`); its answer is in the next
    snapshot's `reads`."""


Action = Apply | Reclaim | Delete | RemoveFinalizer | ExtensionAction


@dataclass(frozen=True, slots=True)
class Step:
    phase: StrEnum
    """A `Phase`, or an extension's."""
    action: Action | None = None
    """The writes this step carries out; None: nothing (a status at most)."""
    read: ExtensionRead | None = None
    """What the next snapshot must hold that no informer watches: the loop reads it, and
    decides again with it."""
    status: GpuStatus | None = None
    """The status the Gpu should show; None: leave it as it is."""
    watches: frozenset[str] = frozenset()
    """The extensions' list-watches on demand this step wants observed (their resource keys,
    `Part.watch`): the loop observes those of its pass's steps, and no others."""
    requeue_after: float | None = None
    """Look again after this many seconds even if nothing changes (a retry)."""
    key: str = ""
    """Identifies the writes of this step, to match a failure to them."""
    status_if_failed: GpuStatus | None = None
    """The status to show while these writes wait for a retry after failing."""

    @property
    def writes(self) -> bool:
        """The step carries writes out."""
        return self.action is not None

    @property
    def requests(self) -> bool:
        """The step asks the API server: writes, or a read for the next snapshot. Either can
        fail, and is then held back until its retry (`Row.retried`)."""
        return self.action is not None or self.read is not None


Planner = Callable[[GpuSpec, ClusterFacts, Owner, AllowedSources], Plan]


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
    module_namespace: str = "kyma-system"
    """Where the module's Flux objects (and its own Flux) live."""
    config: tuple[object, ...] = ()
    """The extensions' configurations (`Extension.config`, built by the loop), one per
    extension that has one: each finds its own by type."""
    status_hooks: tuple[StatusHook, ...] = ()
    """The extensions' status parts (`Machine.decide` fills them in from its parts)."""
    allowlist: Allowlist = field(default_factory=default_allowlist)
    """The chart values a Gpu may set: the Catalog's (the loop's); the default rules
    directory's where none is given."""


# -- classify: what the machine sees, one Situation per row of the table --


class Situation(StrEnum):
    """What `classify` sees in the inputs: one value per row of `ROWS` (the core's; an
    extension has its own)."""

    NOT_THE_SINGLETON = "NotTheSingleton"
    FINALIZER_GONE = "FinalizerGone"
    FLUX_OBJECTS_LEFT = "FluxObjectsLeft"
    FLUX_OBJECTS_TERMINATING = "FluxObjectsTerminating"
    NOTHING_LEFT = "NothingLeft"
    SPEC_INVALID = "SpecInvalid"
    NO_FINALIZER = "NoFinalizer"
    PLAN_BLOCKED = "PlanBlocked"
    FLUX_INCOMPATIBLE = "FluxIncompatible"
    FLUX_NOT_SERVED = "FluxNotServed"
    OBJECTS_DIFFER = "ObjectsDiffer"
    FOREIGN_FIELDS = "ForeignFields"
    IN_SYNC = "InSync"


@dataclass(frozen=True, slots=True)
class Seen:
    """A Situation and what `classify` worked out on the way, for the row's step."""

    situation: StrEnum
    """A `Situation`, or an extension's."""
    plan: Plan | None = None
    error: ValidationError | str | None = None
    """Why the spec is invalid, or why it cannot be planned; the incompatible Flux's message."""
    actions: Actions | None = None
    """The plan's objects against the live ones (OBJECTS_DIFFER)."""
    doomed: tuple[LiveObject, ...] = ()
    """The module's Flux objects to delete, HelmRelease first (FLUX_OBJECTS_LEFT); those that
    others wrote to (FOREIGN_FIELDS)."""
    status: GpuStatus | None = None


class Point(StrEnum):
    """Where `classify` asks the extensions, in its order: the first extension (in the order
    of registration) that sees a situation of its own there decides the row."""

    DELETING = "being deleted, before the module's Flux objects are deleted"
    UNINSTALLED = "being deleted, uninstalled, before the finalizer is removed"
    FLUX = "the plan's Flux compatible, before waiting for its APIs"
    APPLIED = "the plan's objects applied, before the status"


Hook = Callable[[Inputs, Plan | None], Seen | None]
"""An extension's classify at a `Point`: its situation, or None (not one of its)."""

Shape = Callable[[Inputs, tuple[Mapping[str, Any], ...]], tuple[Mapping[str, Any], ...]]
"""An extension's change to the plan's objects before they are compared with the live ones
and applied (the module's own Flux labels them for its shard)."""


class Wanted(Protocol):
    """What the machine reads of an extension's list-watch on demand (extensions/base.py
    `Watch`): its resource key, and whether the inputs want it observed."""

    @property
    def resource(self) -> str: ...

    @property
    def wanted(self) -> Callable[[Inputs], bool]: ...


class Part(Protocol):
    """What the machine reads of an extension (extensions/base.py: `Extension`)."""

    @property
    def name(self) -> str: ...

    @property
    def classify(self) -> Mapping[Point, Hook]: ...

    @property
    def rows(self) -> Mapping[StrEnum, Row]: ...

    @property
    def watch(self) -> Wanted | None: ...

    @property
    def shapes(self) -> Shape | None: ...

    @property
    def status(self) -> Report | None: ...


def _classify_running(machine: Machine, inputs: Inputs, plan: Plan) -> Seen:
    if plan.helm_release is None:
        return Seen(Situation.PLAN_BLOCKED, plan)
    flux = which_flux(inputs.snap.flux_api)
    if flux.mode is FluxMode.INCOMPATIBLE:
        return Seen(Situation.FLUX_INCOMPATIBLE, plan, error=flux.message)
    seen = machine.ask(Point.FLUX, inputs, plan)
    if seen is not None:
        return seen
    if not flux.served:
        return Seen(Situation.FLUX_NOT_SERVED, plan)
    return _classify_served(machine, inputs, plan)


def _classify_served(machine: Machine, inputs: Inputs, plan: Plan) -> Seen:
    """Flux is ready for the plan's objects: are they applied, and is all well?"""
    objects = machine.shape(inputs, plan.objects)
    actions = plan_actions(objects, inputs.snap.flux, inputs.snap.as_applied)
    if actions.apply or actions.delete:
        return Seen(Situation.OBJECTS_DIFFER, plan, actions=actions)
    written = tuple(o for o in inputs.snap.flux if o.foreign and not o.deleting)
    if written:
        return Seen(Situation.FOREIGN_FIELDS, plan, doomed=written)
    seen = machine.ask(Point.APPLIED, inputs, plan)
    if seen is not None:
        return seen
    return Seen(Situation.IN_SYNC, plan, status=status_of(inputs, plan))


def _classify_deleting(machine: Machine, inputs: Inputs, spec: GpuSpec | None) -> Seen:
    gpu, snap = inputs.gpu, inputs.snap
    if FINALIZER not in gpu.finalizers:
        return Seen(Situation.FINALIZER_GONE)
    planned = _plan(inputs, spec) if spec is not None else None
    plan = planned if isinstance(planned, Plan) else None
    seen = machine.ask(Point.DELETING, inputs, plan)
    if seen is not None:
        return seen
    if snap.flux:
        # HelmRelease first: Flux uninstalls the release while its source is still there.
        doomed = tuple(sorted((o for o in snap.flux if not o.deleting),
                              key=lambda o: o.kind != "HelmRelease"))  # fmt: skip
        left = Situation.FLUX_OBJECTS_LEFT if doomed else Situation.FLUX_OBJECTS_TERMINATING
        return Seen(left, plan, doomed=doomed)
    return _classify_uninstalled(machine, inputs)


def _classify_uninstalled(machine: Machine, inputs: Inputs) -> Seen:
    """Flux uninstalled the release: what the extensions left goes, then the finalizer."""
    seen = machine.ask(Point.UNINSTALLED, inputs, None)
    return seen if seen is not None else Seen(Situation.NOTHING_LEFT)


# -- the table: each Situation's row, and the step it makes --


Build = Callable[[Seen, Inputs], Step]


@dataclass(frozen=True, slots=True)
class Row:
    when: str
    """The Situation in words."""
    phase: StrEnum | tuple[StrEnum, ...]
    """A `Phase`, or an extension's; the phases its step may have, where the status says
    which (InSync)."""
    does: str
    """The step's action or status, in words."""
    retried: bool
    """The step asks the API server (`Step.requests`): after a failure it is Failed (the status
    of the failure) until the retry is due, then it is tried again."""
    build: Build


def _refused(seen: Seen, inputs: Inputs) -> Step:
    return Step(Phase.REFUSED, status=refused_status(inputs.gpu, inputs.now))


def _released(seen: Seen, inputs: Inputs) -> Step:
    return Step(Phase.RELEASED)


def _uninstalling(seen: Seen, inputs: Inputs) -> Step:
    uninstall = uninstall_of(_deleting_flux(inputs.snap.flux, inputs.now), inputs.now)
    plan = seen.plan
    status = status_of(inputs, plan, uninstall=uninstall) if plan is not None else None
    return Step(Phase.UNINSTALLING, Delete(seen.doomed) if seen.doomed else None, status=status,
                key=_key((), seen.doomed), requeue_after=uninstall.next_stall_in)  # fmt: skip


def _release(seen: Seen, inputs: Inputs) -> Step:
    return Step(Phase.RELEASED, RemoveFinalizer(), key=RELEASE_KEY)


RELEASE_KEY = "release"
"""The key of the finalizer's removal: its writes are always the same."""


def _invalid(seen: Seen, inputs: Inputs) -> Step:
    if isinstance(seen.error, ValidationError):
        return Step(Phase.INVALID, status=invalid_status(inputs.gpu, seen.error, inputs.now))
    message = str(seen.error)
    status = error_status(inputs.gpu, ReadyReason.PLAN_FAILED, message, inputs.now)
    return Step(Phase.INVALID, status=status)


def _initializing(seen: Seen, inputs: Inputs) -> Step:
    return Step(Phase.INITIALIZING)


def _status_only(phase: Phase) -> Build:
    def build(seen: Seen, inputs: Inputs) -> Step:
        assert seen.plan is not None
        return Step(phase, status=seen.status or status_of(inputs, seen.plan))

    return build


def _in_sync(seen: Seen, inputs: Inputs) -> Step:
    """The phase follows the status, as Flux's Ready summarises its conditions."""
    status = seen.status
    assert status is not None
    ready = next((c for c in status.conditions if c.type == ConditionType.READY), None)
    if status.state is GpuState.ERROR:
        return Step(Phase.FAILED, status=status)
    if ready is not None and ready.status == "True":
        return Step(Phase.READY, status=status)
    return Step(Phase.PROGRESSING, status=status)


def _flux_incompatible(seen: Seen, inputs: Inputs) -> Step:
    reason, message = ReadyReason.FLUX_INCOMPATIBLE, str(seen.error)
    status = error_status(inputs.gpu, reason, message, inputs.now)
    return Step(Phase.FLUX_INCOMPATIBLE, status=status)


def _applying(seen: Seen, inputs: Inputs) -> Step:
    assert seen.plan is not None
    assert seen.actions is not None
    apply, stale = seen.actions.apply, seen.actions.delete
    key = _key(apply, stale)
    return Step(Phase.APPLYING, Apply(apply, stale), key=key,
                status_if_failed=loud_status(inputs, seen.plan, key))  # fmt: skip


def _reclaiming(seen: Seen, inputs: Inputs) -> Step:
    assert seen.plan is not None
    said = [f"{o.kind}/{o.namespace}/{o.name} {f.dotted}={_value(o, f.path)}"
            for o in seen.doomed for f in o.foreign]  # fmt: skip
    key = "reclaim-" + hashlib.sha256("\n".join(said).encode()).hexdigest()[:16]
    return Step(Phase.APPLYING, Reclaim(seen.doomed), key=key,
                status_if_failed=loud_status(inputs, seen.plan, key))  # fmt: skip


def _value(live: LiveObject, path: tuple[str, ...]) -> str:
    node: Any = live.guarded
    for part in path:
        node = node.get(part) if isinstance(node, Mapping) else None
    return json.dumps(node, sort_keys=True, default=str)


S = Situation
ROWS: Mapping[Situation, Row] = MappingProxyType({
    S.NOT_THE_SINGLETON: Row(
        "the Gpu is not named `gpu`", Phase.REFUSED, "status `Error` (`NotTheSingleton`)",
        False, _refused),
    S.FINALIZER_GONE: Row(
        "being deleted, our finalizer gone", Phase.RELEASED, "nothing", False, _released),
    S.FLUX_OBJECTS_LEFT: Row(
        "being deleted, our Flux objects remain", Phase.UNINSTALLING,
        "delete them, HelmRelease first; look again when the uninstall timeout + 60 s "
        "passes, then `Error` (`UninstallStalled`)", True, _uninstalling),
    S.FLUX_OBJECTS_TERMINATING: Row(
        "being deleted, our Flux objects remain, all terminating", Phase.UNINSTALLING,
        "status; look again when the uninstall timeout + 60 s passes", False, _uninstalling),
    S.NOTHING_LEFT: Row(
        "being deleted, nothing of the module's left", Phase.RELEASED,
        "remove the finalizer; the Gpu's daemon ends", True, _release),
    S.SPEC_INVALID: Row(
        "the model rejects the spec, or (with the finalizer) planning it fails", Phase.INVALID,
        "status `Error` (`InvalidSpec`; `PlanFailed`): nothing is applied (a deletion still "
        "goes on)", False, _invalid),
    S.NO_FINALIZER: Row(
        "kopf's finalizer is missing", Phase.INITIALIZING,
        "nothing: kopf adds `gpu.kyma-project.io/finalizer` (nothing is applied before it), "
        "and its answer wakes the daemon", False, _initializing),
    S.PLAN_BLOCKED: Row(
        "the plan has errors", Phase.BLOCKED, "status only: nothing is applied", False,
        _status_only(Phase.BLOCKED)),
    S.FLUX_INCOMPATIBLE: Row(
        "the cluster's Flux lacks a CRD, or a CRD does not serve the version the module "
        "writes", Phase.FLUX_INCOMPATIBLE,
        "status `Error` (`FluxIncompatible`): nothing is applied, the other Flux is never "
        "written", False, _flux_incompatible),
    S.FLUX_NOT_SERVED: Row(
        "Flux's APIs are not served yet (the module's own Flux starting, or no Flux at all)",
        Phase.PROGRESSING,
        "status; wait for its CRDs", False, _status_only(Phase.PROGRESSING)),
    S.OBJECTS_DIFFER: Row(
        "the Flux objects differ from the plan", Phase.APPLYING,
        "server-side apply (and delete stale ones)", True, _applying),
    S.FOREIGN_FIELDS: Row(
        "another field manager wrote fields of the module's Flux objects that the plan does "
        "not set (their spec but `suspend`, their labels)", Phase.APPLYING,
        "remove them (a JSON patch that tests each value first); a Warning Event "
        "(`ForeignChangesRemoved`) names each field and its manager", True, _reclaiming),
    S.IN_SYNC: Row(
        "applied", (Phase.FAILED, Phase.PROGRESSING, Phase.READY),
        "status; the phase follows it: Failed when it says `Error`, Ready when its Ready "
        "condition is `True`, else Progressing", False, _in_sync),
})  # fmt: skip
"""The state machine as a table: every Situation, in the order `classify` checks them, its
phase and its step. docs/architecture.md shows it (`phase_table`, generated)."""
del S


@dataclass(frozen=True, slots=True)
class Machine:
    """The core table and the extensions' (`parts`, in the order `classify` asks them)."""

    parts: tuple[Part, ...] = ()
    rows: Mapping[StrEnum, Row] = field(init=False)
    """`ROWS` and every extension's rows."""

    def __post_init__(self) -> None:
        rows: dict[StrEnum, Row] = dict(ROWS.items())
        for part in self.parts:
            clash = sorted({s.value for s in rows} & {s.value for s in part.rows})
            if clash:
                raise ValueError(f"the extension {part.name} repeats situations: {clash}")
            rows.update(part.rows)
        object.__setattr__(self, "rows", MappingProxyType(rows))

    @property
    def status_hooks(self) -> tuple[StatusHook, ...]:
        """The extensions' status parts, in their order."""
        return tuple(p.status.part for p in self.parts if p.status is not None)

    def ask(self, point: Point, inputs: Inputs, plan: Plan | None) -> Seen | None:
        """The first extension's situation at `point`, or None."""
        for part in self.parts:
            hook = part.classify.get(point)
            seen = hook(inputs, plan) if hook is not None else None
            if seen is not None:
                return seen
        return None

    def shape(
        self, inputs: Inputs, objects: tuple[Mapping[str, Any], ...]
    ) -> tuple[Mapping[str, Any], ...]:
        """The plan's objects as the extensions change them, in their order."""
        for part in self.parts:
            if part.shapes is not None:
                objects = part.shapes(inputs, objects)
        return objects

    def classify(self, inputs: Inputs) -> Seen:
        """The one situation of the inputs, checked in the order of `ROWS`; the extensions'
        at their points."""
        gpu = inputs.gpu
        if gpu.name != SINGLETON_NAME:
            return Seen(Situation.NOT_THE_SINGLETON)
        spec = _parse(gpu, inputs.allowlist)
        if gpu.deleting:
            return _classify_deleting(self, inputs, spec if isinstance(spec, GpuSpec) else None)
        if isinstance(spec, ValidationError):
            return Seen(Situation.SPEC_INVALID, error=spec)
        if FINALIZER not in gpu.finalizers:
            return Seen(Situation.NO_FINALIZER)
        plan = _plan(inputs, spec)
        if isinstance(plan, str):
            return Seen(Situation.SPEC_INVALID, error=plan)
        return _classify_running(self, inputs, plan)

    def decide(self, inputs: Inputs) -> Step:
        """The situation's row makes the step; a write that failed lately holds a retried row
        back (phase Failed) until its retry time."""
        inputs = replace(inputs, status_hooks=self.status_hooks)
        seen = self.classify(inputs)
        row = self.rows[seen.situation]
        watches = frozenset(p.watch.resource for p in self.parts
                            if p.watch is not None and p.watch.wanted(inputs))  # fmt: skip
        step = replace(row.build(seen, inputs), watches=watches)
        failed = inputs.failure
        wait = failed.wait(step.key, inputs.clock) if row.retried and failed is not None else None
        if wait is None:
            return step
        return Step(Phase.FAILED, status=step.status_if_failed or step.status,
                    watches=step.watches, requeue_after=wait)  # fmt: skip

    def phase_table(self) -> str:
        """The core table, then one per extension, in Markdown (docs/architecture.md)."""
        parts = [_table(ROWS)]
        for part in self.parts:
            points = "; ".join(f"{point.value}" for point in part.classify)
            heading = f"Extension `{part.name}`, asked where the Gpu is {points}:"
            parts.append(f"{heading}\n\n{_table(part.rows)}")
        return "\n".join(parts)


def _table(rows: Mapping[Situation, Row] | Mapping[StrEnum, Row]) -> str:
    lines = ["| situation | when | phase | step | a failed write |", "|---|---|---|---|---|"]
    for situation, row in rows.items():
        retried = "Failed until its retry is due" if row.retried else "no action to retry"
        phases = row.phase if isinstance(row.phase, tuple) else (row.phase,)
        lines.append(f"| {situation.value} | {row.when} | {', '.join(p.value for p in phases)} | "
                     f"{row.does} | {retried} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _parse(gpu: GpuObject, allowlist: Allowlist) -> GpuSpec | ValidationError:
    """The spec, or why it is invalid: also when the API server pruned a value the user wrote
    that the allowlist no longer holds (the running release then stays as it is)."""
    pruned = unlisted_values(gpu.managed_values, allowlist)
    if pruned:
        return pruned_error(pruned)
    try:
        return GpuSpec.model_validate(gpu.spec, context=ValuesContext(allowlist))
    except ValidationError as err:
        return err


def _plan(inputs: Inputs, spec: GpuSpec) -> Plan | str:
    """The plan, or why there is none: a spec the model accepts but the module cannot plan
    (or serialise, as once at 300 levels of spec.values) must show in the status, not fail
    every pass in silence, and must not stop a deletion."""
    owner = Owner(uid=inputs.gpu.uid, name=inputs.gpu.name)
    try:
        facts = cluster_facts(n.facts for n in inputs.snap.nodes)
        return inputs.planner(spec, facts, owner, inputs.snap.allowed_sources)
    except (RecursionError, ValueError, TypeError) as err:
        return (
            f"the module cannot plan this spec ({type(err).__name__}: {err}); nothing is "
            "applied. This is a defect of the module: report it with the Gpu's spec"
        )


def status_of(
    inputs: Inputs, plan: Plan, error: str = "", uninstall: Uninstall | None = None
) -> GpuStatus:
    return gpu_status(inputs.gpu, inputs.snap, plan, inputs.now, error, uninstall,
                      inputs.status_hooks)  # fmt: skip


def loud_status(inputs: Inputs, plan: Plan, key: str) -> GpuStatus | None:
    """The status of a failed write: after repeated transient failures, or a permanent one."""
    failed = inputs.failure
    if failed is None or not failed.loud(key):
        return None
    return status_of(inputs, plan, error=failed.error)


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


def _key(apply: Sequence[Mapping[str, Any]], delete: Sequence[LiveObject]) -> str:
    parts = [json.dumps(obj, sort_keys=True, default=str) for obj in apply]
    parts += [f"delete {o.kind}/{o.namespace}/{o.name}" for o in delete]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
