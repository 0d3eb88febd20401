"""The reconcile loop under any sequence of changes: a Hypothesis state machine over the loop,
its real store and the in-memory API of tests/unit/test_loop.py.

The rules change the world the way users, Flux, the cluster and a flaky API server do: spec
edits (valid, invalid, blocked), Flux reporting on its objects and finishing an uninstall, GPU
nodes joining and leaving, injected write failures, retry times passing, the deletion of the
Gpu (with or without the skip annotation) and users' GPU pods. The module's own Flux is in play
too: some runs start on a cluster without Flux. After every pass, these hold:

- a pass ends within its step limit: each Gpu's last step had nothing left to write (or its
  write failed), it did not run into `LoopSettings.max_steps`;
- a second pass with nothing changed writes nothing (after a pass without failed writes), nor
  does the periodic safety pass (`Loop.reread`, then a pass);
- the finalizer never goes while the module's Flux objects remain, nor while the module's own
  Flux is still installed.

Deterministic (derandomize): the same 200 examples of up to 50 steps on every run, in CI too;
about 6 s on an idle machine. Each invariant was seen to fail on a broken loop, then
restored: Uninstalling only while a HelmRepository is left (the finalizer went with the
HelmRelease there), max_steps = 2 (the step limit), a status written even when it equals the
live one (the second pass wrote), and RemovingFlux skipped (the finalizer went while the
module's own Flux stayed).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kyma_gpu.extensions import NODE_FOLDS
from kyma_gpu.extensions.own_flux.bundle import MARKER_CRD, FluxBundle
from kyma_gpu.facts import observe_node
from kyma_gpu.facts.gpu import GpuObject
from kyma_gpu.observe.store import Entry, version_of
from kyma_gpu.observe.watches import CRDS, FLUX, NODES
from kyma_gpu.plan.provision import PROVIDED_LABEL
from kyma_gpu.reconcile.loop import Done
from kyma_gpu.reconcile.machine import FINALIZER, Step
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import node
from tests.unit.test_loop import World, new_world, run_pass

CATALOG = Catalog()
FLUX_KINDS = {k.kind: plural for plural, k in FLUX.items()}
SPECS = [
    {},
    {"components": {"migManager": True}},
    {"driver": {"version": "580"}},
    {"source": {"type": "OCI"}},
    {"driver": {"mode": "Foo"}},  # invalid: Invalid, nothing applied
    {"driver": {"installerRelease": "9.9.9"}},  # the plan has errors: Blocked
]
FAILURES = [409, 429, 500, 403, 422]


class LoopMachine(RuleBasedStateMachine):
    world: World
    steps: list[tuple[Step, Done]]
    had_finalizer: bool

    @initialize(without_flux=st.booleans())
    def start(self, without_flux: bool) -> None:
        self.world = new_world(CATALOG)
        self.steps = []
        self.had_finalizer = False
        self.nodes = 2
        if without_flux:  # the module installs its own
            self.world.store.replace(CRDS, {}, 1)
            for plural in FLUX:
                self.world.store.replace(plural, {}, None, absent=True)
        perform = self.world.loop.perform

        async def counted(gpu: GpuObject, step: Step) -> Done:
            done = await perform(gpu, step)
            self.steps.append((step, done))
            return done

        self.world.loop.perform = counted  # type: ignore[method-assign]

    # -- the loop --

    def _pass(self) -> list[str]:
        self.steps = []
        self.world.api.writes()
        asyncio.run(run_pass(self.world.loop))
        return self.world.api.writes()

    @rule()
    def reconcile(self) -> None:
        errors = self.world.loop.error_count
        self._pass()
        assert 0 < len(self.steps) <= self.world.loop.settings.max_steps
        last, done = self.steps[-1]
        assert not done.decide_again, f"ran into the step limit at {last.phase}"
        assert all(d.decide_again for _, d in self.steps[:-1])
        if self.world.loop.error_count == errors:
            assert self._pass() == [], "a second pass with nothing changed wrote"
            asyncio.run(self.world.loop.reread())
            assert self._pass() == [], "the safety pass wrote with nothing changed"

    # -- the world changes --

    @property
    def deleting(self) -> bool:
        return bool(self.world.api.gpu["metadata"].get("deletionTimestamp"))

    @rule(spec=st.sampled_from(SPECS))
    def edit_the_spec(self, spec: dict[str, Any]) -> None:
        self.world.change_spec(spec)

    @rule(kind=st.sampled_from(["HelmRelease", "HelmRepository", "OCIRepository"]),
          ready=st.booleans())  # fmt: skip
    def flux_reports(self, kind: str, ready: bool) -> None:
        if any(k == kind for k, _ in self.world.api.objects):
            extra = {"history": [{"status": "deployed", "chartVersion": "v26.7.0"}]}
            self.world.flux_says(kind, ready, **(extra if ready and kind == "HelmRelease" else {}))

    @rule(kind=st.sampled_from(sorted(FLUX_KINDS)))
    def flux_finishes_a_deletion(self, kind: str) -> None:
        """helm-controller or source-controller drops its finalizer: the object goes."""
        for key, obj in list(self.world.api.objects.items()):
            if key[0] == kind and obj["metadata"].get("deletionTimestamp"):
                del self.world.api.objects[key]
                self.world.store.put(FLUX_KINDS[key[0]], key[1], None)

    @rule()
    def the_modules_flux_serves(self) -> None:
        """The bundle's CRDs are established: the Flux informers list their kinds."""
        marker = self.world.store.get(CRDS, MARKER_CRD)
        if marker is not None and not marker.deleting:
            for plural in FLUX:
                if self.world.store.collection(plural).absent:
                    self.world.store.replace(plural, {}, version_of(self.world.api.next_version()))

    @rule(joins=st.booleans())
    def a_gpu_node_joins_or_leaves(self, joins: bool) -> None:
        if joins:
            self.nodes += 1
            body = node(f"gpu-{self.nodes}")
            facts = observe_node(body, CATALOG.machine_types, NODE_FOLDS)
            self.world.store.put(NODES, facts.name, Entry(None, facts))
        elif self.nodes > 0:
            self.world.store.put(NODES, f"gpu-{self.nodes}", None)
            self.nodes -= 1

    @rule(status=st.sampled_from(FAILURES))
    def the_next_write_fails(self, status: int) -> None:
        self.world.api.fail.append(status)

    @rule()
    def retries_are_due(self) -> None:
        for name, failure in self.world.loop.retries.failures.items():
            self.world.loop.retries.failures[name] = dataclasses.replace(failure, retry_at=0.0)

    @precondition(lambda self: self.had_finalizer and not self.deleting)
    @rule(skip=st.booleans())
    def the_gpu_is_deleted(self, skip: bool) -> None:
        annotations = {"gpu.kyma-project.io/skip-workload-protection": "true"} if skip else {}
        self.world.edit(deletionTimestamp="2026-12-01T10:00:00Z", annotations=annotations)

    @precondition(lambda self: self.deleting)
    @rule(pod=st.sampled_from(["ml/train", "ml/infer"]))
    def a_users_gpu_pod_runs(self, pod: str) -> None:
        """Listed by the extensions' list-watches on demand (workload protection's, which the
        loop starts during a deletion): none without the extension."""
        for resource in self.world.loop.on_demand:
            pods = {p: Entry(None, p) for p in [*self.world.store.facts(resource), pod]}
            self.world.store.replace(resource, pods, None)

    @precondition(lambda self: self.deleting)
    @rule()
    def the_users_gpu_pods_end(self) -> None:
        self.world.nothing_on_demand()

    # -- what must always hold --

    @invariant()
    def the_finalizer_stays_while_flux_objects_remain(self) -> None:
        finalizers = self.world.api.gpu["metadata"].get("finalizers") or []
        if FINALIZER in finalizers:
            self.had_finalizer = True
            return
        if not self.had_finalizer:
            return
        assert self.deleting, "the finalizer went from a Gpu that is not being deleted"
        flux = [k for k in self.world.api.objects if k[0] in FLUX_KINDS]
        assert flux == [], f"the finalizer went while {flux} remain"
        for name in FluxBundle().crds():
            crd = self.world.api.objects.get(("CustomResourceDefinition", name))
            if crd is not None:
                meta = crd["metadata"]
                assert meta.get("deletionTimestamp") or PROVIDED_LABEL not in (
                    meta.get("labels") or {}
                ), f"the finalizer went while the module's own Flux ({name}) stays"


LoopMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_the_loop_under_any_sequence_of_changes = LoopMachine.TestCase
