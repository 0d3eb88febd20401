"""Node detection: Node bodies -> ObservedNode (NodeFacts and per-node state) -> ClusterFacts.
Pure."""

from kyma_gpu.facts.cluster import ClusterFacts, cluster_facts
from kyma_gpu.facts.machines import MachineType, MachineTypeRegistry
from kyma_gpu.facts.node import (
    DriverUpgradeState,
    NodeError,
    NodeFacts,
    ObservedNode,
    OsFamily,
    node_facts,
    observe_node,
    parse_os_image,
)

__all__ = (
    "ClusterFacts",
    "DriverUpgradeState",
    "MachineType",
    "MachineTypeRegistry",
    "NodeError",
    "NodeFacts",
    "ObservedNode",
    "OsFamily",
    "cluster_facts",
    "node_facts",
    "observe_node",
    "parse_os_image",
)
