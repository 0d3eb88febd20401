"""Benchmarks of the pure core: prints numbers, asserts nothing.

    make bench        (or .venv/bin/python benchmarks/bench_core.py [--nodes N])

What it measures, on a synthetic fleet of N nodes (a third GPU nodes, Garden Linux and Ubuntu):
- node_facts per Node event (what every Node heartbeat costs the operator),
- cluster_facts + make_plan for the whole fleet (a real change),
- a memoized plan lookup (what a reconcile without a change costs),
- status aggregation (GPU health of every GPU node judged from their per-node state), and the
  same while a driver rollout labels every GPU node,
- the plan after one node's driver upgrade label moved (the planning facts stay equal: the
  memoized plan, plan/plan.py PlanMemo),
- status aggregation and the GPU health judgement with every GPU node unhealthy (issue 33),
- memory of the compact facts kept per Node versus the Node bodies.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from kyma_gpu.api.models import GpuSpec
from kyma_gpu.extensions import MACHINE, NODE_FOLDS
from kyma_gpu.extensions.node_marks.health import gpu_health
from kyma_gpu.facts import DriverUpgradeState, ObservedNode, cluster_facts, observe_node
from kyma_gpu.facts.node import LABEL_DRIVER_UPGRADE
from kyma_gpu.observe.store import Store
from kyma_gpu.plan import AllowedSources, Owner, make_plan
from kyma_gpu.plan.plan import PlanMemo
from kyma_gpu.reconcile.loop import Loop
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status import Evidence, aggregate

HOOKS = MACHINE.status_hooks
"""The registered extensions' status parts: the manager's status is the core's and theirs."""


def node(i: int) -> dict[str, Any]:
    gpu = i % 3 == 0
    ubuntu = gpu and i % 2 == 0
    labels = {
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "g6.xlarge" if gpu else "m6i.large",
        "worker.gardener.cloud/pool": "gpu" if gpu else "cpu",
        "topology.kubernetes.io/zone": "eu-central-1a",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{i:05d}", "labels": labels, "resourceVersion": str(i)},
        "spec": {"providerID": f"aws:///eu-central-1a/i-{i:017x}"},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "1"}
            if gpu
            else {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "nodeInfo": {
                "osImage": "Ubuntu 22.04.5 LTS" if ubuntu else "Garden Linux 1877.21",
                "architecture": "amd64",
                "kernelVersion": "6.12.44-cloud-amd64",
            },
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-30T00:00:00Z"}
            ],
        },
    }


def _unhealthy_rows(bodies: list[dict[str, Any]], catalog: Catalog, spec: GpuSpec,
                    owner: Owner) -> None:  # fmt: skip
    """Every GPU node's GPU withdrawn by the device plugin: the health function's worst case."""
    broken = [dict(b, status={**b["status"], "allocatable": {"nvidia.com/gpu": "0"}})
              if "nvidia.com/gpu" in b["status"]["capacity"] else b for b in bodies]  # fmt: skip
    observed = [observe_node(b, catalog.machine_types, NODE_FOLDS) for b in broken]
    plan = make_plan(spec, cluster_facts(n.facts for n in observed), catalog, owner)
    nodes = _gpu_nodes(observed)
    gpus = len(nodes)
    timed(f"status aggregation, {gpus} GPU nodes unhealthy", 200,
          lambda: aggregate(plan, Evidence(gpu_nodes=nodes), 1, (), "now", HOOKS))  # fmt: skip
    timed(f"GPU health of {gpus} nodes judged (once per plan)", 20,
          lambda: gpu_health(nodes))  # fmt: skip


def _gpu_nodes(observed: list[ObservedNode]) -> tuple[ObservedNode, ...]:
    return tuple(n for n in observed if n.is_gpu)


def timed(label: str, repeat: int, fn: Callable[[], object]) -> None:
    fn()  # warm
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    per = (time.perf_counter() - start) / repeat
    unit, scale = ("ms", 1e3) if per >= 1e-3 else ("us", 1e6)
    print(f"{label:<52} {per * scale:10.2f} {unit}  ({repeat} runs)")


def _rollout_rows(bodies: list[dict[str, Any]], catalog: Catalog, spec: GpuSpec,
                  owner: Owner) -> None:  # fmt: skip
    """A driver rollout half way: every GPU node labelled, a third of them done."""
    states = (DriverUpgradeState.DONE, DriverUpgradeState.UPGRADE_REQUIRED,
              DriverUpgradeState.POD_RESTART_REQUIRED)  # fmt: skip
    for i, body in enumerate(b for b in bodies if b["status"]["capacity"].get("nvidia.com/gpu")):
        body["metadata"]["labels"][LABEL_DRIVER_UPGRADE] = str(states[i % 3])
    facts = [observe_node(b, catalog.machine_types, NODE_FOLDS) for b in bodies]
    cfacts = cluster_facts(n.facts for n in facts)
    plan = make_plan(spec, cfacts, catalog, owner)
    nodes = _gpu_nodes(facts)
    upgrades = tuple((n.name, n.driver_upgrade) for n in nodes if n.driver_upgrade)
    observed = Evidence(driver_upgrades=upgrades, gpu_nodes=nodes)
    timed(f"status aggregation, {len(upgrades)} nodes in a rollout", 200,
          lambda: aggregate(plan, observed, 1, (), "now", HOOKS))  # fmt: skip
    labelled = [i for i, b in enumerate(bodies) if LABEL_DRIVER_UPGRADE in b["metadata"]["labels"]]
    moves = iter(labelled * 2)
    plans = PlanMemo(catalog)
    plans.plan(spec, cfacts, owner, AllowedSources())

    def one_label_moved() -> object:
        """The next node's label moves (each time another node)."""
        at = next(moves)
        labels = bodies[at]["metadata"]["labels"]
        done = labels[LABEL_DRIVER_UPGRADE] == DriverUpgradeState.DONE
        labels[LABEL_DRIVER_UPGRADE] = "upgrade-required" if done else "upgrade-done"
        facts[at] = observe_node(bodies[at], catalog.machine_types, NODE_FOLDS)
        return plans.plan(spec, cluster_facts(n.facts for n in facts), owner, AllowedSources())

    timed("cluster_facts + plan after one upgrade label moved", 20, one_label_moved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    args = parser.parse_args()
    catalog = Catalog()
    registry = catalog.machine_types
    bodies = [node(i) for i in range(args.nodes)]
    print(f"fleet: {args.nodes} nodes, {sum(1 for i in range(args.nodes) if i % 3 == 0)} GPU nodes")

    timed("node_facts of one Node (per heartbeat)", 20000,
          lambda: observe_node(bodies[0], registry, NODE_FOLDS))  # fmt: skip
    observed = [observe_node(b, registry, NODE_FOLDS) for b in bodies]
    facts = [n.facts for n in observed]
    timed("cluster_facts of the fleet", 50, lambda: cluster_facts(facts))
    cfacts = cluster_facts(facts)
    spec, owner = GpuSpec(), Owner(uid="bench")
    timed(
        "make_plan for the fleet (a real change)",
        20,
        lambda: make_plan(spec, cfacts, catalog, owner),
    )
    loop = Loop(store=Store(), writer=None, catalog=catalog)  # type: ignore[arg-type]
    loop.plan(spec, cfacts, owner, AllowedSources())
    again = cluster_facts(facts)  # a pass builds its own, from the store's unchanged NodeFacts
    timed(
        "memoized plan lookup (reconcile without change)",
        200,
        lambda: loop.plan(spec, again, owner, AllowedSources()),
    )
    plan = make_plan(spec, cfacts, catalog, owner)
    nodes = _gpu_nodes(observed)
    timed("status aggregation", 200,
          lambda: aggregate(plan, Evidence(gpu_nodes=nodes), 1, (), "now", HOOKS))  # fmt: skip
    _rollout_rows(bodies, catalog, spec, owner)
    _unhealthy_rows(bodies, catalog, spec, owner)

    tracemalloc.start()
    snapshot = [observe_node(b, registry, NODE_FOLDS) for b in bodies]
    facts_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    tracemalloc.start()
    copies = [node(i) for i in range(args.nodes)]
    bodies_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"{'memory: compact facts per Node':<52} {facts_bytes / len(snapshot):10.0f} B")
    print(f"{'memory: a (small, synthetic) Node body':<52} {bodies_bytes / len(copies):10.0f} B")


if __name__ == "__main__":
    main()
