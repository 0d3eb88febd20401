"""Leader election on a coordination.k8s.io/v1 Lease: of all replicas, one writes.

Every replica observes (its store is warm), but only the holder of the Lease reconciles. The
rules are client-go's, without trusting anyone's clock:

- the holder renews every RETRY seconds; if it has not renewed for RENEW_DEADLINE seconds, it
  stops writing at once and goes on as a follower (an API server outage: every replica waits,
  and the first to reach the API server again under the rules below writes);
- a follower takes the Lease over once it has seen the same Lease version for LEASE_DURATION
  seconds of its own clock (or when the Lease has no holder);
- RENEW_DEADLINE < LEASE_DURATION, so an old leader has stopped writing before anyone else may
  start: two writers never overlap;
- on a graceful stop the holder clears the Lease, so a follower takes over at its next try.

After a SIGKILL of the leader a follower takes over within LEASE_DURATION + 2 * RETRY (16 s).
The durations are `ElectionSettings` (reconcile/settings.py); the names above are its defaults.
`decide` is pure; `Elector` carries it out through a `LeaseApi` (kyma_gpu.adapter).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from kyma_gpu.errors import ApiError
from kyma_gpu.reconcile.settings import ElectionSettings

log = logging.getLogger(__name__)

_DEFAULTS = ElectionSettings()
LEASE_DURATION, RENEW_DEADLINE, RETRY = (
    _DEFAULTS.lease_duration, _DEFAULTS.renew_deadline, _DEFAULTS.retry
)  # fmt: skip
"""The default durations, by name (the tests' timelines read them)."""


class Move(StrEnum):
    CREATE = "Create"
    RENEW = "Renew"
    TAKE_OVER = "TakeOver"
    WAIT = "Wait"


@dataclass(frozen=True, slots=True)
class LeaseFacts:
    holder: str
    duration_seconds: int
    transitions: int
    resource_version: str


def lease_facts(body: Mapping[str, Any], default_duration: int = LEASE_DURATION) -> LeaseFacts:
    spec = body.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    transitions = spec.get("leaseTransitions")
    return LeaseFacts(
        holder=str(spec.get("holderIdentity") or ""),
        duration_seconds=duration if isinstance(duration, int) else default_duration,
        transitions=transitions if isinstance(transitions, int) else 0,
        resource_version=str((body.get("metadata") or {}).get("resourceVersion", "")),
    )


@dataclass(slots=True)
class Seen:
    """A follower's memory: the Lease version it last saw change, and when (its own clock)."""

    resource_version: str = ""
    since: float = 0.0

    def observe(self, lease: LeaseFacts | None, clock: float) -> None:
        version = lease.resource_version if lease else ""
        if version != self.resource_version:
            self.resource_version, self.since = version, clock


def decide(lease: LeaseFacts | None, me: str, seen: Seen, clock: float) -> Move:
    if lease is None:
        return Move.CREATE
    if lease.holder == me:
        return Move.RENEW
    if not lease.holder or clock - seen.since >= lease.duration_seconds:
        return Move.TAKE_OVER
    return Move.WAIT


def why(move: Move, lease: LeaseFacts | None) -> str:
    """The move, and for a takeover whether the holder released the Lease or let it expire."""
    if move is not Move.TAKE_OVER or lease is None:
        return str(move)
    return f"{move}: released" if not lease.holder else f"{move}: expired, held by {lease.holder}"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(
    lease: LeaseFacts | None, me: str, move: Move, duration: int = LEASE_DURATION
) -> dict[str, Any]:
    """The Lease spec that `move` writes (holder cleared when `me` is empty: a release)."""
    transitions = lease.transitions if lease else 0
    if move is Move.TAKE_OVER:
        transitions += 1
    spec: dict[str, Any] = {
        "holderIdentity": me or None,
        "leaseDurationSeconds": duration if me else 1,
        "leaseTransitions": transitions,
        "renewTime": _now(),
    }
    if move is not Move.RENEW:
        spec["acquireTime"] = spec["renewTime"]
    return spec


class LeaseApi(Protocol):
    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def write_lease(
        self, namespace: str, name: str, spec: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]: ...


@dataclass
class Elector:
    api: LeaseApi
    namespace: str
    name: str
    identity: str
    leading: bool = False
    renewed_at: float = 0.0
    seen: Seen = field(default_factory=Seen)
    clock: Callable[[], float] = time.monotonic
    settings: ElectionSettings = field(default_factory=ElectionSettings)

    def may_write(self) -> bool:
        """True while this replica holds the Lease and renewed it within the deadline."""
        return self.leading and self.clock() - self.renewed_at < self.settings.renew_deadline

    async def run(self, stopped: asyncio.Event) -> None:
        while not stopped.is_set():
            await self.try_once()
            if self.leading and not self.may_write():
                log.error("could not renew the Lease %s/%s for %.0fs: stepping down to follower",
                          self.namespace, self.name, self.settings.renew_deadline)  # fmt: skip
                self.leading = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), timeout=self.settings.retry)

    async def try_once(self) -> None:
        clock = self.clock()
        try:
            body = await self.api.get_lease(self.namespace, self.name)
        except ApiError as err:
            log.warning("reading the Lease failed: %s", err)
            return
        lease = self._facts(body)
        self.seen.observe(lease, clock)
        move = decide(lease, self.identity, self.seen, clock)
        if move is Move.WAIT:
            return
        version = lease.resource_version if lease else None
        try:
            spec = lease_spec(lease, self.identity, move, self.settings.lease_duration)
            await self.api.write_lease(self.namespace, self.name, spec, version)
        except ApiError as err:  # a conflict: someone else wrote first
            log.info("%s of the Lease did not go through: %s", move, err)
            return
        self.renewed_at = clock
        if not self.leading:
            self.leading = True
            log.info("leading: holding the Lease %s/%s as %s (%s)",
                     self.namespace, self.name, self.identity, why(move, lease))  # fmt: skip

    async def release(self) -> None:
        """Hand over at once: clear the holder, so a follower takes over at its next try."""
        if not self.leading:
            return
        self.leading = False
        try:
            lease = self._facts(await self.api.get_lease(self.namespace, self.name))
            if lease is not None and lease.holder == self.identity:
                await self.api.write_lease(self.namespace, self.name,
                                           lease_spec(lease, "", Move.RENEW),
                                           lease.resource_version)  # fmt: skip
                log.info("released the Lease %s/%s", self.namespace, self.name)
        except ApiError as err:
            log.warning("releasing the Lease failed (a follower waits for it to expire): %s", err)

    def _facts(self, body: Mapping[str, Any] | None) -> LeaseFacts | None:
        return lease_facts(body, self.settings.lease_duration) if body is not None else None
