"""Node marks' action, carried out through the adapter: each Node's condition and cordon."""

from __future__ import annotations

import logging

from kyma_gpu.extensions.base import Context
from kyma_gpu.extensions.node_marks.machine import MarkNodes
from kyma_gpu.reconcile.effects import now

log = logging.getLogger(__name__)


async def mark(action: MarkNodes, context: Context) -> int:
    for write in action.writes:
        log.info("GPU health: node %s unhealthy=%s cordon=%s %s", write.name,
                 write.unhealthy, write.cordon, write.reason)  # fmt: skip
        context.write_back.node(await context.writer.mark_node(write, now()))
    return len(action.writes)
