"""Leader election on a Lease: who writes, when a follower takes over, and that two replicas
never both may write. Driven with an in-memory Lease and a hand-moved clock."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from kyma_gpu.errors import classify
from kyma_gpu.reconcile.election import (
    LEASE_DURATION,
    RENEW_DEADLINE,
    RETRY,
    Elector,
    LeaseFacts,
    Move,
    Seen,
    decide,
    why,
)

_VERSIONS = itertools.count(1)


@dataclass
class FakeLeases:
    body: dict[str, Any] | None = None
    down: bool = False
    writes: list[tuple[str, str]] = field(default_factory=list)

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.down:
            raise classify("get Lease", 503, "Unavailable", "down")
        return self.body

    async def write_lease(
        self, namespace: str, name: str, spec: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        if self.down:
            raise classify("write Lease", 503, "Unavailable", "down")
        current = self.body["metadata"]["resourceVersion"] if self.body else None
        if resource_version != current:
            raise classify("write Lease", 409, "Conflict", "modified")
        self.body = {"metadata": {"resourceVersion": str(next(_VERSIONS))}, "spec": dict(spec)}
        self.writes.append((str(spec.get("holderIdentity")), str(self.body["metadata"])))
        return self.body


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pair() -> tuple[FakeLeases, Clock, Elector, Elector]:
    api, clock = FakeLeases(), Clock()
    a = Elector(api, "kyma-system", "lease", "a", clock=clock)
    b = Elector(api, "kyma-system", "lease", "b", clock=clock)
    return api, clock, a, b


def _tick(clock: Clock, *electors: Elector, seconds: float = RETRY) -> None:
    clock.now += seconds
    for elector in electors:
        asyncio.run(elector.try_once())


@pytest.mark.parametrize(
    ("holder", "seen_for", "move"),
    [(None, 0, Move.CREATE), ("me", 0, Move.RENEW), ("", 0, Move.TAKE_OVER),
     ("other", LEASE_DURATION - 0.1, Move.WAIT), ("other", LEASE_DURATION, Move.TAKE_OVER)],
)  # fmt: skip
def test_decide(holder: str | None, seen_for: float, move: Move) -> None:
    lease = None if holder is None else LeaseFacts(holder, LEASE_DURATION, 0, "7")
    seen = Seen("7", 100.0)
    assert decide(lease, "me", seen, 100.0 + seen_for) is move


def test_one_leads_the_other_follows() -> None:
    _, clock, a, b = _pair()
    _tick(clock, a, b)
    assert a.may_write()
    assert not b.may_write()
    for _ in range(20):  # a keeps renewing: b never takes over
        _tick(clock, a, b)
        assert a.may_write()
        assert not b.may_write()


def test_after_a_kill_the_follower_takes_over_within_the_bound_and_never_overlaps() -> None:
    _, clock, a, b = _pair()
    _tick(clock, a, b)
    killed = clock.now
    waited = 0.0
    while not b.may_write():  # a is dead: only b tries
        _tick(clock, b)
        waited = clock.now - killed
        assert waited <= LEASE_DURATION + 2 * RETRY
    assert waited >= RENEW_DEADLINE  # a, had it lived unrenewed, stopped writing before this


def test_a_leader_that_cannot_renew_stops_writing_before_anyone_takes_over() -> None:
    api, clock, a, b = _pair()
    _tick(clock, a, b)
    partitioned_at = clock.now
    lost_at = None
    while not b.may_write():
        api.down = True  # a's requests fail ...
        clock.now += RETRY
        asyncio.run(a.try_once())
        if not a.may_write() and lost_at is None:
            lost_at = clock.now
        api.down = False  # ... while b reaches the API server
        asyncio.run(b.try_once())
    assert lost_at is not None
    assert lost_at - partitioned_at <= RENEW_DEADLINE + RETRY
    assert lost_at < clock.now  # a stopped before b started: never two writers


def test_a_graceful_stop_hands_over_at_the_next_try() -> None:
    _, clock, a, b = _pair()
    _tick(clock, a, b)
    asyncio.run(a.release())
    assert not a.may_write()
    _tick(clock, b)
    assert b.may_write()


def test_a_lost_race_is_no_leadership() -> None:
    """b read the Lease before a created it; b's create then conflicts, and b follows."""
    api, _clock, a, b = _pair()
    asyncio.run(a.try_once())

    class Stale(FakeLeases):
        async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
            return None  # what b read a moment ago

    stale = Stale()
    stale.write_lease = api.write_lease  # type: ignore[method-assign]
    b.api = stale
    asyncio.run(b.try_once())
    assert a.may_write()
    assert not b.may_write()


def test_a_takeover_says_whether_the_lease_was_released_or_expired() -> None:
    released = LeaseFacts(holder="", duration_seconds=1, transitions=3, resource_version="9")
    held = LeaseFacts(holder="pod-b", duration_seconds=12, transitions=3, resource_version="9")
    assert why(Move.TAKE_OVER, released) == "TakeOver: released"
    assert why(Move.TAKE_OVER, held) == "TakeOver: expired, held by pod-b"
    assert why(Move.CREATE, None) == "Create"
