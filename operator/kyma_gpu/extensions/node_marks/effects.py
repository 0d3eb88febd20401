"""Node marks' action, carried out through the adapter's generic patch: each Node's condition
(a strategic merge patch of nodes/status: conditions merge by type, so the kubelet's stay as
they are), then its cordon."""

from __future__ import annotations

import logging
from typing import Any

from kyma_gpu.adapter import ObjectRef, Patch
from kyma_gpu.errors import NotFound
from kyma_gpu.extensions.base import Context
from kyma_gpu.extensions.node_marks.machine import MarkNodes
from kyma_gpu.extensions.node_marks.names import (
    CORDON_ANNOTATION,
    CORDON_VALUE,
    NODE_CONDITION,
    NodeWrite,
)
from kyma_gpu.reconcile.effects import now

log = logging.getLogger(__name__)


def node_condition_patch(write: NodeWrite, now: str) -> dict[str, Any]:
    """The status patch of the manager's Node condition. lastTransitionTime only with a change
    of its status: a new reason alone keeps the time (strategic merge keeps what is not sent)."""
    condition: dict[str, Any] = {
        "type": NODE_CONDITION,
        "status": "True" if write.unhealthy else "False",
        "reason": write.reason,
        "message": write.message[:1024],
        "lastHeartbeatTime": now,
    }
    if write.new_status:
        condition["lastTransitionTime"] = now
    return {"status": {"conditions": [condition]}}


def cordon_patch(cordon: bool) -> dict[str, Any]:
    """Cordon and annotate, or drop the annotation and uncordon."""
    return {
        "metadata": {"annotations": {CORDON_ANNOTATION: CORDON_VALUE if cordon else None}},
        "spec": {"unschedulable": cordon},
    }


async def mark_node(context: Context, write: NodeWrite, stamp: str) -> dict[str, Any] | None:
    """Set the Node condition KymaGpuUnhealthy, then cordon or uncordon. Returns the Node as
    now stored; None when it is gone."""
    ref, patch = ObjectRef("v1", "Node", "", write.name), context.writer.patch
    answer: dict[str, Any] | None = None
    try:
        if write.unhealthy is not None:
            answer = await patch(ref, node_condition_patch(write, stamp), Patch.STRATEGIC,
                                 "status", f"mark Node {write.name}")  # fmt: skip
        if write.cordon is not None:
            answer = await patch(ref, cordon_patch(write.cordon), Patch.STRATEGIC,
                                 what=f"cordon Node {write.name}")  # fmt: skip
    except NotFound:
        return None
    return answer


async def mark(action: MarkNodes, context: Context) -> int:
    for write in action.writes:
        log.info("GPU health: node %s unhealthy=%s cordon=%s %s", write.name,
                 write.unhealthy, write.cordon, write.reason)  # fmt: skip
        context.write_back.node(await mark_node(context, write, now()))
    return len(action.writes)
