"""Status aggregation: observed Flux, DaemonSets, ClusterPolicy, workloads -> Gpu.status. Pure."""

from kyma_gpu.facts.stack import (
    DaemonSetFacts,
    FluxObjectFacts,
    OperatorStateFacts,
    PullFailure,
    asks_for_gpu,
    cluster_policy_facts,
    daemonset_facts,
    flux_object_facts,
    gpu_cluster_facts,
    is_gpu_workload,
    pull_failure,
    requests_gpu,
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
    "asks_for_gpu",
    "cluster_policy_facts",
    "daemonset_facts",
    "flux_object_facts",
    "gpu_cluster_facts",
    "is_gpu_workload",
    "pull_failure",
    "requests_gpu",
)
