"""Node detection: Node bodies -> NodeFacts -> ClusterFacts. Pure."""

from kyma_gpu.facts.cluster import ClusterFacts, cluster_facts
from kyma_gpu.facts.machines import MachineType, MachineTypeRegistry
from kyma_gpu.facts.node import (
    DriverUpgradeState,
    NodeError,
    NodeFacts,
    OsFamily,
    node_facts,
    parse_os_image,
)

__all__ = [
    "ClusterFacts",
    "DriverUpgradeState",
    "MachineType",
    "MachineTypeRegistry",
    "NodeError",
    "NodeFacts",
    "OsFamily",
    "cluster_facts",
    "node_facts",
    "parse_os_image",
]
