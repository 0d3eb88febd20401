"""The module's informer as an observer of the fleet, in a minimal process.

    python -m benchmarks.kopf_fleet.informer_observer   (KUBECONFIG: the cluster; from the root)

What the manager's start does for the Nodes (handlers.start, observe/informers.py), and nothing
else: the adapter, the store, the Informer of ``node_watch`` with the manager's watch settings and
one collector pause, in its thread (the Gpu is kopf's, handlers.py, one object); once it is listed
(the point where the manager's first reconcile may run) it says ``ready`` and freezes the heap
as the loop does after its first pass (``LoopSettings.freeze_heap``). Then it keeps watching
until SIGINT or SIGTERM, saying the Node count whenever it changes.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from benchmarks.kopf_fleet.report import report_counts, say
from kyma_gpu.adapter import KubeAdapter
from kyma_gpu.observe.informer import GcPause, Informer, freeze_heap
from kyma_gpu.observe.store import Store
from kyma_gpu.observe.watches import NODES, node_watch
from kyma_gpu.reconcile.settings import Settings
from kyma_gpu.rules.catalog import Catalog


async def observe() -> None:
    settings = Settings()
    registry = Catalog().machine_types
    adapter = KubeAdapter.connect("kopf-fleet-informer")
    store = Store()
    loop = asyncio.get_running_loop()
    pause = GcPause()
    informer = Informer(adapter, node_watch(registry), store, loop, settings.watching, pause)
    informer.start()
    while not store.synced(NODES):
        store.changed.clear()
        await store.changed.wait()
    say("ready", nodes=len(store.collection(NODES).entries))
    if settings.loop.freeze_heap:
        freeze_heap()
    report_counts(lambda: len(store.collection(NODES).entries))
    stopped = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopped.set)
    await stopped.wait()
    informer.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--standalone", action="store_true", help="ignored (the harness adds it)")
    parser.parse_args(argv)
    say("started")
    asyncio.run(observe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
