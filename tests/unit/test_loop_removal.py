"""Removing the module's own Flux through the loop: the machine decides from the listed Flux
objects (ListFlux, then RemoveFlux); a failed removal waits for its retry like any write."""

from __future__ import annotations

import asyncio
import dataclasses

from kyma_gpu.extensions.own_flux.machine import Phase as OwnFlux
from kyma_gpu.reconcile.machine import Phase
from kyma_gpu.rules.catalog import Catalog
from tests.unit.test_loop import _provided_and_installed


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
    asyncio.run(world.loop.run_pass())
    assert world.last_phase is Phase.RELEASED
    assert "delete CustomResourceDefinition" in world.api.calls
