"""GPU health's Events (its `Report.news`): a status write that turns GPUs unhealthy,
adds an unhealthy node or changes the main finding posts a Warning; all recovered, a Normal.
Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kyma_gpu.extensions.node_marks.conditions import Conditions
from kyma_gpu.facts.echo import echoed_reason
from kyma_gpu.status.events import EventType, GpuEvent, condition_of, event_message


def _health(status: Mapping[str, Any]) -> tuple[str, str, frozenset[str]]:
    """GpusHealthy's status and reason, and the unhealthy nodes the status names."""
    cond = condition_of(status, Conditions.GPUS_HEALTHY)
    nodes = status.get("unhealthyNodes") or ()
    names = frozenset(str(n.get("name")) for n in nodes if isinstance(n, Mapping))
    return str(cond.get("status") or ""), echoed_reason(str(cond.get("reason") or "")), names


def health_event(before: Mapping[str, Any], after: Mapping[str, Any]) -> GpuEvent | None:
    """GPU health's transitions: a Warning when GPUs turn unhealthy, when another node joins
    the unhealthy ones or the main finding changes; a Normal GpusHealthy when all recovered.
    A node that recovers while others stay unhealthy, and moving counts, post nothing."""
    was, was_reason, was_bad = _health(before)
    now, reason, bad = _health(after)
    message = str(condition_of(after, Conditions.GPUS_HEALTHY).get("message") or "")
    if now == "False" and (was != "False" or reason != was_reason or not bad <= was_bad):
        return GpuEvent(EventType.WARNING, reason, event_message(message))
    if now == "True" and was == "False":
        return GpuEvent(EventType.NORMAL, reason, event_message(message))
    return None
