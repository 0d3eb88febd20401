"""Fake nodes from YAML, played by kwok.

A node file is what ``kubectl get nodes -o yaml`` prints: a ``kind: List``
(or ``NodeList``) of Node objects, or Node documents one after another. Labels
(``node.kubernetes.io/instance-type``, NFD's ``feature.node.kubernetes.io/...``),
``spec.providerID``, ``status.capacity``/``allocatable`` (``nvidia.com/gpu``)
and ``status.nodeInfo`` (osImage, kernelVersion, architecture, ...) are kept
as they are, so a dump of a real cluster becomes a test fleet.

What changes on the way in:

- server-owned metadata (uid, resourceVersion, creationTimestamp,
  managedFields, ...) is dropped;
- the kwok label/annotation ``kwok.x-k8s.io/node=fake`` is added, so kwok
  manages the node;
- status.conditions are dropped, so kwok's node stage makes the node Ready
  now, whatever state the dump was taken in;
- taints with keys under ``node.kubernetes.io/`` (not-ready, unreachable,
  unschedulable, ...) are dropped: the kubelet and the node-lifecycle
  controller own them and neither runs here. Other taints (e.g. a GPU pool's
  ``nvidia.com/gpu`` taint) are kept. No kwok NoSchedule taint is added, so
  DaemonSet pods land on the fake nodes;
- a node without an InternalIP address gets a stable one from 10.250.0.0/16
  (kwok uses it as the hostIP of the node's pods).
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from .procs import ManagedProcess, wait_for

DEMO_FLEET = Path(__file__).resolve().parent / "fleets" / "demo.yaml"
"""Two AWS g6.xlarge GPU nodes and one m5.large CPU node, Garden Linux 1877.21."""

KWOK_LABEL = "kwok.x-k8s.io/node"
KWOK_VALUE = "fake"
KWOK_SELECTOR = f"{KWOK_LABEL}={KWOK_VALUE}"

_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
    "ownerReferences",
    "finalizers",
)

Node = dict[str, Any]


def load_nodes(path: Path) -> list[Node]:
    """Node objects from a YAML file (a List/NodeList, or Node documents)."""
    nodes: list[Node] = []
    with path.open(encoding="utf-8") as handle:
        for document in yaml.safe_load_all(handle):
            if document is None:
                continue
            if not isinstance(document, dict):
                raise ValueError(f"{path}: expected a mapping, got {type(document).__name__}")
            kind = document.get("kind")
            items = document.get("items") if kind in ("List", "NodeList") else [document]
            for item in items or []:
                if not isinstance(item, dict) or item.get("kind", "Node") != "Node":
                    got = item.get("kind") if isinstance(item, dict) else type(item).__name__
                    raise ValueError(f"{path}: expected kind Node, got {got!r}")
                if not item.get("metadata", {}).get("name"):
                    raise ValueError(f"{path}: a Node without metadata.name")
                nodes.append(item)
    if not nodes:
        raise ValueError(f"{path}: no Node objects found")
    return nodes


def _internal_ip(name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return f"10.250.{digest[0]}.{max(1, digest[1] % 255)}"


def prepare_node(node: Node) -> Node:
    """A copy of ``node`` ready to create as a kwok-managed fake node."""
    node = copy.deepcopy(node)
    node["apiVersion"] = "v1"
    node["kind"] = "Node"
    metadata: dict[str, Any] = node.setdefault("metadata", {})
    for key in _SERVER_METADATA:
        metadata.pop(key, None)
    metadata.setdefault("labels", {})[KWOK_LABEL] = KWOK_VALUE
    metadata.setdefault("annotations", {})[KWOK_LABEL] = KWOK_VALUE
    # kubectl's last-applied annotation of the dumped object is meaningless here.
    metadata["annotations"].pop("kubectl.kubernetes.io/last-applied-configuration", None)

    spec: dict[str, Any] = node.setdefault("spec", {})
    taints = [
        taint
        for taint in spec.get("taints") or []
        if not str(taint.get("key", "")).startswith("node.kubernetes.io/")
    ]
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    spec.pop("unschedulable", None)

    status: dict[str, Any] = node.setdefault("status", {})
    status.pop("conditions", None)
    addresses = list(status.get("addresses") or [])
    if not any(address.get("type") == "InternalIP" for address in addresses):
        addresses.insert(0, {"type": "InternalIP", "address": _internal_ip(metadata["name"])})
    if not any(address.get("type") == "Hostname" for address in addresses):
        addresses.append({"type": "Hostname", "address": metadata["name"]})
    status["addresses"] = addresses
    return node


def create_nodes(api_client: Any, nodes: Iterable[Node]) -> list[str]:
    """Create (or replace) kwok-managed Nodes; return their names.

    The status is written again through the status subresource after the
    create, as a kubelet does, so capacity and nodeInfo are certainly set.
    An existing Node of the same name is deleted first.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    names: list[str] = []
    for raw in nodes:
        node = prepare_node(raw)
        name: str = node["metadata"]["name"]
        body = client.V1Node.from_dict(node)
        if body is None:
            raise ValueError(f"node {name}: not a valid Node object")
        try:
            core.create_node(body)
        except ApiException as error:
            if error.status != 409:
                raise
            delete_node(api_client, name)
            core.create_node(body)
        core.patch_node_status(name, {"status": node["status"]})
        names.append(name)
    return names


def node_is_ready(node: Any) -> bool:
    """True if a V1Node has the condition Ready=True."""
    conditions = (node.status.conditions or []) if node.status else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def wait_nodes_ready(
    api_client: Any,
    names: Sequence[str],
    timeout: float = 60.0,
    alive: Sequence[ManagedProcess] = (),
) -> float:
    """Wait until every named Node is Ready; seconds taken."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    wanted = set(names)

    def all_ready() -> bool:
        listed = core.list_node(label_selector=KWOK_SELECTOR).items
        ready = {node.metadata.name for node in listed if node.metadata and node_is_ready(node)}
        return wanted <= ready

    return wait_for(all_ready, timeout, f"nodes Ready: {', '.join(sorted(wanted))}", alive=alive)


def delete_node(api_client: Any, name: str, *, timeout: float = 60.0) -> None:
    """Delete a Node, then force-delete the pods still bound to it; wait until gone.

    Without a kubelet nothing else would remove those pods soon: the pod GC
    controller waits before collecting pods of vanished nodes.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    try:
        core.delete_node(name)
    except ApiException as error:
        if error.status != 404:
            raise
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items
    for pod in pods:
        if pod.metadata is None or not pod.metadata.name or not pod.metadata.namespace:
            continue
        try:
            core.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
            )
        except ApiException as error:
            if error.status != 404:
                raise

    def gone() -> bool:
        try:
            core.read_node(name)
        except ApiException as error:
            if error.status == 404:
                return True
            raise
        return False

    start = time.monotonic()
    wait_for(gone, timeout, f"node {name} deleted")
    remaining = max(1.0, timeout - (time.monotonic() - start))
    wait_for(
        lambda: not core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items,
        remaining,
        f"pods of node {name} deleted",
    )
