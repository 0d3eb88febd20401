"""What GPU health and node marks keep of each Node: the extension's share of the Node fold
(`node_fold`, facts/node.py `NodeFold`). Pure.

Two compact records, each only on the nodes it concerns, so a CPU node keeps nothing and a
heartbeat changes nothing:

- `GpuDevices`: the node's GPUs as the kubelet and GPU feature discovery report them (a node
  whose labels and status say nothing of GPUs has none);
- `NodeMarkFacts`: the manager's mark (the condition KymaGpuUnhealthy) and the cordon (a node
  with neither has none).

The core keeps them in `ObservedNode.extras` and reads neither; `devices_of` and `mark_of`
find them there.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kyma_gpu.extensions.node_marks.names import CORDON_ANNOTATION, NODE_CONDITION
from kyma_gpu.facts.node import (
    LABEL_COUNT,
    LABEL_GFD_COUNT,
    LABEL_GFD_PRODUCT,
    LABEL_GFD_REPLICAS,
    NodeFacts,
    NodeParts,
    ObservedNode,
    as_int,
    bounded,
    is_gpu_resource,
    labelled,
)


def _tokens(model: str) -> set[str]:
    return {t for t in re.split(r"[^A-Z0-9]+", model.upper()) if t}


def same_model(registry: str, product: str) -> bool:
    """Does GFD's product name (`NVIDIA-A100-SXM4-80GB`, `Tesla-T4-SHARED`) name the registry's
    model (`A100 80GB`, `T4`)? Every word of the registry's model is a word of the product."""
    return _tokens(registry) <= _tokens(product)


@dataclass(frozen=True, slots=True)
class GpuDevices:
    """A GPU node's devices as the kubelet and GPU feature discovery report them. Changes only
    when a device plugin registers, withdraws or returns a device, or GFD relabels: never with
    a heartbeat."""

    expected: int | None = None
    """GPUs it must have: its machine type's (registry), else its gpu-count label."""
    capacity: int | None = None
    """nvidia.com/gpu (and .shared, mig-*) the kubelet reports; None: no device plugin yet."""
    allocatable: int | None = None
    """Of those, the ones the device plugin calls healthy."""
    gfd_count: int | None = None
    """GPUs GPU feature discovery saw (LABEL_GFD_COUNT)."""
    gfd_product: str | None = None
    """The model GPU feature discovery saw (LABEL_GFD_PRODUCT), e.g. NVIDIA-L4."""
    replicas: int | None = None
    """Replicas per GPU GFD reports with sharing (LABEL_GFD_REPLICAS)."""
    model_matches: bool = True
    """GFD's product names the model of the registry's machine type (`same_model`), or either
    is unknown: judged once per Node change, not per status."""


@dataclass(frozen=True, slots=True)
class NodeMarkFacts:
    """The manager's mark on a node: its condition NODE_CONDITION, and its cordon."""

    unhealthy: bool = False
    """NODE_CONDITION is True."""
    reason: str = ""
    """Its reason while True."""
    unschedulable: bool = False
    """spec.unschedulable, by anyone."""
    cordoned: bool = False
    """The manager cordoned it (CORDON_ANNOTATION)."""
    condition: bool = False
    """NODE_CONDITION is there at all (True or False)."""


_NVIDIA = "nvidia.com/"


def _gpu_resources(resources: Mapping[str, Any]) -> int | None:
    """The GPU resources of a capacity or allocatable, summed; None when it names none."""
    found = [as_int(v) for k, v in resources.items()
             if k.startswith(_NVIDIA) and is_gpu_resource(k)]  # fmt: skip
    return sum(n or 0 for n in found) if found else None


def _devices(parts: NodeParts, facts: NodeFacts) -> GpuDevices | None:
    """None on a node whose labels and status say nothing of GPUs (a CPU node): most nodes,
    so they cost a few lookups."""
    labels, known = parts.labels, facts.machine
    capacity = _gpu_resources(parts.capacity)
    gfd = labels.get(LABEL_GFD_COUNT) or labels.get(LABEL_GFD_PRODUCT)
    expected = (known.count if known is not None else None) or as_int(labels.get(LABEL_COUNT))
    if capacity is None and gfd is None and expected is None:
        return None
    product = labelled(labels, LABEL_GFD_PRODUCT)
    model = known.gpu if known is not None and not known.unofficial else None
    return GpuDevices(
        expected=expected,
        capacity=capacity,
        allocatable=_gpu_resources(parts.allocatable),
        gfd_count=as_int(labels.get(LABEL_GFD_COUNT)),
        gfd_product=product,
        replicas=as_int(labels.get(LABEL_GFD_REPLICAS)),
        model_matches=not (model and product) or same_model(model, product),
    )


def _mark(parts: NodeParts) -> NodeMarkFacts | None:
    """The manager's condition and cordon; None when the node has neither (most nodes)."""
    unschedulable = parts.spec.get("unschedulable") is True
    cordoned = CORDON_ANNOTATION in parts.annotations
    conditions = parts.status.get("conditions")
    ours: Mapping[str, Any] | None = None
    if isinstance(conditions, list):
        for condition in conditions:
            if isinstance(condition, Mapping) and condition.get("type") == NODE_CONDITION:
                ours = condition
    if ours is None and not unschedulable and not cordoned:
        return None
    unhealthy = ours is not None and ours.get("status") == "True"
    return NodeMarkFacts(
        unhealthy=unhealthy,
        reason=bounded(ours.get("reason")) if ours is not None and unhealthy else "",
        unschedulable=unschedulable,
        cordoned=cordoned,
        condition=ours is not None,
    )


def node_fold(parts: NodeParts, facts: NodeFacts) -> tuple[Hashable, ...]:
    """The extension's share of the Node fold: the node's GPU devices and the manager's mark,
    each where there is one; () on most nodes."""
    devices, mark = _devices(parts, facts), _mark(parts)
    if mark is None:
        return () if devices is None else (devices,)
    return (mark,) if devices is None else (devices, mark)


def devices_of(node: ObservedNode) -> GpuDevices | None:
    """The node's GPU devices (`node_fold`); None: it reports none."""
    for extra in node.extras:
        if type(extra) is GpuDevices:
            return extra
    return None


def mark_of(node: ObservedNode) -> NodeMarkFacts | None:
    """The manager's mark and cordon on the node (`node_fold`); None: neither."""
    for extra in node.extras:
        if type(extra) is NodeMarkFacts:
            return extra
    return None


def any_marked(nodes: Iterable[ObservedNode]) -> bool:
    """A node carries a mark or a cordon (`NodeMarkFacts`): a loop over every Node, so plain."""
    for node in nodes:
        for extra in node.extras:
            if type(extra) is NodeMarkFacts:
                return True
    return False
