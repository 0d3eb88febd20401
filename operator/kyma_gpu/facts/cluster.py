"""Cluster facts: the GPU nodes of the cluster, grouped by OS pool."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kyma_gpu.facts.node import NodeFacts, OsFamily


@dataclass(frozen=True, slots=True)
class OsPool:
    """GPU nodes that share an OS family: one driver configuration serves them."""

    os: OsFamily
    nodes: tuple[NodeFacts, ...]

    @property
    def os_versions(self) -> tuple[str, ...]:
        return tuple(sorted({n.os_version for n in self.nodes if n.os_version}))

    @property
    def preinstalled(self) -> bool:
        return all(n.preinstalled_driver for n in self.nodes)


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """Everything the plan knows about the cluster. Hashable, so plans can be memoized."""

    gpu_nodes: tuple[NodeFacts, ...]
    cpu_node_count: int

    @property
    def pools(self) -> tuple[OsPool, ...]:
        by_os: dict[OsFamily, list[NodeFacts]] = {}
        for node in self.gpu_nodes:
            by_os.setdefault(node.os, []).append(node)
        return tuple(OsPool(os=os, nodes=tuple(nodes)) for os, nodes in sorted(by_os.items()))

    @property
    def os_families(self) -> tuple[OsFamily, ...]:
        return tuple(pool.os for pool in self.pools)

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
