"""The loop's Events for findings and Flux failures, and the driver version it carries from one
status to the next, with a real store and an in-memory API (tests/unit/test_loop.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_gpu.observe.store import Entry, version_of
from kyma_gpu.observe.watches import DAEMONSETS, flux_facts
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status import OperatorStateFacts, daemonset_facts
from kyma_gpu.status.events import EventType
from tests.unit.test_loop import World, installed, new_world

DRIVER_IMAGE = "ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0/driver:{}-6.12.44-cloud"


@pytest.fixture
def world(catalog: Catalog) -> World:
    return installed(new_world(catalog))


def release_fails(world: World, reason: str, message: str) -> None:
    """helm-controller reports the HelmRelease not Ready, for a failure."""
    obj = next(o for (k, _), o in world.api.objects.items() if k == "HelmRelease")
    meta = obj["metadata"]
    obj["status"] = {
        "observedGeneration": meta["generation"],
        "conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": message,
                        "observedGeneration": meta["generation"]}],
    }  # fmt: skip
    meta["resourceVersion"] = world.api.next_version()
    entry = Entry(version_of(meta["resourceVersion"]), flux_facts("helmreleases", obj))
    world.store.put("helmreleases", meta["name"], entry)


def warnings(world: World) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in world.api.events if e.type is EventType.WARNING]


def test_a_flux_failure_is_one_event_even_when_it_flaps(world: World) -> None:
    world.run()
    release_fails(world, "InstallFailed", "timed out waiting for the condition")
    world.run()
    failed = "HelmRelease kyma-system/gpu-operator: timed out waiting for the condition"
    assert warnings(world) == [("InstallFailed", failed)]
    posted = len(world.api.events)
    world.run()
    assert len(world.api.events) == posted  # nothing new while nothing changes
    release_fails(world, "InstallFailed", "context deadline exceeded")
    world.run()
    release_fails(world, "InstallFailed", "timed out waiting for the condition")
    world.run()
    assert [r for r, _ in warnings(world)] == ["InstallFailed", "InstallFailed"]  # A, B, not A


def put_driver(world: World, generation: int, updated: int, version: str) -> None:
    facts = daemonset_facts({
        "metadata": {"name": "nvidia-driver-daemonset-x", "generation": generation,
                     "labels": {"app.kubernetes.io/component": "nvidia-driver"}},
        "spec": {"updateStrategy": {"type": "OnDelete"}, "template": {"spec": {"containers": [
            {"name": "nvidia-driver-ctr", "image": DRIVER_IMAGE.format(version)}]}}},
        "status": {"desiredNumberScheduled": 2, "numberAvailable": 2, "numberReady": 2,
                   "updatedNumberScheduled": updated, "observedGeneration": generation},
    })  # fmt: skip
    world.store.put(DAEMONSETS, facts.name, Entry(int(world.api.next_version()), facts))


def status(world: World) -> dict[str, Any]:
    return dict(world.api.gpu["status"])


def test_the_running_driver_version_survives_a_rollout(world: World) -> None:
    policy = {"cluster-policy": Entry(5, OperatorStateFacts("ready"))}
    world.store.replace("clusterpolicies", policy, 5)
    put_driver(world, 1, 2, "590")
    world.run()
    assert (status(world)["driverVersion"], status(world)["readyNodes"]) == ("590", "2/2")
    put_driver(world, 2, 0, "580")  # the new template reached no pod yet
    world.run()
    assert status(world)["driverVersion"] == "590"
    put_driver(world, 2, 1, "580")
    world.run()
    assert status(world)["driverVersion"] == "580, 590"
    put_driver(world, 2, 2, "580")
    world.run()
    assert status(world)["driverVersion"] == "580"
