"""One reconcile pass per driver upgrade label, in-process: what the manager pays while the NVIDIA
upgrade controller labels the GPU nodes one at a time (after an install, and in a rollout).

    .venv/bin/python benchmarks/label_pass.py [--nodes 20000] [--labels 40]

The scale fleet's Nodes (benchmarks/scale, 10 % GPU nodes in 200 pools) as facts in a store, the
reconcile loop against the unit tests' in-memory API (tests/unit/fake_api.py), two passes to
settle; then each of --labels GPU nodes gets `upgrade-done` and one pass runs. Prints the CPU per
pass. No cluster: the API server's share is in bench_scale.py's runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from benchmarks.scale.fleet import gpu_pool, is_gpu_index, scale_node  # noqa: E402
from kyma_gpu.extensions import NODE_FOLDS  # noqa: E402
from kyma_gpu.facts import observe_node  # noqa: E402
from kyma_gpu.facts.gpu import gpu_object  # noqa: E402
from kyma_gpu.facts.node import LABEL_DRIVER_UPGRADE  # noqa: E402
from kyma_gpu.observe.store import Entry, Store, version_of  # noqa: E402
from kyma_gpu.observe.watches import CRDS, DAEMONSETS, FLUX, NODES  # noqa: E402
from kyma_gpu.plan.provision import REQUIRED_APIS, CrdFacts  # noqa: E402
from kyma_gpu.reconcile.loop import GPUS, Loop  # noqa: E402
from kyma_gpu.reconcile.machine import FINALIZER  # noqa: E402
from kyma_gpu.reconcile.settings import LoopSettings  # noqa: E402
from kyma_gpu.rules.catalog import Catalog  # noqa: E402
from tests.unit.fake_api import FakeApi  # noqa: E402
from tests.unit.test_loop import run_pass  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument("--labels", type=int, default=40)
    args = parser.parse_args()
    catalog, store, api = Catalog(), Store(), FakeApi()
    bodies = {}
    for i in range(args.nodes):
        is_gpu = is_gpu_index(i, 0.1)
        body = scale_node(i, is_gpu, os=gpu_pool(i // 10 % 200, 200) if is_gpu else None)
        body["status"]["images"] = []
        bodies[body["metadata"]["name"]] = body
    registry = catalog.machine_types
    store.replace(
        NODES, {k: Entry(1, observe_node(b, registry, NODE_FOLDS)) for k, b in bodies.items()}, 1
    )
    for resource in (DAEMONSETS, *FLUX):
        store.replace(resource, {}, 1)
    store.replace(CRDS, {name: Entry(1, CrdFacts(uid=name)) for name in REQUIRED_APIS}, 1)
    api.gpu = {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu", "spec": {},
               "metadata": {"name": "gpu", "uid": "u", "generation": 1,
                            "finalizers": [FINALIZER],
                            "resourceVersion": api.next_version()}}  # fmt: skip
    loop = Loop(store, api, catalog, observe=lambda _: None,
                settings=LoopSettings(status_seconds=0.0))  # fmt: skip
    gpu = gpu_object(api.gpu)
    store.put(GPUS, gpu.name, Entry(version_of(gpu.resource_version), gpu))
    for _ in range(2):
        asyncio.run(run_pass(loop))
    gpu_names = [name for name, facts in store.collection(NODES).entries.items()
                 if facts.facts.is_gpu]  # fmt: skip
    names = gpu_names[: args.labels]
    began = time.process_time()
    for version, name in enumerate(names, start=2):
        bodies[name]["metadata"]["labels"][LABEL_DRIVER_UPGRADE] = "upgrade-done"
        store.put(NODES, name, Entry(version, observe_node(bodies[name], registry, NODE_FOLDS)))
        asyncio.run(run_pass(loop))
    per_pass = (time.process_time() - began) / len(names) * 1000
    print(f"{args.nodes} Nodes ({len(gpu_names)} GPU): {per_pass:.1f} ms of CPU per upgrade label"
          " and pass")  # fmt: skip


if __name__ == "__main__":
    main()
