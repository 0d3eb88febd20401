"""Status aggregation: observed Flux, DaemonSets, ClusterPolicy, workloads -> Gpu.status. Pure."""

from kyma_gpu.status.aggregate import ConditionType, Observed, aggregate
from kyma_gpu.status.observed import (
    ClusterPolicyFacts,
    DaemonSetFacts,
    HelmReleaseFacts,
    PullFailure,
    asks_for_gpu,
    cluster_policy_facts,
    daemonset_facts,
    gpu_cluster_facts,
    helm_release_facts,
    is_gpu_workload,
    pull_failure,
    requests_gpu,
)

__all__ = [
    "ClusterPolicyFacts",
    "ConditionType",
    "DaemonSetFacts",
    "HelmReleaseFacts",
    "Observed",
    "PullFailure",
    "aggregate",
    "asks_for_gpu",
    "cluster_policy_facts",
    "daemonset_facts",
    "gpu_cluster_facts",
    "helm_release_facts",
    "is_gpu_workload",
    "pull_failure",
    "requests_gpu",
]
