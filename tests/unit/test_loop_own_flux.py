"""The module's own Flux (extensions/own_flux/) through the loop: installed where there is no
Flux, its objects sharded for it; removed (or its CRDs handed over) on deletion, the machine
deciding from the listed Flux objects (ListFlux, then RemoveFlux); a failed removal waits for
its retry like any write. Removing the extension removes this file."""

from __future__ import annotations

import asyncio
import dataclasses

from kyma_gpu.extensions.own_flux.bundle import SHARD, SHARD_LABEL
from kyma_gpu.extensions.own_flux.machine import OwnFluxConfig
from kyma_gpu.extensions.own_flux.machine import Phase as OwnFlux
from kyma_gpu.observe.store import Entry, version_of
from kyma_gpu.observe.watches import CRDS, FLUX
from kyma_gpu.plan.provision import PROVIDED_LABEL, REQUIRED_APIS, CrdFacts
from kyma_gpu.reconcile.machine import FINALIZER, Phase
from kyma_gpu.reconcile.settings import LoopSettings
from kyma_gpu.rules.catalog import Catalog
from tests.unit.test_loop import World, _condition, new_world, run_pass
from tests.unit.test_loop_resync import _until, running


def _no_flux(world: World) -> None:
    """A cluster without Flux: no Flux CRDs, and the Flux informers found their kinds absent."""
    world.store.replace(CRDS, {}, 1)
    for plural in FLUX:
        world.store.replace(plural, {}, None, absent=True)


def _flux_crds_served(world: World) -> None:
    """The CRD informer saw the CRDs the module applied; the Flux informers listed."""
    for plural in FLUX:
        world.store.replace(plural, {}, version_of(world.api.next_version()))


def test_without_flux_the_module_installs_its_own_then_its_objects(catalog: Catalog) -> None:
    world = new_world(catalog)
    _no_flux(world)
    world.edit(finalizers=[FINALIZER])
    assert world.run() is Phase.PROGRESSING  # bundle applied; waits for its CRDs to be served
    kinds = [call.removeprefix("apply ") for call in world.api.calls[:-1]]
    assert kinds.count("CustomResourceDefinition") == 7
    assert {"CustomResourceDefinition", "Deployment"} == set(kinds)  # the rest: flux/access
    assert world.api.calls[-2:] == ["apply CustomResourceDefinition", "status"]  # marker last
    flux = _condition(world, "FluxAvailable")
    assert (flux["status"], flux["reason"]) == ("Unknown", "InstallingFlux")
    assert world.run() is Phase.PROGRESSING
    assert world.api.calls == []  # the bundle is current: never applied twice
    _flux_crds_served(world)
    assert world.run() is Phase.PROGRESSING
    assert world.api.calls == ["apply HelmRepository", "apply HelmRelease", "status"]
    release = world.api.objects[("HelmRelease", "gpu-operator")]
    assert release["metadata"]["labels"][SHARD_LABEL] == SHARD
    assert release["spec"]["chart"]["metadata"]["labels"][SHARD_LABEL] == SHARD
    source = world.api.objects[("HelmRepository", "gpu-operator")]
    assert source["metadata"]["labels"][SHARD_LABEL] == SHARD
    flux = _condition(world, "FluxAvailable")
    assert (flux["status"], flux["reason"]) == ("True", "ModuleFlux")


def test_a_failed_bundle_apply_is_retried_at_once_when_flux_appears(catalog: Catalog) -> None:
    world = new_world(catalog)
    _no_flux(world)
    world.edit(finalizers=[FINALIZER])
    world.api.fail = [403]  # the first apply of the bundle
    assert world.run() is Phase.FAILED
    assert world.run() is Phase.FAILED
    assert world.api.calls == []  # waits for its retry time
    _flux_crds_served(world)  # Flux appeared meanwhile (someone installed it)
    for name in REQUIRED_APIS:
        world.store.put(CRDS, name, Entry(None, CrdFacts(uid=name)))
    assert world.run() is Phase.PROGRESSING  # the cluster's Flux: used, not written
    assert world.api.calls == ["apply HelmRepository", "apply HelmRelease", "status"]
    release = world.api.objects[("HelmRelease", "gpu-operator")]
    assert SHARD_LABEL not in release["metadata"]["labels"]
    assert _condition(world, "FluxAvailable")["reason"] == "ClusterFlux"


def _provided_and_installed(catalog: Catalog, settings: LoopSettings | None = None) -> World:
    world = new_world(catalog, settings=settings)
    _no_flux(world)
    world.edit(finalizers=[FINALIZER])
    world.run()
    _flux_crds_served(world)
    world.run()
    world.flux_says("HelmRepository")
    world.flux_says("HelmRelease", history=[{"status": "deployed", "chartVersion": "v26.7.0"}])
    world.nothing_on_demand()
    world.edit(deletionTimestamp="2026-11-30T10:00:00Z")
    assert world.run() is Phase.UNINSTALLING
    for plural in FLUX:
        world.store.replace(plural, {}, version_of(world.api.next_version()))
    for key in [k for k in world.api.objects if k[0] in ("HelmRelease", "HelmRepository")]:
        del world.api.objects[key]  # Flux finished the uninstall
    return world


def test_removing_the_module_removes_its_own_flux_and_crds_nobody_uses(catalog: Catalog) -> None:
    world = _provided_and_installed(catalog)
    assert world.run() is Phase.RELEASED
    calls = world.api.calls
    assert calls.count("delete CustomResourceDefinition") == 7
    assert "delete Deployment" in calls
    assert not {"delete Role", "delete ServiceAccount"} & set(calls)  # KLM's (flux/access)
    assert calls[-1] == "finalizers"
    assert not [e for e in world.api.events if e.reason == "FluxHandedOver"]


def test_removing_the_module_hands_over_crds_that_others_use(catalog: Catalog) -> None:
    world = _provided_and_installed(catalog)
    others = {"metadata": {"namespace": "team-a", "name": "app"}}
    world.api.others = [("HelmRelease", others)]
    assert world.run() is Phase.RELEASED
    calls = world.api.calls
    assert "delete CustomResourceDefinition" not in calls
    assert sum(c.startswith("unlabel CustomResourceDefinition") for c in calls) == 7
    assert "delete Deployment" in calls
    crd = world.api.objects[("CustomResourceDefinition", "helmreleases.helm.toolkit.fluxcd.io")]
    assert PROVIDED_LABEL not in crd["metadata"]["labels"]
    handed = [e.message for e in world.api.events if e.reason == "FluxHandedOver"]
    assert "HelmRelease team-a/app" in handed[0]


def test_a_retried_hand_over_writes_only_the_crds_still_labelled(catalog: Catalog) -> None:
    """An earlier try unlabelled three CRDs and failed: admission (kyma-gpu-manager) refuses
    any write to a Flux CRD without the module's label, so the retry leaves them alone."""
    world = _provided_and_installed(catalog)
    world.api.others = [("HelmRelease", {"metadata": {"namespace": "team-a", "name": "app"}})]
    crds = sorted(k for k in world.api.objects if k[0] == "CustomResourceDefinition")
    for key in crds[:3]:
        world.api.objects[key]["metadata"]["labels"].pop(PROVIDED_LABEL)
    assert world.run() is Phase.RELEASED
    unlabelled = [c for c in world.api.calls if c.startswith("unlabel CustomResourceDefinition")]
    assert len(unlabelled) == len(crds) - 3


def test_removal_waits_while_an_object_of_the_module_terminates(catalog: Catalog) -> None:
    world = _provided_and_installed(catalog)
    chart = {"metadata": {"namespace": "kyma-system", "name": "kyma-system-gpu-operator",
                          "deletionTimestamp": "2026-11-30T10:00:01Z"}}  # fmt: skip
    world.api.others = [("HelmChart", chart)]
    assert world.run() is OwnFlux.REMOVING_FLUX
    assert world.api.calls == []  # source-controller must finish it first


def test_a_failed_removal_waits_for_its_retry_and_counts_its_attempts(catalog: Catalog) -> None:
    world = _provided_and_installed(catalog)
    world.api.fail = [503]  # the first delete of a Flux controller's object
    assert world.run() is Phase.FAILED
    assert len(world.api.calls) == 1
    assert world.api.calls[0].startswith("delete ")
    assert world.loop.retries.failures["gpu"].attempts == 1
    assert world.run() is Phase.FAILED
    assert world.api.calls == []  # not before its retry time: the list waits too
    world.api.fail = [503]
    failure = world.loop.retries.failures["gpu"]
    world.loop.retries.failures["gpu"] = dataclasses.replace(failure, retry_at=0.0)
    assert world.run() is Phase.FAILED
    assert world.loop.retries.failures["gpu"].attempts == 2  # the list between did not reset it
    world.loop.retries.failures["gpu"] = dataclasses.replace(
        world.loop.retries.failures["gpu"], retry_at=0.0
    )
    assert world.run() is Phase.RELEASED
    assert world.api.calls[-1] == "finalizers"
    assert "gpu" not in world.loop.retries.failures


def test_a_removal_that_waits_lists_again_on_the_next_pass(catalog: Catalog) -> None:
    world = _provided_and_installed(catalog)
    chart = {"metadata": {"namespace": "kyma-system", "name": "kyma-system-gpu-operator",
                          "deletionTimestamp": "2026-11-30T10:00:01Z"}}  # fmt: skip
    world.api.others = [("HelmChart", chart)]
    assert world.run() is OwnFlux.REMOVING_FLUX
    assert world.api.calls == []
    world.api.others = []  # source-controller finished it
    asyncio.run(run_pass(world.loop))
    assert world.last_phase is Phase.RELEASED
    assert "delete CustomResourceDefinition" in world.api.calls


def test_removing_flux_looks_again_while_a_helmchart_terminates(catalog: Catalog) -> None:
    """The HelmChart of the module's release is not observed: nothing wakes the loop when
    source-controller finishes it. RemovingFlux lists again after `removal_wait_seconds`."""
    settings = LoopSettings(status_seconds=0.0, burst_seconds=0.0, freeze_heap=False)
    world = _provided_and_installed(catalog, settings)
    world.loop.config = tuple(dataclasses.replace(c, removal_wait_seconds=0.05)
                              if isinstance(c, OwnFluxConfig) else c
                              for c in world.loop.config)  # fmt: skip
    chart = {"metadata": {"namespace": "kyma-system", "name": "kyma-system-gpu-operator",
                          "deletionTimestamp": "2026-11-30T10:00:01Z"}}  # fmt: skip
    world.api.others = [("HelmChart", chart)]
    assert world.run() is OwnFlux.REMOVING_FLUX

    async def scenario() -> None:
        await asyncio.sleep(0.1)
        assert world.last_phase is OwnFlux.REMOVING_FLUX
        world.api.others = []  # source-controller finished it; no event says so
        await _until(lambda: world.last_phase is Phase.RELEASED)

    running(world, scenario)  # the loop ends by itself: its deletion is through
    assert FINALIZER not in world.api.gpu["metadata"]["finalizers"]
    assert "delete CustomResourceDefinition" in world.api.calls
