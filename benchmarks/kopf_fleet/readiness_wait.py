"""kopf's readiness wait at start, in isolation: why its start grows with the square of the fleet.

    .venv/bin/python -m benchmarks.kopf_fleet.readiness_wait [--objects 1000,2000,4000]

kopf 1.45.2 starts one worker task per object of an indexed resource (kopf/_core/reactor/
queueing.py ``watcher``). Before the worker is spawned, the watcher adds a toggle for the object
to the operator's ``operator_indexed`` ToggleSet; the worker indexes its object, drops its toggle
and waits until the set is empty (kopf/_core/reactor/processing.py ``process_resource_event``),
so that no handler runs on a half-built index. All toggles share one asyncio.Condition: every
drop is a ``notify_all`` that wakes every worker already waiting, and each of them takes the
condition's lock in turn, looks, and waits again; a new worker's ``make_toggle`` and
``drop_toggle`` queue behind them for the same lock. With N objects that is about N^2/2
wake-ups before the first handler runs.

This script runs exactly that with kopf's own ToggleSet and nothing else (no API server, no
parsing, no indexing): N workers, each spawned after the one before has started waiting, as the
watcher spawns them while the list streams in. Prints the CPU seconds and wall seconds per N.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence

from kopf._cogs.aiokits import aiotoggles


async def readiness(objects: int) -> None:
    indexed = aiotoggles.ToggleSet(all)
    blocker = await indexed.make_toggle(name="orchestration blocker")

    async def worker(toggle: aiotoggles.Toggle) -> None:
        await indexed.drop_toggle(toggle)  # indexed
        await indexed.wait_for(True)  # every other object and resource too

    workers = []
    for number in range(objects):
        toggle = await indexed.make_toggle(name=str(number))
        workers.append(asyncio.create_task(worker(toggle)))
        await asyncio.sleep(0)  # the worker starts and waits before the next object arrives
    await indexed.drop_toggle(blocker)  # the list is complete
    await asyncio.gather(*workers)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--objects", default="1000,2000,4000", help="comma-separated counts")
    args = parser.parse_args(argv)
    print("| objects | CPU (s) | wall (s) |\n|--:|--:|--:|")
    for objects in (int(n) for n in args.objects.split(",")):
        cpu, wall = time.process_time(), time.monotonic()
        asyncio.run(readiness(objects))
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        print(f"| {objects:,} | {cpu:.2f} | {wall:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
