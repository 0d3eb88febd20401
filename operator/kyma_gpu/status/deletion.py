"""What a deletion of the Gpu waits for, said in conditions. Pure.

A deletion waits, in this order, for:

1. what the extensions' status parts wait for (their `StatusPart.waits`, each a condition of
   their own);
2. Flux to uninstall the chart (Uninstalled). helm-controller removes the HelmRelease's
   finalizer once the release is gone. If it has not within the HelmRelease's uninstall timeout
   plus a grace period, helm-controller is missing or failing: the Gpu turns Error and names the
   next step (docs/troubleshooting.md, "A deletion waits for Flux").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType

from kyma_gpu.api.conditions import ConditionType, UninstallReason
from kyma_gpu.api.models import ConditionStatus, GpuState

UNINSTALL_GRACE_SECONDS = 60.0
"""Added to the HelmRelease's uninstall timeout before a deletion counts as stalled."""
DEFAULT_UNINSTALL_TIMEOUT = "5m"
"""helm-controller's default when the HelmRelease sets neither uninstall.timeout nor timeout."""
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT_SECONDS = MappingProxyType({"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001})


@dataclass(frozen=True, slots=True)
class Uninstall:
    """Our Flux objects that are being deleted: those within the bound, and those past it."""

    pending: tuple[str, ...] = ()
    """kind/namespace/name of objects deleting for less than the bound."""
    stalled: tuple[str, ...] = ()
    """... and of those deleting for longer."""
    since: str = ""
    """The earliest deletionTimestamp among them."""
    bound_seconds: float = 0.0
    next_stall_in: float | None = None
    """Seconds until the next pending object passes the bound: look again then."""


@dataclass(frozen=True, slots=True)
class Wait:
    """What the deletion shows: one condition (type, status, reason, message) and the state."""

    type: StrEnum
    """Uninstalled (`ConditionType`), or an extension's condition."""
    status: ConditionStatus
    reason: StrEnum
    """One of the condition's reasons (`UninstallReason`, or the extension's enum)."""
    message: str
    state: GpuState


def go_duration_seconds(text: str) -> float | None:
    """Seconds of a Go duration ("5m", "1h30m", "90s", "2m0.5s"); None if it is not one."""
    text = text.strip()
    parts = _DURATION_PART.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def parse_time(stamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None


def uninstall_wait(uninstall: Uninstall) -> Wait | None:
    if uninstall.stalled:
        bound = round(uninstall.bound_seconds)
        return Wait(
            ConditionType.UNINSTALLED, "False", UninstallReason.UNINSTALL_STALLED,
            f"Flux has not removed {', '.join(uninstall.stalled)} within {bound}s (deleting "
            f"since {uninstall.since}): helm-controller or source-controller is missing or "
            "failing. Check `flux get helmreleases -A` and the controllers' logs; to give up "
            "on the chart's objects, remove the finalizers of the objects named here "
            "(docs/troubleshooting.md, \"A deletion waits for Flux\")",
            GpuState.ERROR,
        )  # fmt: skip
    if uninstall.pending:
        return Wait(
            ConditionType.UNINSTALLED, "False", UninstallReason.UNINSTALL_IN_PROGRESS,
            f"Flux is uninstalling the GPU stack: waiting for {', '.join(uninstall.pending)}",
            GpuState.DELETING,
        )  # fmt: skip
    return None


@dataclass(frozen=True, slots=True)
class Deleting:
    """A Flux object of ours with a deletionTimestamp."""

    ref: str
    """kind/namespace/name"""
    since: str
    uninstall_timeout: str | None = None
    """The HelmRelease's spec.uninstall.timeout (or spec.timeout); None for the sources."""


def uninstall_of(objects: tuple[Deleting, ...], now: str) -> Uninstall:
    """Sort the deleting objects into pending and stalled by how long they have been at it."""
    if not objects:
        return Uninstall()
    timeouts = [go_duration_seconds(o.uninstall_timeout or "") for o in objects]
    default = go_duration_seconds(DEFAULT_UNINSTALL_TIMEOUT) or 0.0
    bound = max((t for t in timeouts if t is not None), default=default) + UNINSTALL_GRACE_SECONDS
    clock = parse_time(now)
    pending: list[str] = []
    stalled: list[str] = []
    left: list[float] = []
    for obj in objects:
        started = parse_time(obj.since)
        age = (clock - started).total_seconds() if clock and started else 0.0
        (stalled if age > bound else pending).append(obj.ref)
        if age <= bound:
            left.append(bound - age)
    since = min(o.since for o in objects)
    return Uninstall(tuple(pending), tuple(stalled), since, bound, min(left, default=None))
