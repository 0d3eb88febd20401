"""`Loop.serve` (a Gpu's kopf daemon) on its own clock: the periodic safety pass
(`LoopSettings.resync_seconds`), with the real store and the in-memory API of
tests/unit/test_loop.py, and no event from anyone (the wait of the own Flux's RemovingFlux:
tests/unit/test_loop_own_flux.py).

Each test runs the loop as the process does (`Loop.serve` until stopped) in one event loop, and
waits for what it expects with a deadline, so a loaded machine makes them slower, not flaky.
Checked by breaking the loop and seeing them fail, then restoring: the resync timeout left out
of the loop's wait (no reads, the drift stays), and the reads' answers not put into the store
(the drift stays).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum

from kyma_gpu.reconcile.loop import StopEvent
from kyma_gpu.reconcile.machine import Phase
from kyma_gpu.reconcile.settings import LoopSettings
from kyma_gpu.rules.catalog import Catalog
from tests.unit.test_loop import World, installed, new_world

FAST = LoopSettings(status_seconds=0.0, burst_seconds=0.0, resync_seconds=0.05, freeze_heap=False)
"""A safety pass every 50 ms."""
DEADLINE = 10.0


async def _until(what: Callable[[], bool], deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not what():
        assert time.monotonic() < end, "not within the deadline"
        await asyncio.sleep(0.01)


def running(world: World, scenario: Callable[[], Awaitable[None]]) -> None:
    """The scenario while the Gpu's loop runs (`Loop.serve`); then stop it, as kopf stops the
    daemon when the operator exits."""

    async def main() -> None:
        stop = StopEvent()
        task = asyncio.create_task(world.loop.serve("gpu", stop))
        try:
            await scenario()
        finally:
            stop.event.set()
            await asyncio.wait_for(task, timeout=DEADLINE)

    asyncio.run(main())


def settled(catalog: Catalog, settings: LoopSettings = FAST) -> World:
    """Installed and reconciled once more: nothing is left to write."""
    world = installed(new_world(catalog, settings=settings))
    world.run()
    assert world.run() is Phase.PROGRESSING
    assert world.api.calls == []
    world.api.reads.clear()
    return world


def test_the_safety_pass_reads_again_and_writes_nothing_when_nothing_differs(
    catalog: Catalog,
) -> None:
    world = settled(catalog)
    passes: list[StrEnum] = []
    pass_for = world.loop.pass_for

    async def counted(name: str) -> tuple[float | None, bool]:
        result = await pass_for(name)
        passes.append(world.last_phase)
        return result

    world.loop.pass_for = counted  # type: ignore[method-assign]

    async def scenario() -> None:
        await _until(lambda: len(world.api.reads) >= 6 and len(passes) >= 4)

    running(world, scenario)
    assert world.api.calls == []  # passes and reads, and not one write
    assert set(world.api.reads) == {"get HelmRelease", "get HelmRepository"}
    assert set(passes) == {Phase.PROGRESSING}


def test_a_release_changed_behind_the_modules_back_is_applied_again(catalog: Catalog) -> None:
    """No watch event tells of the change (the store still holds the old facts): the safety
    pass reads the HelmRelease, sees it differ from the plan, and applies it again."""
    world = settled(catalog, LoopSettings(status_seconds=0.0, burst_seconds=0.0, freeze_heap=False,
                                          resync_seconds=0.5))  # fmt: skip
    release = world.api.objects[("HelmRelease", "gpu-operator")]
    planned = dict(release["spec"])
    release["spec"]["interval"] = "24h"
    release["spec"]["values"] = {"driver": {"enabled": False}}
    release["metadata"]["generation"] += 1
    release["metadata"]["resourceVersion"] = world.api.next_version()

    async def scenario() -> None:
        await asyncio.sleep(0.2)
        assert world.api.calls == []  # before the safety pass is due, nobody knows
        await _until(lambda: "apply HelmRelease" in world.api.calls)

    running(world, scenario)
    assert {"get HelmRelease", "get HelmRepository"} <= set(world.api.reads)
    assert world.api.objects[("HelmRelease", "gpu-operator")]["spec"] == planned


def test_a_ghost_in_the_store_goes_with_the_safety_pass(catalog: Catalog) -> None:
    """The store holds a HelmRepository that the API server no longer has (a lost DELETED
    event, or a store bug as once): the read finds it gone, and the pass applies it again."""
    world = settled(catalog)
    del world.api.objects[("HelmRepository", "gpu-operator")]

    async def scenario() -> None:
        await _until(lambda: "apply HelmRepository" in world.api.calls)

    running(world, scenario)
    assert ("HelmRepository", "gpu-operator") in world.api.objects


def test_a_follower_makes_no_safety_pass(catalog: Catalog) -> None:
    world = settled(catalog)
    leading = False
    world.loop.may_write = lambda: leading

    async def scenario() -> None:
        nonlocal leading
        await asyncio.sleep(0.3)  # six resync intervals
        assert world.api.reads == []  # a follower neither reads nor writes
        leading = True
        await _until(lambda: len(world.api.reads) >= 2)

    running(world, scenario)
    assert world.api.calls == []
