"""Cluster facts: the GPU nodes of the cluster and the count of the others. Grouping them into
driver pools is the plan's first step (plan/driver.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kyma_gpu.facts.node import NodeFacts, OsFamily


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """Everything the plan knows about the cluster: the GPU nodes' NodeFacts (no per-node
    state: ObservedNode keeps that) and the count of the others. Hashable, so plans can be
    memoized by it."""

    gpu_nodes: tuple[NodeFacts, ...]
    cpu_node_count: int

    def __hash__(self) -> int:
        """A summary, not the content: hashing every NodeFacts costs time that grows with the
        fleet, on every lookup of the plan memo (docs/performance.md). Equality still compares
        every node, and the store keeps the very object of an unchanged Node
        (observe.store.Store.put), so that compare is by identity."""
        nodes = self.gpu_nodes
        ends = (nodes[0].name, nodes[-1].name) if nodes else ()
        return hash((self.cpu_node_count, len(nodes), ends))

    @property
    def unknown_os_nodes(self) -> tuple[NodeFacts, ...]:
        return tuple(n for n in self.gpu_nodes if n.os is OsFamily.UNKNOWN)

    @property
    def unknown_machine_type_nodes(self) -> tuple[NodeFacts, ...]:
        return tuple(n for n in self.gpu_nodes if not n.machine_type_known)


def cluster_facts(nodes: Iterable[NodeFacts]) -> ClusterFacts:
    """Keep GPU nodes (sorted by name, for stable output), count the rest."""
    gpu: list[NodeFacts] = []
    cpu = 0
    for node in nodes:
        if node.is_gpu:
            gpu.append(node)
        else:
            cpu += 1
    return ClusterFacts(gpu_nodes=tuple(sorted(gpu, key=lambda n: n.name)), cpu_node_count=cpu)
