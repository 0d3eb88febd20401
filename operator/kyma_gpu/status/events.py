"""Which status change deserves a Kubernetes Event on the Gpu. Pure.

An Event is posted when the state or the Ready reason changes, and during a deletion also when
what it waits for changes (the pods named, Flux objects left). Preflight findings (Preflight
False) and Flux failures (ReleaseReady or SourceReady False for a failure, not for progress)
post a Warning with their own reason when they appear or their reason or message changes.
Messages and counts that merely move do not post, and what stays as it is never posts again,
so a rollout makes no Event storm; `admit` bounds the rest and drops a Warning said lately.

Where: the Gpu is cluster-scoped, and the API server keeps an Event about an object without a
namespace only in `default`, where anyone with a RoleBinding there reads it. The Events go to
the module's namespace (kyma-system) instead, with that namespace in their involvedObject, as
kopf posts its own about cluster-scoped objects; so `kubectl describe gpu gpu` (which looks for
an involvedObject without a namespace) does not list them, and `kubectl events -n kyma-system
--for gpu/gpu` does. An extension's `Report.redact` keeps out what an Event may not say of the
status message (the names of users' pods: a reader of kyma-system's Events need not be one who
may list pods everywhere).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from kyma_gpu.api.conditions import ReadyReason, ReleaseReason
from kyma_gpu.api.models import GpuState
from kyma_gpu.facts.echo import cut, echoed_reason
from kyma_gpu.plan.actions import LiveObject
from kyma_gpu.status.aggregate import ConditionType, StatusHook, flux_failed

MESSAGE_LIMIT = 1024
"""The API server refuses longer Event messages (an Event's reason is cut to
facts.echo.REASON_LIMIT, which it also bounds)."""
EVENT_BUDGET = 30
"""At most this many Events per Gpu within EVENT_WINDOW_SECONDS; the rest are dropped (and
logged): the status says it all anyway."""
EVENT_WINDOW_SECONDS = 600.0
FINDINGS = (ConditionType.PREFLIGHT, ConditionType.RELEASE_READY, ConditionType.SOURCE_READY)
"""The conditions whose failures post an Event of their own."""
_NOT_FLUX = frozenset({ReleaseReason.NOT_APPLIED})
"""ReleaseReady=False reasons that are no Flux failure (the plan's errors are Preflight's)."""


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


@dataclass(frozen=True, slots=True)
class Report:
    """What an extension says of the Gpu (`Extension.status`): its part of the status, the
    conditions it writes, and its part of the Events of a status write."""

    part: StatusHook
    """Its part of the status (status/aggregate.py): conditions after the core's, the
    deletion's waits, GpuStatus fields. Pure."""
    conditions: Mapping[StrEnum, type[StrEnum]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """The conditions `part` writes, each with the enum of its reasons (the CRD reference
    lists them with the core's)."""
    news: Callable[[Mapping[str, Any], Mapping[str, Any]], GpuEvent | None] | None = None
    """Its own news from the status before and after a write: an Event, or None."""
    redact: Callable[[str], str] | None = None
    """What an Event may not say of the status message: the message without it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "conditions", MappingProxyType(dict(self.conditions)))


def condition_of(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    """A condition of a status as the API stores it; empty if there is none."""
    conditions = status.get("conditions") or ()
    return next((c for c in conditions if c.get("type") == type_), {})


def _ready(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return condition_of(status, "Ready")


def event_message(message: str) -> str:
    """An Event's message: cut to MESSAGE_LIMIT."""
    return cut(message, MESSAGE_LIMIT)


def _fields(live: LiveObject) -> str:
    return ", ".join(
        f"{f.dotted} (by {echoed_reason(f.manager) or 'a nameless manager'})" for f in live.foreign
    )


FOREIGN_REMOVED = "ForeignChangesRemoved"
"""The reason of the Warning that the module removed what others wrote to its Flux objects."""


def foreign_removed(objects: Sequence[LiveObject]) -> GpuEvent:
    """The Warning that names what others wrote to the module's Flux objects, and who."""
    said = "; ".join(f"{o.kind} {o.namespace}/{o.name}: {_fields(o)}" for o in objects)
    message = (
        f"removed what other field managers wrote to the module's Flux objects: {said}. Only "
        "the Gpu sets what Flux installs on GPU nodes: change the Gpu's spec instead "
        "(docs/security.md#the-gpu-alone-steers-the-release)"
    )
    return GpuEvent(EventType.WARNING, FOREIGN_REMOVED, event_message(message))


def _message(status: Mapping[str, Any], parts: Sequence[Report]) -> str:
    """The status message as an Event may say it: as the extensions redact it (workload
    protection: without users' pod names)."""
    message = str(status.get("message") or f"state {status.get('state')}")
    for part in parts:
        message = part.redact(message) if part.redact is not None else message
    return message


def _key(status: Mapping[str, Any], parts: Sequence[Report]) -> tuple[Any, ...]:
    ready = _ready(status)
    reason = ready.get("reason")
    deleting = status.get("state") == GpuState.DELETING or reason == ReadyReason.DELETING
    return (status.get("state"), reason, _message(status, parts) if deleting else None)


def event_for(
    before: Mapping[str, Any], after: Mapping[str, Any], parts: Sequence[Report] = ()
) -> GpuEvent | None:
    """The Event for a status write from `before` to `after` (both as the API stores them)."""
    if not after or _key(before, parts) == _key(after, parts):
        return None
    state = after.get("state")
    warn = state in (GpuState.ERROR, GpuState.WARNING)
    reason = echoed_reason(str(_ready(after).get("reason") or state or "StatusChanged"))
    return GpuEvent(EventType.WARNING if warn else EventType.NORMAL, reason,
                    event_message(_message(after, parts)))  # fmt: skip


def _failure(status: Mapping[str, Any], type_: ConditionType) -> tuple[str, str] | None:
    """(reason, message) of a preflight finding or a Flux failure in this condition."""
    cond = condition_of(status, type_)
    if cond.get("status") != "False":
        return None
    reason = echoed_reason(str(cond.get("reason") or type_))
    message = str(cond.get("message") or "")
    if type_ is ConditionType.PREFLIGHT:
        return reason, message
    if reason in _NOT_FLUX or not flux_failed(reason, message):
        return None
    return reason, message


@dataclass(frozen=True, slots=True)
class News:
    """What a status write has to tell: the transition, and new findings or failures."""

    transition: GpuEvent | None = None
    findings: tuple[GpuEvent, ...] = ()


def events_for(
    before: Mapping[str, Any], after: Mapping[str, Any], parts: Sequence[Report] = ()
) -> News:
    """The news of a status write from `before` to `after` (both as the API stores them):
    the transition (event_for), each finding or failure that is new by reason and message,
    and the extensions' news (`parts`)."""
    if not after:
        return News()
    found = tuple(
        GpuEvent(EventType.WARNING, now[0], event_message(now[1]))
        for type_ in FINDINGS
        if (now := _failure(after, type_)) is not None and now != _failure(before, type_)
    )
    news = (part.news(before, after) for part in parts if part.news is not None)
    return News(event_for(before, after, parts), (*found, *(n for n in news if n is not None)))


@dataclass(frozen=True, slots=True)
class Sent:
    """An Event posted on a Gpu, at a monotonic time."""

    at: float
    reason: str
    message: str


def admit(sent: tuple[Sent, ...], event: GpuEvent, clock: float) -> tuple[Sent, ...] | None:
    """The Gpu's recent Events with `event` posted at `clock`; None when it must not be: the
    budget of the window is spent, or it is a Warning posted already within the window (a
    failure that flaps between two messages posts each once)."""
    recent = tuple(s for s in sent if clock - s.at < EVENT_WINDOW_SECONDS)
    said = (event.reason, event.message)
    repeated = event.type is EventType.WARNING and any(
        (s.reason, s.message) == said for s in recent
    )
    if repeated or len(recent) >= EVENT_BUDGET:
        return None
    return (*recent, Sent(clock, event.reason, event.message))


def to_post(
    sent: tuple[Sent, ...], news: News, clock: float
) -> tuple[list[GpuEvent], tuple[Sent, ...]]:
    """The Events to post now, and the Gpu's recent Events with them: each finding that
    `admit` lets through, and the transition first, unless one of those says the same."""
    posted: list[GpuEvent] = []
    for event in news.findings:
        admitted = admit(sent, event, clock)
        if admitted is not None:
            sent = admitted
            posted.append(event)
    transition = news.transition
    if transition is not None and all(e.message != transition.message for e in posted):
        admitted = admit(sent, transition, clock)
        if admitted is not None:
            sent = admitted
            posted.insert(0, transition)
    return posted, sent
