"""Which status change deserves a Kubernetes Event on the Gpu. Pure.

An Event is posted when the state or the Ready reason changes, and during a deletion also when
what it waits for changes (the pods named, Flux objects left). Messages and counts that merely
move do not post, so a rollout makes no Event storm; `kubectl describe gpu gpu` shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kyma_gpu.api.models import GpuState

EVENTS_NAMESPACE = "default"
"""The API server keeps Events about cluster-scoped objects (the Gpu, like a Node) in
`default`; `kubectl describe gpu gpu` finds them there."""
MESSAGE_LIMIT = 1024
"""The API server refuses longer Event messages."""


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class GpuRef:
    """The Gpu an Event is about."""

    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class GpuEvent:
    type: EventType
    reason: str
    message: str


def _ready(status: Mapping[str, Any]) -> Mapping[str, Any]:
    conditions = status.get("conditions") or ()
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def _key(status: Mapping[str, Any]) -> tuple[Any, ...]:
    ready = _ready(status)
    deleting = status.get("state") == GpuState.DELETING or ready.get("reason") == "Deleting"
    return (status.get("state"), ready.get("reason"), status.get("message") if deleting else None)


def event_for(before: Mapping[str, Any], after: Mapping[str, Any]) -> GpuEvent | None:
    """The Event for a status write from `before` to `after` (both as the API stores them)."""
    if not after or _key(before) == _key(after):
        return None
    state = after.get("state")
    warn = state in (GpuState.ERROR, GpuState.WARNING)
    reason = str(_ready(after).get("reason") or state or "StatusChanged")
    message = str(after.get("message") or f"state {state}")
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 3] + "..."
    return GpuEvent(EventType.WARNING if warn else EventType.NORMAL, reason, message)
