"""`decide(Inputs) -> Step` as a table: one case (or more) per situation, the rows of
`MACHINE.rows` (the core's `machine.ROWS` and the registered extensions'), asserting that
`classify` sees that situation, and the phase and the actions of the step.

The table is code (`ROWS`), not text: `test_every_situation_has_a_case` fails on a situation
without a case, a case's step must have its row's phase, and a row that says its writes are
retried must write (and the other way round). docs/architecture.md shows the tables, generated
(`phase_table`; tests/unit/test_docs.py checks it). The core alone (`Machine()`, no extension)
classifies the core's cases as the whole machine does. Checked by breaking one thing at
a time and seeing a test fail, then restoring: `_classify_running` giving IN_SYNC for a
blocked plan (the Blocked case fails), the HelmRelease-first sort of Uninstalling dropped (the
Uninstalling case fails), Initializing given no finalizer change (its case fails), and a row's
`retried` flag flipped (the retry tests fail).
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import logging
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, assert_never

import pytest

from kyma_gpu.api.models import GpuSpec
from kyma_gpu.extensions import EXTENSIONS, MACHINE, NODE_FOLDS
from kyma_gpu.extensions.node_marks.machine import MarkNodes
from kyma_gpu.extensions.node_marks.machine import Phase as MarksPhase
from kyma_gpu.extensions.node_marks.machine import Situation as Marks
from kyma_gpu.extensions.own_flux.bundle import MARKER_CRD, FluxBundle
from kyma_gpu.extensions.own_flux.machine import (
    FluxLeftovers,
    Leftover,
    ListFlux,
    OwnFluxConfig,
    RemoveFlux,
)
from kyma_gpu.extensions.own_flux.machine import Phase as OwnFluxPhase
from kyma_gpu.extensions.own_flux.machine import Situation as OwnFlux
from kyma_gpu.extensions.workload_protection.machine import SKIP_PROTECTION_ANNOTATION
from kyma_gpu.extensions.workload_protection.machine import Phase as ProtectionPhase
from kyma_gpu.extensions.workload_protection.machine import Situation as Protection
from kyma_gpu.extensions.workload_protection.pods import PODS
from kyma_gpu.facts import (
    ClusterFacts,
    MachineTypeRegistry,
    ObservedNode,
    cluster_facts,
    observe_node,
)
from kyma_gpu.facts.gpu import GpuObject, gpu_object
from kyma_gpu.facts.stack import FluxObjectFacts, flux_object_facts
from kyma_gpu.plan import AllowedSources, Owner, Plan, make_plan
from kyma_gpu.plan.actions import LiveObject, live_object
from kyma_gpu.plan.provision import REQUIRED_APIS, Api, CrdFacts, FluxApi
from kyma_gpu.reconcile import machine
from kyma_gpu.reconcile.machine import (
    FINALIZER,
    Action,
    Apply,
    Delete,
    ExtensionAction,
    Failure,
    Inputs,
    Machine,
    Phase,
    Reclaim,
    RemoveFinalizer,
    Situation,
    Step,
)
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status import DaemonSetFacts, OperatorStateFacts, daemonset_facts
from kyma_gpu.status.snapshot import Snapshot
from tests.unit.builders import cpu_node, node
from tests.unit.test_node_marks import MARKED
from tests.unit.test_node_marks import gpu as gpu_node


def observed(body: Mapping[str, Any], registry: MachineTypeRegistry) -> ObservedNode:
    """A Node body's facts, with what the registered extensions keep of it (node marks)."""
    return observe_node(body, registry, NODE_FOLDS)


NOW = "2026-12-01T10:00:00Z"
classify, decide = MACHINE.classify, MACHINE.decide
DELETED_AT = "2026-12-01T09:59:00Z"

# -- building Inputs --


@dataclass(frozen=True)
class World:
    catalog: Catalog
    nodes: tuple[ObservedNode, ...]

    def planner(
        self, spec: GpuSpec, facts: ClusterFacts, owner: Owner, allowed_sources: AllowedSources
    ) -> Plan:
        return make_plan(spec, facts, self.catalog, owner, allowed_sources)

    def plan(self, gpu: GpuObject) -> Plan:
        owner = Owner(uid=gpu.uid, name=gpu.name)
        spec = GpuSpec.model_validate(gpu.spec)
        return self.planner(
            spec, cluster_facts(n.facts for n in self.nodes), owner, AllowedSources()
        )

    def inputs(
        self, gpu: GpuObject, failure: Failure | None = None,
        gpu_workloads: tuple[str, ...] | None = None, **snap: Any,
    ) -> Inputs:  # fmt: skip
        """`gpu_workloads`: users' GPU pods as workload protection observes them (None: not
        listed)."""
        snapshot = Snapshot(nodes=self.nodes, observed={PODS: gpu_workloads}, **snap)
        return Inputs(gpu, snapshot, self.planner, failure, clock=100.0, now=NOW)


@pytest.fixture(scope="module")
def world(catalog: Catalog) -> World:
    return World(catalog, tuple(observed(b, catalog.machine_types) for b in _BODIES.values()))


_BODIES = {b["metadata"]["name"]: b for b in (node("gpu-1"), node("gpu-2"), cpu_node("cpu-1"))}
"""The Nodes of the `world` fixture, by name."""


def gpu(
    name: str = "gpu",
    spec: Mapping[str, Any] | None = None,
    finalizer: bool = True,
    deleting: bool = False,
    skip_protection: bool = False,
) -> GpuObject:
    meta: dict[str, Any] = {"name": name, "uid": "uid-1", "generation": 3, "resourceVersion": "7"}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = DELETED_AT
    if skip_protection:
        meta["annotations"] = {SKIP_PROTECTION_ANNOTATION: "true"}
    return gpu_object({"metadata": meta, "spec": dict(spec or {})})


WRITTEN = [
    {
        "manager": "intruder",
        "operation": "Update",
        "fieldsV1": {
            "f:spec": {
                "f:valuesFrom": {},
                "f:suspend": {},
                "f:values": {"f:validator": {"f:image": {}}},
            }
        },
    }
]
"""A writer in kyma-system that added valuesFrom and a validator image (and suspended the
release: that stays the user's)."""


def live(
    plan: Plan, deleting: bool = False, ready: bool = True, written: bool = False
) -> dict[str, Any]:
    """The plan's Flux objects as the API holds them once applied (and Flux reconciled them):
    the `flux` and `flux_status` of a Snapshot. `written`: someone else wrote to the
    HelmRelease too (WRITTEN)."""
    objects: list[LiveObject] = []
    status: list[FluxObjectFacts] = []
    for planned in plan.objects:
        body = dict(planned)
        meta = {**body["metadata"], "generation": 1}
        if written and planned["kind"] == "HelmRelease":
            meta["managedFields"] = WRITTEN
            values = {**body["spec"]["values"], "validator": {"image": "evil"}}
            body["spec"] = {**body["spec"], "valuesFrom": [], "suspend": True, "values": values}
        if deleting:
            meta["deletionTimestamp"] = DELETED_AT
        body["metadata"] = meta
        conditions = [{"type": "Ready", "status": "True" if ready else "False",
                       "reason": "Succeeded" if ready else "InstallFailed",
                       "message": "m", "observedGeneration": 1}]  # fmt: skip
        body["status"] = {"observedGeneration": 1, "conditions": conditions}
        if planned["kind"] == "HelmRelease" and ready:
            body["status"]["history"] = [{"status": "deployed", "chartVersion": "v26.7.0"}]
        objects.append(live_object(body))
        status.append(flux_object_facts(body))
    return {"flux": tuple(objects), "flux_status": tuple(status)}


def ready_components() -> dict[str, Any]:
    driver: DaemonSetFacts = daemonset_facts({
        "metadata": {"name": "nvidia-driver-daemonset-x", "generation": 1,
                     "labels": {"app.kubernetes.io/component": "nvidia-driver"}},
        "spec": {"updateStrategy": {"type": "OnDelete"}},
        "status": {"desiredNumberScheduled": 2, "numberAvailable": 2, "updatedNumberScheduled": 2,
                   "observedGeneration": 1},
    })  # fmt: skip
    return {"daemonsets": (driver,), "cluster_policy": OperatorStateFacts("ready")}


def no_flux() -> FluxApi:
    return FluxApi(crds={}, apis=dict.fromkeys(REQUIRED_APIS, Api.ABSENT))


def own_flux(served: bool, current: bool = True, deleting: bool = False) -> FluxApi:
    """The module's own Flux: its CRDs labelled as provided, with the bundle hash."""
    digest = FluxBundle().hash if current else "an-older-bundle"
    crds = {
        name: CrdFacts(uid=name, provided=True, deleting=deleting,
                       bundle_hash=digest if name == MARKER_CRD else None)
        for name in REQUIRED_APIS
    }  # fmt: skip
    api = Api.SERVED if served else Api.UNKNOWN
    return FluxApi(crds=crds, apis=dict.fromkeys(REQUIRED_APIS, api))


def partial_flux() -> FluxApi:
    """The cluster's own Flux without its HelmRelease CRD."""
    crds = {name: CrdFacts(uid=name) for name in REQUIRED_APIS if name != MARKER_CRD}
    return FluxApi(crds=crds, apis=dict.fromkeys(REQUIRED_APIS, Api.SERVED))


# -- what a step does --


def _deletes(objects: tuple[LiveObject, ...]) -> list[str]:
    return [f"delete {o.kind}/{o.namespace}/{o.name}" for o in objects]


def said(action: Action | None) -> list[str]:  # noqa: PLR0911 (one case an action)
    """An action in words: what a row's 'action' column says."""
    match action:
        case None:
            return []
        case Apply(objects, stale):
            return [f"apply {o['kind']}/{o['metadata']['name']}" for o in objects] + _deletes(stale)
        case Delete(objects):
            return _deletes(objects)
        case RemoveFinalizer():
            return ["remove finalizer"]
        case Reclaim(objects):
            return [f"remove {o.kind}/{o.name} {f.dotted} ({f.manager})"
                    for o in objects for f in o.foreign]  # fmt: skip
        case RemoveFlux(_, _, hand_over, announce):
            crds = "hand its CRDs over" if hand_over else "delete its CRDs"
            return [f"remove the module's Flux, {crds}"] + ([announce.reason] if announce else [])
        case MarkNodes(writes):
            return [f"mark {w.name} unhealthy={w.unhealthy} cordon={w.cordon}" for w in writes]
        case ExtensionAction():
            raise AssertionError(f"no words for {action!r}")
        case _:
            assert_never(action)


def actions(step: Step) -> tuple[str, ...]:
    """The step's action, read and requests, in words."""
    read = ["list Flux objects"] if isinstance(step.read, ListFlux) else []
    return (*said(step.action), *read, *(f"watch {r}" for r in sorted(step.watches)))


def ready_reason(step: Step) -> str | None:
    if step.status is None:
        return None
    ready = next(c for c in step.status.conditions if c.type == "Ready")
    return ready.reason


@dataclass(frozen=True)
class Case:
    situation: StrEnum
    """What `classify` must see: the row of `MACHINE.rows`."""
    inputs: Callable[[World], Inputs]
    phase: StrEnum
    actions: tuple[str, ...]
    state: str | None = None
    """The status's state; None: the step leaves the status as it is."""
    reason: str | None = None
    """The Ready condition's reason, when it matters."""
    check: Callable[[World, Step], None] = lambda _world, _step: None


DOOMED = (
    "delete HelmRelease/kyma-system/gpu-operator",
    "delete HelmRepository/kyma-system/gpu-operator",
)
"""Uninstalling deletes the HelmRelease first: Flux uninstalls while its source is there."""


def _names_the_pod(world: World, step: Step) -> None:
    assert step.status is not None
    assert "ml/train" in " ".join(c.message for c in step.status.conditions)


def _uninstalling(world: World, step: Step) -> None:
    assert step.key
    assert step.requeue_after is not None
    assert step.requeue_after > 0  # the uninstall's bound, then Error (UninstallStalled)


def _applying(world: World, step: Step) -> None:
    assert step.key
    assert step.status is None  # the status follows the writes
    assert step.status_if_failed is None  # a first attempt says nothing when it fails


def _providing(world: World, step: Step) -> None:
    assert isinstance(step.action, Apply)
    assert step.action.objects[-1]["metadata"]["name"] == MARKER_CRD  # the marker last
    assert step.key == f"flux-bundle-{FluxBundle().hash}"


OTHERS = Leftover("HelmRelease", "team-a/app", terminating=False)
TERMINATING = Leftover("HelmChart", "kyma-system/kyma-system-gpu-operator", terminating=True)


def _removal_key(world: World, step: Step) -> None:
    assert step.key == "flux-remove"  # a failed removal holds the list back, and the other way
    if isinstance(step.action, RemoveFlux):  # the step names what goes, the loop only deletes
        assert step.action.workloads == FluxBundle().workloads()
        assert step.action.crds == FluxBundle().crds()


def _removal_waits(world: World, step: Step) -> None:
    """Nothing observes the terminating HelmChart: look again (and list again) after a while,
    by default the own Flux's configuration's."""
    assert step.requeue_after == OwnFluxConfig().removal_wait_seconds


def _plan_failed(*_: Any) -> Plan:
    raise RecursionError("maximum recursion depth exceeded")


def _unplannable(world: World) -> Inputs:
    return dataclasses.replace(world.inputs(gpu()), planner=_plan_failed)


def _failed_lately(world: World) -> Inputs:
    """The apply of a spec change failed (403) and its retry is not due."""
    changed = gpu(spec={"components": {"migManager": True}})
    applied = live(world.plan(gpu()))
    key = decide(world.inputs(changed, **applied)).key
    failure = Failure(key, "403 Forbidden", permanent=True, attempts=1, retry_at=130.0)
    return world.inputs(changed, failure, **applied)


def _failed_lately_check(world: World, step: Step) -> None:
    assert step.requeue_after == pytest.approx(30.0)
    assert step.status is not None
    release = next(c for c in step.status.conditions if c.type == "ReleaseReady")
    assert release.reason == "ApplyFailed"
    assert release.message.endswith("failed: 403 Forbidden")


def _world_of(world: World, *bodies: dict[str, Any]) -> World:
    facts = tuple(observed(b, world.catalog.machine_types) for b in bodies)
    return World(world.catalog, facts)


def _sick(world: World, remediation: str) -> Inputs:
    """Applied and ready; gpu-1's GPU withdrawn by the device plugin (allocatable 0)."""
    sick = _world_of(world, gpu_node("gpu-1", allocatable="0"), gpu_node("gpu-2"))
    spec = {"health": {"remediation": remediation}}
    snap = live(sick.plan(gpu(spec=spec)))
    snap.update(ready_components())
    return sick.inputs(gpu(spec=spec), **snap)


def _marks_then_status(world: World, step: Step) -> None:
    assert step.status is None  # the status shows the marks: written by the next step
    assert step.status_if_failed is not None


def _marked_and_deleting(world: World) -> Inputs:
    """Uninstalled, gpu-1 still carries the manager's condition."""
    marked = _world_of(world, gpu_node("gpu-1", status=MARKED), gpu_node("gpu-2"))
    return marked.inputs(gpu(deleting=True), gpu_workloads=())


def _applied(world: World, ready: bool = True, components: bool = True) -> Inputs:
    snap = live(world.plan(gpu()), ready=ready)
    if components:
        snap.update(ready_components())
    return world.inputs(gpu(), **snap)


S = Situation
CASES = [
    Case(S.NOT_THE_SINGLETON, lambda w: w.inputs(gpu("other")),
         Phase.REFUSED, (), state="Error", reason="NotTheSingleton"),
    Case(S.FINALIZER_GONE,
         lambda w: w.inputs(gpu(finalizer=False, deleting=True), **live(w.plan(gpu()))),
         Phase.RELEASED, ()),
    Case(Protection.WORKLOADS_UNLISTED,
         lambda w: w.inputs(gpu(deleting=True), gpu_workloads=None, **live(w.plan(gpu()))),
         ProtectionPhase.WAITING_FOR_WORKLOADS, ("watch pods",)),
    Case(Protection.WORKLOADS_RUNNING,
         lambda w: w.inputs(gpu(deleting=True), gpu_workloads=("ml/train",),
                            **live(w.plan(gpu()))),
         ProtectionPhase.WAITING_FOR_WORKLOADS, ("watch pods",), state="Warning", reason="Deleting",
         check=_names_the_pod),
    Case(S.FLUX_OBJECTS_LEFT,  # the skip annotation: pods are not looked at
         lambda w: w.inputs(gpu(deleting=True, skip_protection=True), gpu_workloads=None,
                            **live(w.plan(gpu()))),
         Phase.UNINSTALLING, DOOMED,
         state="Deleting", reason="Deleting"),
    Case(S.FLUX_OBJECTS_LEFT,
         lambda w: w.inputs(gpu(deleting=True), gpu_workloads=(), **live(w.plan(gpu()))),
         Phase.UNINSTALLING,
         (*DOOMED, "watch pods"),
         state="Deleting", reason="Deleting", check=_uninstalling),
    Case(S.FLUX_OBJECTS_TERMINATING,  # already deleting: nothing deleted twice
         lambda w: w.inputs(gpu(deleting=True), gpu_workloads=(),
                            **live(w.plan(gpu()), deleting=True)),
         Phase.UNINSTALLING, ("watch pods",), state="Deleting", reason="Deleting",
         check=_uninstalling),
    Case(OwnFlux.OWN_FLUX_UNLISTED,
         lambda w: w.inputs(gpu(deleting=True), gpu_workloads=(), flux_api=own_flux(True)),
         OwnFluxPhase.REMOVING_FLUX, ("list Flux objects", "watch pods"), check=_removal_key),
    Case(OwnFlux.OWN_FLUX_UNUSED,  # the list found nothing else
         lambda w: w.inputs(gpu(deleting=True), gpu_workloads=(), flux_api=own_flux(True),
                            reads=(FluxLeftovers(()),)),
         OwnFluxPhase.REMOVING_FLUX, ("remove the module's Flux, delete its CRDs", "watch pods"),
         check=_removal_key),
    Case(OwnFlux.OWN_FLUX_IN_USE,  # others' objects use its CRDs
         lambda w: w.inputs(gpu(deleting=True, skip_protection=True), flux_api=own_flux(True),
                            reads=(FluxLeftovers((OTHERS,)),)),
         OwnFluxPhase.REMOVING_FLUX,
         ("remove the module's Flux, hand its CRDs over", "FluxHandedOver"),
         check=_removal_key),
    Case(OwnFlux.OWN_FLUX_TERMINATING,  # one of the module's still terminates
         lambda w: w.inputs(gpu(deleting=True), gpu_workloads=(), flux_api=own_flux(True),
                            reads=(FluxLeftovers((OTHERS, TERMINATING)),)),
         OwnFluxPhase.REMOVING_FLUX, ("watch pods",), check=_removal_waits),
    Case(S.NOTHING_LEFT,
         lambda w: w.inputs(gpu(deleting=True), gpu_workloads=()),
         Phase.RELEASED, ("remove finalizer", "watch pods")),
    Case(S.NOTHING_LEFT,  # the module's own Flux already on its way out
         lambda w: w.inputs(gpu(deleting=True, skip_protection=True),
                            flux_api=own_flux(True, deleting=True)),
         Phase.RELEASED, ("remove finalizer",)),
    Case(S.SPEC_INVALID,
         lambda w: w.inputs(gpu(spec={"driver": {"mode": "Foo"}})),
         Phase.INVALID, (), state="Error", reason="InvalidSpec"),
    Case(S.SPEC_INVALID, _unplannable,  # the model takes it, planning fails
         Phase.INVALID, (), state="Error", reason="PlanFailed"),
    Case(S.NO_FINALIZER, lambda w: w.inputs(gpu(finalizer=False)),  # kopf adds it
         Phase.INITIALIZING, ()),
    Case(S.PLAN_BLOCKED,
         lambda w: w.inputs(gpu(spec={"driver": {"installerRelease": "9.9.9"}})),
         Phase.BLOCKED, (), state="Error"),
    Case(S.FLUX_INCOMPATIBLE,
         lambda w: w.inputs(gpu(), flux_api=partial_flux()),
         Phase.FLUX_INCOMPATIBLE, (), state="Error", reason="FluxIncompatible"),
    Case(OwnFlux.FLUX_TO_PROVIDE, lambda w: w.inputs(gpu(), flux_api=no_flux()),
         OwnFluxPhase.PROVIDING_FLUX,
         tuple(f"apply {o['kind']}/{o['metadata']['name']}" for o in FluxBundle().objects()),
         check=_providing),
    Case(OwnFlux.FLUX_TO_PROVIDE,
         lambda w: w.inputs(gpu(), flux_api=own_flux(True, current=False)),
         OwnFluxPhase.PROVIDING_FLUX,
         tuple(f"apply {o['kind']}/{o['metadata']['name']}" for o in FluxBundle().objects()),
         check=_providing),
    Case(S.FLUX_NOT_SERVED,
         lambda w: w.inputs(gpu(), flux_api=own_flux(False)),
         Phase.PROGRESSING, (), state="Processing"),
    Case(S.OBJECTS_DIFFER, lambda w: w.inputs(gpu()),
         Phase.APPLYING, ("apply HelmRepository/gpu-operator", "apply HelmRelease/gpu-operator"),
         check=_applying),
    Case(S.OBJECTS_DIFFER, _failed_lately,  # ... and its last attempt failed
         Phase.FAILED, (), state="Error", reason="Error", check=_failed_lately_check),
    Case(S.FOREIGN_FIELDS,
         lambda w: w.inputs(gpu(), **live(w.plan(gpu()), written=True), **ready_components()),
         Phase.APPLYING, ("remove HelmRelease/gpu-operator spec.values.validator.image (intruder)",
                          "remove HelmRelease/gpu-operator spec.valuesFrom (intruder)")),
    Case(S.IN_SYNC, lambda w: _applied(w, ready=False),
         Phase.FAILED, (), state="Error", reason="Error"),
    Case(S.IN_SYNC, lambda w: _applied(w, components=False),
         Phase.PROGRESSING, (), state="Processing"),
    Case(S.IN_SYNC, _applied, Phase.READY, (), state="Ready", reason="Ready"),
    Case(Marks.NODES_TO_MARK, lambda w: _sick(w, "MarkNodes"), MarksPhase.MARKING_NODES,
         ("mark gpu-1 unhealthy=True cordon=None",), check=_marks_then_status),
    Case(Marks.MARKS_LEFT, _marked_and_deleting, MarksPhase.MARKING_NODES,
         ("mark gpu-1 unhealthy=False cordon=None", "watch pods")),
]  # fmt: skip


def test_every_situation_has_a_case_and_a_row() -> None:
    situations = {*Situation, *(s for e in EXTENSIONS for s in e.rows)}
    assert set(MACHINE.rows) == situations
    assert {c.situation for c in CASES} == situations


CORE = Machine()
"""The core alone: what is left when every extension is removed."""


@pytest.mark.parametrize("case", [c for c in CASES if isinstance(c.situation, Situation)],
                         ids=lambda c: c.situation.value)  # fmt: skip
def test_the_core_alone_decides_the_cards_situations(world: World, case: Case) -> None:
    """`Machine()` has the core's rows only, and sees the core's cases as the whole machine
    does, with the same step but for the pods the extensions watch and their parts of the
    status (its state and Ready are the same)."""
    assert set(CORE.rows) == set(Situation)
    inputs = dataclasses.replace(case.inputs(world), failure=None)
    assert CORE.classify(inputs).situation is case.situation
    alone, whole = CORE.decide(inputs), decide(inputs)
    assert _core_of(alone) == _core_of(dataclasses.replace(whole, watches=frozenset()))


def _core_of(step: Step) -> tuple[Step, object, object]:
    """The step without its status, and the status's state and Ready condition."""
    status = step.status
    ready = status and next(c for c in status.conditions if c.type == "Ready")
    bare = dataclasses.replace(step, status=None, status_if_failed=None)
    return bare, status and status.state, ready


@pytest.mark.parametrize("case", [c for c in CASES if not isinstance(c.situation, Situation)],
                         ids=lambda c: c.situation.value)  # fmt: skip
def test_the_core_alone_sees_a_situation_of_its_own_for_an_extensions(
    world: World, case: Case
) -> None:
    assert isinstance(CORE.classify(case.inputs(world)).situation, Situation)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.situation.value}-{i}" for i, c in
                                             enumerate(CASES)])  # fmt: skip
def test_classify_sees_the_cases_situation_and_its_row_makes_the_step(
    world: World, case: Case
) -> None:
    inputs = case.inputs(world)
    assert classify(inputs).situation is case.situation
    row = MACHINE.rows[case.situation]
    step = decide(dataclasses.replace(inputs, failure=None))
    assert step.phase in (row.phase if isinstance(row.phase, tuple) else (row.phase,))
    assert step.requests is row.retried  # a step that asks the API is retried after a failure


@pytest.mark.parametrize("case", [c for c in CASES if MACHINE.rows[c.situation].retried],
                         ids=lambda c: c.situation.value)  # fmt: skip
def test_a_failed_write_holds_its_row_back_until_the_retry(world: World, case: Case) -> None:
    """Every row that writes, deletion's included (a failed Delete is Failed until its retry):
    the failure of its key, not yet due -> Failed with a requeue; due -> the step again."""
    inputs = dataclasses.replace(case.inputs(world), failure=None)
    step = decide(inputs)
    held = Failure(step.key, "403 Forbidden", permanent=True, attempts=1, retry_at=130.0)
    failed = decide(dataclasses.replace(inputs, failure=held))
    assert failed.phase is Phase.FAILED
    assert failed.action is None
    assert failed.requeue_after == pytest.approx(30.0)
    assert failed.watches == step.watches
    due = dataclasses.replace(held, retry_at=inputs.clock)
    again = decide(dataclasses.replace(inputs, failure=due))
    assert dataclasses.replace(again, status_if_failed=None) == dataclasses.replace(
        step, status_if_failed=None
    )  # the same writes; what they show if they fail again now knows the failure


@pytest.mark.parametrize("case", CASES, ids=[f"{c.phase.value}: {c.situation.value}"
                                             for c in CASES])  # fmt: skip
def test_decide(world: World, case: Case) -> None:
    step = decide(case.inputs(world))
    assert step.phase is case.phase
    assert actions(step) == case.actions
    assert (step.status.state.value if step.status else None) == case.state
    if case.reason is not None:
        assert ready_reason(step) == case.reason
    assert step.writes == any(a not in ("watch pods", "list Flux objects") for a in case.actions)
    case.check(world, step)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.phase.value}: {c.situation.value}"
                                             for c in CASES])  # fmt: skip
def test_decide_is_pure(world: World, case: Case) -> None:
    """The same inputs give the same step: nothing in `decide` reads a clock."""
    inputs = case.inputs(world)
    assert decide(inputs) == decide(inputs)


_OPAQUE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    logging.Logger,
    str,
    bytes,
    int,
    float,
    complex,
    type(None),
)
"""Not entered: code, modules, loggers (process-wide by design) and atoms."""


def _roots(name: str, module: types.ModuleType, caches: dict[str, object]) -> list[object]:
    """What a module holds: its globals, its classes' attributes, its functions' defaults and
    closures; `caches` gets each functools cache's statistics."""
    roots: list[object] = []
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == name:
            roots += vars(value).values()
        elif callable(value) and getattr(value, "__module__", None) == name:
            roots += [getattr(value, "__defaults__", None), getattr(value, "__kwdefaults__", None)]
            cells = getattr(value, "__closure__", None) or ()
            roots += [c.cell_contents for c in cells if c.cell_contents is not value]
            if hasattr(value, "cache_info"):
                caches[f"{name}.{value.__name__} cache"] = value.cache_info()
        elif not isinstance(value, _OPAQUE):
            roots.append(value)
    return roots


def _module_state() -> dict[str, object]:
    """What the modules of kyma_gpu hold: the ids of the objects each module reaches (`_roots`,
    without entering _OPAQUE objects or other modules' globals), and each functools cache's
    statistics. A memo anywhere in them changes it."""
    state: dict[str, object] = {}
    namespaces = {id(vars(m)) for m in list(sys.modules.values()) if m is not None}
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("kyma_gpu"):
            continue
        todo, visited = _roots(name, module, state), set()
        while todo:
            obj = todo.pop()
            if id(obj) in visited or isinstance(obj, _OPAQUE) or id(obj) in namespaces:
                continue
            if type(obj).__name__ != "_abc_data":  # isinstance caches of ABCs: Python's own
                visited.add(id(obj))
                todo += gc.get_referents(obj)
        state[name] = sorted(visited)
    return state


def test_nothing_in_decide_remembers(world: World) -> None:
    """Every case decided twice, in two orders, on equal but not identical inputs (Nodes made
    again from their bodies, the Gpu and the snapshot copied): the same steps, and no module
    of kyma_gpu holds anything it did not hold before. A memo in `decide` (a judged node, a
    status, a plan kept at module level, a functools cache hit) changes that state."""
    import copy

    warm = World(world.catalog, tuple(  # other Nodes: a memo must not have seen the inputs
        observed(node(f"warm-{i}", pool="warm"), world.catalog.machine_types) for i in range(3)
    ))  # fmt: skip
    for case in CASES:
        decide(case.inputs(warm))  # modules import lazily; only the first calls may load
    before = _module_state()
    fresh, again = (World(world.catalog, tuple(
        observed(copy.deepcopy(_BODIES[n.name]), world.catalog.machine_types)
        for n in world.nodes
    )) for _ in range(2))  # fmt: skip
    first = [decide(case.inputs(fresh)) for case in CASES]
    copies = [case.inputs(again) for case in reversed(CASES)]
    second = [decide(dataclasses.replace(i, gpu=copy.deepcopy(i.gpu), snap=copy.deepcopy(i.snap)))
              for i in copies]  # fmt: skip
    assert first == list(reversed(second))
    assert _module_state() == before


def test_a_failure_of_other_writes_does_not_hold_a_step_back(world: World) -> None:
    """A failure is matched to the writes by their key: a spec change is tried at once."""
    failure = Failure("another-key", "403 Forbidden", permanent=True, attempts=1, retry_at=1e9)
    step = decide(world.inputs(gpu(), failure))
    assert step.phase is Phase.APPLYING


def test_a_failure_whose_retry_is_due_lets_the_step_go(world: World) -> None:
    key = decide(world.inputs(gpu())).key
    failure = Failure(key, "429 Too Many Requests", permanent=False, attempts=1, retry_at=99.0)
    step = decide(world.inputs(gpu(), failure))
    assert step.phase is Phase.APPLYING
    assert step.status_if_failed is None  # one transient failure stays quiet


def test_the_machine_names_reasons_by_their_enums() -> None:
    """No reason is a literal string in machine.py: each comes from an enum (ReadyReason,
    EventReason), so that a typo cannot reach a status or an Event."""
    tree = ast.parse(Path(machine.__file__).read_text())
    literal = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = getattr(call.func, "id", getattr(call.func, "attr", ""))
        args = [k.value for k in call.keywords if k.arg == "reason"]
        if name in ("_error_status", "GpuEvent") and len(call.args) >= 2:
            args.append(call.args[1])
        literal += [ast.unparse(call) for a in args if isinstance(a, ast.Constant)]
    assert literal == []


@pytest.mark.parametrize(
    ("permanent", "attempts", "key", "clock", "wait", "loud"),
    [
        (False, 1, "k", 100.0, 30.0, False),  # a first transient failure: quiet, held back
        (False, 2, "k", 100.0, 30.0, False),
        (False, Failure.LOUD_AFTER, "k", 100.0, 30.0, True),  # the third: the status says so
        (True, 1, "k", 100.0, 30.0, True),  # a permanent one at once
        (True, 1, "k", 130.0, None, True),  # due: the writes go again
        (True, 1, "other", 100.0, None, False),  # other writes: neither held back nor loud
    ],
)
def test_the_retry_policy_of_a_failure(
    permanent: bool, attempts: int, key: str, clock: float, wait: float | None, loud: bool
) -> None:
    failure = Failure("k", "boom", permanent, attempts, retry_at=130.0)
    assert failure.wait(key, clock) == wait
    assert failure.loud(key) is loud
