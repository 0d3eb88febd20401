"""Status aggregation: observed Flux, DaemonSets, ClusterPolicy -> Gpu.status. Pure."""

from kyma_gpu.facts.stack import (
    DaemonSetFacts,
    FluxObjectFacts,
    OperatorStateFacts,
    PullFailure,
    cluster_policy_facts,
    daemonset_facts,
    flux_object_facts,
    gpu_cluster_facts,
    pull_failure,
)
from kyma_gpu.status.aggregate import ConditionType, Evidence, aggregate

__all__ = (
    "ConditionType",
    "DaemonSetFacts",
    "Evidence",
    "FluxObjectFacts",
    "OperatorStateFacts",
    "PullFailure",
    "aggregate",
    "cluster_policy_facts",
    "daemonset_facts",
    "flux_object_facts",
    "gpu_cluster_facts",
    "pull_failure",
)
