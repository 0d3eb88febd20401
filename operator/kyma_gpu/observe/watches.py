"""The list-watches of the operator (what each informer lists and watches), and the compact facts
it keeps of each object.

| resource          | collection                                    | facts kept                |
|-------------------|-----------------------------------------------|---------------------------|
| gpus              | kopf's watch (handlers.py `gpu_event`)        | GpuObject, managedFields  |
|                   |                                               | read (pruned_values)      |
| nodes             | all Nodes (pages of 250: a Node is large)     | ObservedNode              |
| daemonsets        | DaemonSets in the target namespace only       | DaemonSetFacts            |
| helmreleases, ... | our Flux objects (label selector), module ns  | LiveObject + status facts |
| clusterpolicies   | ClusterPolicies, while their CRD is installed | OperatorStateFacts        |
| gpuclusters       | GPUClusters (DRA), while their CRD is there   | OperatorStateFacts        |
| crds              | CRDs, metadata only: which of ours are served | CrdFacts (uid, labels)    |
| pods (pulls)      | pending pods of the target namespace (field   | PullFailure: the images   |
|                   | selector status.phase=Pending): none at rest  | a pod cannot pull         |

An extension may add a list-watch of its own, observed only while it wants it (extensions/base.py
`Watch`): observe/informers.py starts and stops it.

The Gpu is kopf's: kopf watches it and its events put its facts into the same store
(handlers.py); the manager starts once the Gpu's CRD is there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from types import MappingProxyType
from typing import Any

from kyma_gpu.adapter import NODE_JSON, ListQuery
from kyma_gpu.api.models import API_GROUP, PLURAL
from kyma_gpu.api.resources import FLUX_KINDS, OURS, FluxKind
from kyma_gpu.facts import NodeError, ObservedNode, observe_node
from kyma_gpu.facts.gpu import GpuObject
from kyma_gpu.facts.machines import MachineTypeRegistry
from kyma_gpu.facts.node import NodeFold
from kyma_gpu.observe.informer import ListWatch
from kyma_gpu.observe.store import Resource
from kyma_gpu.plan.actions import LiveObject, live_object
from kyma_gpu.plan.provision import CrdFacts, crd_facts
from kyma_gpu.status import (
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

log = logging.getLogger(__name__)
GPUS: Resource[GpuObject] = Resource("gpus")
"""The Gpus: what the user asks for, and the status the loop wrote last."""
NODES: Resource[ObservedNode] = Resource("nodes")
DAEMONSETS: Resource[DaemonSetFacts] = Resource("daemonsets")
CLUSTER_POLICIES: Resource[OperatorStateFacts] = Resource("clusterpolicies")
GPU_CLUSTERS: Resource[OperatorStateFacts] = Resource("gpuclusters")
CRDS: Resource[CrdFacts] = Resource("crds")
PULLS: Resource[PullFailure] = Resource("pulls")
"""Pending pods of the GPU operator's namespace that cannot pull an image."""
FLUX: Mapping[str, FluxKind] = MappingProxyType({k.plural: k for k in FLUX_KINDS})
FLUX_RESOURCES: tuple[Resource[FluxFacts], ...] = tuple(Resource(plural) for plural in FLUX)
GATED = MappingProxyType(
    {
        **{k.crd_name: k.plural for k in FLUX_KINDS},
        "clusterpolicies.nvidia.com": CLUSTER_POLICIES,
        "gpuclusters.nvidia.com": GPU_CLUSTERS,
    }
)
"""CRD name -> the resource it serves: its informer lists again when the CRD appears."""
GPU_CRD = f"{PLURAL}.{API_GROUP}"
"""The Gpu's CRD: kopf resolves the Gpu's API once it is there (handlers.py)."""
NODE_COALESCE = 0.2
"""Seconds the Node watch waits after an event that came after a wait (KubeAdapter.watch): the
kubelets' status updates, which grow with the fleet, are read at most 1/NODE_COALESCE times a
second in batches instead of one wake-up each, each at most NODE_COALESCE late (a GPU node's
join still reaches the status well under a second). The value is the smallest that kept
heartbeat CPU under its goal at the largest fleet measured (docs/performance.md). Only the
Nodes: the Gpu and the Flux objects, where a user waits for an answer, are read at once."""
REQUIRED: tuple[str, ...] = (NODES, DAEMONSETS, CRDS, *FLUX)
"""Listed (or found absent) before the first reconcile: planning without them would be wrong.
The ClusterPolicy and the GPUCluster are not among them: a CRD of our own chart must never
delay anything."""


def node_watch(registry: MachineTypeRegistry, folds: tuple[NodeFold, ...] = ()) -> ListWatch:
    """Every Node, folded into an ObservedNode with what the extensions' `folds` keep of it."""

    def fold(body: Mapping[str, Any]) -> Any:
        try:
            return observe_node(body, registry, folds)
        except NodeError as err:
            log.warning("ignoring a Node: %s", err)
            return None

    # status.images: never read, most of the bytes. Heartbeats: read in batches (NODE_COALESCE).
    query = ListQuery("/api/v1/nodes", parser=NODE_JSON, coalesce=NODE_COALESCE)
    return ListWatch(NODES, query, fold, page_size=250, key=_name)


def daemonset_watch(target_namespace: str) -> ListWatch:
    path = f"/apis/apps/v1/namespaces/{target_namespace}/daemonsets"
    return ListWatch(DAEMONSETS, ListQuery(path), daemonset_facts, key=_name)


FluxFacts = tuple[LiveObject, FluxObjectFacts]


def flux_facts(plural: str, body: Mapping[str, Any]) -> FluxFacts:
    """A Flux object of ours: what planning compares, and what status mirrors."""
    kind = FLUX[plural]
    full = {"apiVersion": kind.api_version, "kind": kind.kind, **body}
    return (live_object(full), flux_object_facts(full))


def flux_watch(plural: str, namespace: str) -> ListWatch:
    path = FLUX[plural].path(namespace)
    return ListWatch(plural, ListQuery(path, label_selector=OURS), partial(flux_facts, plural),
                  key=_name)  # fmt: skip


def pull_watch(target_namespace: str) -> ListWatch:
    """Pending pods of the GPU operator's namespace; only those that cannot pull are kept. The
    server filters by phase: at rest there are none, and a running pod leaves the watch."""
    query = ListQuery(f"/api/v1/namespaces/{target_namespace}/pods",
                      field_selector="status.phase=Pending")  # fmt: skip
    return ListWatch(PULLS, query, pull_failure, key=_name)


def cluster_policy_watch() -> ListWatch:
    query = ListQuery("/apis/nvidia.com/v1/clusterpolicies")
    return ListWatch(CLUSTER_POLICIES, query, cluster_policy_facts, key=_name)


def gpu_cluster_watch() -> ListWatch:
    """The DRA stack's GPUCluster: an empty watch on the default stack (the CRD comes with the
    v26.7.0 chart either way), one object on the DRA stack."""
    query = ListQuery("/apis/nvidia.com/v1alpha1/gpuclusters")
    return ListWatch(GPU_CLUSTERS, query, gpu_cluster_facts, key=_name)


def crd_watch() -> ListWatch:
    def fold(body: Mapping[str, Any]) -> Any:
        meta = body.get("metadata") or {}
        name = meta.get("name")
        return crd_facts(meta) if name in GATED or name == GPU_CRD else None

    query = ListQuery("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                      metadata_only=True)  # fmt: skip
    return ListWatch(CRDS, query, fold, page_size=100, key=_name)


def _name(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name"))
