"""The reconcile loop with a real store and an in-memory API: phases, writes, retries."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import pytest

from kyma_gpu.extensions import NODE_FOLDS
from kyma_gpu.facts import observe_node
from kyma_gpu.facts.gpu import GpuObject, gpu_object
from kyma_gpu.observe.store import Entry, Store, version_of
from kyma_gpu.observe.watches import CRDS, DAEMONSETS, FLUX, NODES, flux_facts
from kyma_gpu.plan import AllowedSources
from kyma_gpu.plan.provision import REQUIRED_APIS, CrdFacts
from kyma_gpu.reconcile.loop import GPUS, Loop
from kyma_gpu.reconcile.machine import FINALIZER, Phase, Step
from kyma_gpu.reconcile.settings import LoopSettings
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status import OperatorStateFacts, daemonset_facts
from kyma_gpu.status.deletion import UNINSTALL_GRACE_SECONDS, go_duration_seconds
from tests.unit.builders import allowing, cpu_node, node
from tests.unit.fake_api import FakeApi


async def run_pass(loop: Loop) -> float | None:
    """One pass of every Gpu (`Loop.pass_for`), as their kopf daemons make them. Returns the
    seconds until the first retry is due."""
    requeues = [
        (await loop.pass_for(name))[0] for name in list(loop.store.collection(GPUS).entries)
    ]
    return min((r for r in requeues if r is not None), default=None)


@dataclasses.dataclass
class World:
    loop: Loop
    api: FakeApi
    store: Store
    wanted: list[frozenset[str]]
    """The extensions' list-watches on demand each pass wanted (`Loop.observe`)."""
    phases: dict[str, StrEnum] = dataclasses.field(default_factory=dict)
    """The phase each Gpu's last reconcile ended in (recorded around Loop.reconcile)."""

    def sync_gpu(self) -> None:
        obj = gpu_object(self.api.gpu)
        self.store.put(GPUS, obj.name, Entry(version_of(obj.resource_version), obj))

    def edit(self, **meta: Any) -> None:
        """A user edit: the API bumps resourceVersion (and generation on spec changes)."""
        self.api.gpu["metadata"].update(meta)
        self.api.gpu["metadata"]["resourceVersion"] = self.api.next_version()
        self.sync_gpu()

    def change_spec(self, spec: dict[str, Any]) -> None:
        self.api.gpu["spec"] = spec
        self.edit(generation=self.api.gpu["metadata"]["generation"] + 1)

    def nothing_on_demand(self) -> None:
        """The extensions' list-watches on demand listed, and empty (no users' GPU pods)."""
        for resource in self.loop.on_demand:
            self.store.replace(resource, {}, None)

    def run(self) -> StrEnum:
        self.api.writes()
        asyncio.run(run_pass(self.loop))
        return self.last_phase

    @property
    def last_phase(self) -> StrEnum:
        return next(iter(self.phases.values()))

    def flux_says(self, kind: str, ready: bool = True, **status: Any) -> None:
        """helm-controller/source-controller reconciled the object (its status changes)."""
        obj = next(o for (k, _), o in self.api.objects.items() if k == kind)
        meta = obj["metadata"]
        obj["status"] = {
            "observedGeneration": meta["generation"],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "Succeeded" if ready else "Failed", "message": "m",
                            "observedGeneration": meta["generation"]}],
            **status,
        }  # fmt: skip
        meta["resourceVersion"] = self.api.next_version()
        plural = next(p for p, k in FLUX.items() if k.kind == kind)
        entry = Entry(version_of(meta["resourceVersion"]), flux_facts(plural, obj))
        self.store.put(plural, meta["name"], entry)


def new_world(
    catalog: Catalog, name: str = "gpu", spec: Mapping[str, Any] | None = None,
    settings: LoopSettings | None = None,
) -> World:  # fmt: skip
    store = Store()
    registry = catalog.machine_types
    bodies = [node("gpu-1"), node("gpu-2"), cpu_node("cpu-1")]
    nodes = {b["metadata"]["name"]: Entry(1, observe_node(b, registry, NODE_FOLDS)) for b in bodies}
    store.replace(NODES, nodes, 1)
    for resource in (DAEMONSETS, *FLUX):
        store.replace(resource, {}, 1)
    crds = {name: Entry(1, CrdFacts(uid=name)) for name in REQUIRED_APIS}  # the cluster's Flux
    store.replace(CRDS, crds, 1)
    api = FakeApi()
    meta = {"name": name, "uid": "uid-1", "generation": 1, "resourceVersion": api.next_version(),
            "finalizers": [FINALIZER]}  # kopf's, added before its daemon runs  # fmt: skip
    api.gpu = {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu", "metadata": meta,
               "spec": dict(spec or {})}  # fmt: skip
    wanted: list[frozenset[str]] = []
    loop = Loop(store, api, catalog, observe=wanted.append,
                settings=settings or LoopSettings(status_seconds=0.0))  # fmt: skip
    world = World(loop, api, store, wanted)
    reconcile = loop.reconcile

    async def recorded(gpu: GpuObject) -> Step:
        step = await reconcile(gpu)
        world.phases[gpu.name] = step.phase
        return step

    loop.reconcile = recorded  # type: ignore[method-assign]
    world.sync_gpu()
    return world


@pytest.fixture
def world(catalog: Catalog) -> World:
    return new_world(catalog)


def installed(world: World) -> World:
    world.run()
    world.flux_says("HelmRepository")
    world.flux_says("HelmRelease", history=[{"status": "deployed", "chartVersion": "v26.7.0"}])
    return world


def test_first_pass_adds_the_finalizer_then_applies_then_writes_status(world: World) -> None:
    assert world.run() is Phase.PROGRESSING
    assert world.api.gpu["metadata"]["finalizers"] == [FINALIZER]
    kinds = sorted(k for k, _ in world.api.objects)
    assert kinds == ["HelmRelease", "HelmRepository"]
    assert world.api.gpu["status"]["state"] == "Processing"


def test_first_pass_writes_in_order(world: World) -> None:
    asyncio.run(run_pass(world.loop))
    assert world.api.writes() == ["apply HelmRepository", "apply HelmRelease", "status"]


def test_nothing_is_applied_before_kopfs_finalizer(catalog: Catalog) -> None:
    """kopf adds the finalizer when it first sees the Gpu; its daemon may run a pass before
    that answer is in: it writes nothing yet, and the answer wakes it."""
    world = new_world(catalog)
    world.edit(finalizers=[])
    assert world.run() is Phase.INITIALIZING
    assert world.api.calls == []
    world.edit(finalizers=[FINALIZER])
    assert world.run() is Phase.PROGRESSING
    assert world.api.writes() == ["apply HelmRepository", "apply HelmRelease", "status"]


def test_nothing_changed_means_no_write(world: World) -> None:
    world.run()
    assert world.run() is Phase.PROGRESSING
    assert world.api.calls == []


def test_a_spec_change_is_one_release_write_and_one_status_write(world: World) -> None:
    installed(world)
    world.run()
    world.change_spec({"components": {"migManager": True}})
    world.run()
    assert world.api.calls == ["apply HelmRelease", "status"]


def test_ready_when_flux_and_components_are(world: World) -> None:
    installed(world)
    facts = daemonset_facts({
        "metadata": {"name": "nvidia-driver-daemonset-x", "generation": 1,
                     "labels": {"app.kubernetes.io/component": "nvidia-driver"}},
        "spec": {"updateStrategy": {"type": "OnDelete"}},
        "status": {"desiredNumberScheduled": 2, "numberAvailable": 2, "updatedNumberScheduled": 2,
                   "observedGeneration": 1},
    })  # fmt: skip
    world.store.put(DAEMONSETS, facts.name, Entry(5, facts))
    policy = Entry(5, OperatorStateFacts("ready"))
    world.store.replace("clusterpolicies", {"cluster-policy": policy}, 5)
    assert world.run() is Phase.READY
    assert world.api.gpu["status"]["state"] == "Ready"


def test_a_transient_failure_is_retried_quietly(world: World) -> None:
    world.run()
    world.change_spec({"components": {"migManager": True}})
    world.api.fail = [429]
    world.api.writes()
    requeue = asyncio.run(run_pass(world.loop))
    assert world.last_phase is Phase.FAILED
    assert requeue is not None
    assert 0 < requeue <= 1.5
    assert world.api.writes() == ["apply HelmRelease"]  # no status for one throttled write
    failure = world.loop.retries.failures["gpu"]
    world.loop.retries.failures["gpu"] = dataclasses.replace(failure, retry_at=0.0)
    asyncio.run(run_pass(world.loop))
    assert world.api.writes() == ["apply HelmRelease", "status"]
    assert "gpu" not in world.loop.retries.failures


def test_a_permanent_failure_shows_in_status_and_waits(world: World) -> None:
    world.run()
    world.change_spec({"components": {"migManager": True}})
    world.api.fail = [403]
    requeue = asyncio.run(run_pass(world.loop))
    assert world.last_phase is Phase.FAILED
    assert requeue is not None
    assert requeue > 20
    status = world.api.gpu["status"]
    assert status["state"] == "Error"
    release = next(c for c in status["conditions"] if c["type"] == "ReleaseReady")
    assert release["reason"] == "ApplyFailed"
    assert "403" in release["message"]
    world.run()
    assert world.api.calls == []  # nothing again until the retry is due


def test_a_finished_deletion_removes_the_finalizer_and_ends_the_daemon(world: World) -> None:
    """Nothing of the module's left: the daemon removes kopf's finalizer and ends."""
    installed(world)
    for plural in FLUX:
        world.store.replace(plural, {}, version_of(world.api.next_version()))
    world.edit(deletionTimestamp="2026-11-30T10:00:00Z")
    world.nothing_on_demand()  # no users' GPU pods
    world.api.writes()
    _, released = asyncio.run(world.loop.pass_for("gpu"))
    assert world.last_phase is Phase.RELEASED
    assert released
    assert world.api.calls == ["finalizers"]
    assert world.api.gpu["metadata"]["finalizers"] == []


def test_a_gpu_deleted_before_the_finalizer_write_answers_is_not_written_again(
    world: World,
) -> None:
    """The API server deletes the Gpu when its last finalizer goes; kopf's DELETED event can
    reach the store before the PATCH's answer, which the store then refuses (older than the
    deletion). The pass ends there, and the daemon with it: no second finalizer write on a
    Gpu that is gone (404)."""
    installed(world)
    for plural in FLUX:
        world.store.replace(plural, {}, version_of(world.api.next_version()))
    world.edit(deletionTimestamp="2026-11-30T10:00:00Z")
    world.nothing_on_demand()  # no users' GPU pods
    set_finalizers = world.api.set_finalizers

    async def deleted_meanwhile(name: str, finalizers: list[str], rv: str) -> dict[str, Any]:
        answer = await set_finalizers(name, finalizers, rv)
        world.store.put(GPUS, name, None, version_of(world.api.next_version()))
        return answer

    world.api.set_finalizers = deleted_meanwhile  # type: ignore[method-assign,assignment]
    world.api.writes()
    assert asyncio.run(world.loop.pass_for("gpu"))[1]
    assert world.api.calls == ["finalizers"]
    assert world.loop.retries.last("gpu") is None


def _condition(world: World, type_: str) -> dict[str, Any]:
    return next(c for c in world.api.gpu["status"]["conditions"] if c["type"] == type_)


def test_an_uninstall_past_its_timeout_turns_error_with_the_next_step(world: World) -> None:
    installed(world)
    world.edit(deletionTimestamp="2026-11-30T10:00:00Z")
    world.nothing_on_demand()
    assert world.run() is Phase.UNINSTALLING
    assert world.api.gpu["status"]["state"] == "Deleting"
    requeue = asyncio.run(run_pass(world.loop))  # look again when the bound passes
    release = next(o for (k, _), o in world.api.objects.items() if k == "HelmRelease")
    bound = go_duration_seconds(release["spec"]["uninstall"]["timeout"])
    assert bound is not None
    assert requeue is not None
    assert bound + UNINSTALL_GRACE_SECONDS - 5 < requeue <= bound + UNINSTALL_GRACE_SECONDS
    # helm-controller never removes its finalizer: the objects stay, deleting, for years.
    plural = {k.kind: p for p, k in FLUX.items()}
    for (kind, name), obj in world.api.objects.items():
        obj["metadata"]["deletionTimestamp"] = "2000-01-01T00:00:00Z"
        facts = flux_facts(plural[kind], obj)
        world.store.put(plural[kind], name, Entry(version_of(world.api.next_version()), facts))
    assert world.run() is Phase.UNINSTALLING
    stalled = _condition(world, "Uninstalled")
    assert stalled["reason"] == "UninstallStalled"
    assert "HelmRelease/kyma-system/gpu-operator" in stalled["message"]
    assert "remove the finalizers" in stalled["message"]
    assert world.api.gpu["status"]["state"] == "Error"
    assert world.api.calls == ["status"]  # nothing deleted twice


def test_other_names_are_refused_once(catalog: Catalog) -> None:
    world = new_world(catalog, name="other")
    assert world.run() is Phase.REFUSED
    assert world.api.gpu["status"]["conditions"][0]["reason"] == "NotTheSingleton"
    assert world.api.calls == ["status"]
    world.run()
    assert world.api.calls == []
    world.edit(deletionTimestamp="2026-11-30T10:00:00Z")
    assert asyncio.run(world.loop.pass_for("other"))[1]  # its deletion ends its daemon


def test_an_invalid_spec_is_reported(catalog: Catalog) -> None:
    world = new_world(catalog, spec={"driver": {"mode": "Foo"}})
    assert world.run() is Phase.INVALID
    assert world.api.gpu["status"]["conditions"][0]["reason"] == "InvalidSpec"


def test_status_writes_are_coalesced_while_only_messages_change(world: World) -> None:
    world.loop.status.settings = LoopSettings(status_seconds=30.0)
    installed(world)
    world.run()  # ReleaseReady turned True: a transition, written at once
    assert world.api.calls == ["status"]
    facts = daemonset_facts({
        "metadata": {"name": "nvidia-device-plugin-daemonset", "generation": 1},
        "status": {"desiredNumberScheduled": 2, "numberAvailable": 1, "observedGeneration": 1},
    })  # fmt: skip
    world.store.put(DAEMONSETS, facts.name, Entry(5, facts))
    world.run()  # ComponentsNotReady -> ComponentsNotReady with new counts: within the interval
    world.store.put(DAEMONSETS, facts.name, Entry(6, dataclasses.replace(facts, available=0)))
    world.run()
    assert world.api.calls == []
    requeue = asyncio.run(run_pass(world.loop))
    assert requeue is not None
    assert 25 < requeue <= 30
    world.loop.status.written.clear()  # the interval is over
    world.run()
    assert world.api.calls == ["status"]


def test_a_change_of_state_is_written_at_once(world: World) -> None:
    world.loop.status.settings = LoopSettings(status_seconds=30.0)
    world.run()
    world.api.fail = [403]
    world.change_spec({"components": {"migManager": True}})
    world.run()
    assert world.api.calls == ["apply HelmRelease", "status"]  # Processing -> Error


def test_a_flux_too_old_is_an_error_and_nothing_is_written(world: World) -> None:
    world.edit(finalizers=[FINALIZER])
    world.store.mark_unserved("helmreleases")  # the CRD exists, v2 answers 404
    assert world.run() is Phase.FLUX_INCOMPATIBLE
    assert world.api.calls == ["status"]
    ready = _condition(world, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "FluxIncompatible")
    assert "helm.toolkit.fluxcd.io/v2" in ready["message"]
    assert world.api.gpu["status"]["state"] == "Error"


def test_a_field_the_server_drops_is_not_applied_again(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """An older Flux's CRD has no spec.healthCheckExprs: the API server drops it. The answer is
    the live object; applying it again would change nothing, so the module does not."""
    world.api.drop = ("healthCheckExprs",)
    installed(world)
    assert "healthCheckExprs" not in world.api.objects[("HelmRelease", "gpu-operator")]["spec"]
    assert "spec.healthCheckExprs of HelmRelease kyma-system/gpu-operator" in caplog.text
    for _ in range(3):
        world.run()
        assert not [w for w in world.api.writes() if w.startswith("apply")]
    world.change_spec({"driver": {"version": "580"}})
    world.run()
    assert world.api.writes().count("apply HelmRelease") == 1
    world.run()
    assert not [w for w in world.api.writes() if w.startswith("apply")]


def _unplannable(*_: Any) -> Any:
    raise RecursionError("maximum recursion depth exceeded while serializing")


def test_a_spec_that_cannot_be_planned_is_an_error_in_status(world: World) -> None:
    """Not a pass that fails in silence every time (issue 20: deep spec.values once did)."""
    world.loop.plan = _unplannable
    assert world.run() is Phase.INVALID
    ready = world.api.gpu["status"]["conditions"][0]
    assert ready["reason"] == "PlanFailed"
    assert "RecursionError" in ready["message"]
    assert world.api.gpu["status"]["state"] == "Error"
    assert world.loop.error_count == 0
    world.run()
    assert world.api.calls == []  # the same status is not written again


def test_a_spec_that_cannot_be_planned_can_still_be_deleted(world: World) -> None:
    installed(world)
    world.loop.plan = _unplannable
    world.edit(deletionTimestamp="2026-01-01T00:00:00Z",
               annotations={"gpu.kyma-project.io/skip-workload-protection": "true"})  # fmt: skip
    assert world.run() is Phase.UNINSTALLING
    assert "delete HelmRelease" in world.api.calls


def test_a_changed_list_of_chart_sources_plans_again(catalog: Catalog) -> None:
    """The plan cache is keyed by the allowed sources too: a mirror refused before the
    administrator lists it is applied once it is listed, without a change to the Gpu."""
    mirror = "https://charts.mirror.example/nvidia"
    world = new_world(catalog, spec={"source": {"chartRepository": mirror}})
    allowed_sources = [AllowedSources()]
    world.loop.allowed_sources = lambda: allowed_sources[-1]
    assert world.run() is Phase.BLOCKED
    assert world.api.objects == {}
    allowed_sources.append(allowing({"kind": "HelmRepository", "url": mirror}))
    world.run()
    kinds = sorted(k for k, _ in world.api.objects)
    assert kinds == ["HelmRelease", "HelmRepository"]
