"""Every timing and limit of the operator process in one object, as kopf's OperatorSettings.

`Settings` groups them by who uses them; handlers.start builds it once and hands each part to
what it starts (the informers, the loop, the elector, kopf). Tests pass settings of their own
instead of patching module constants. Each field says why it has its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kyma_gpu.observe.informer import WatchSettings


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """The reconcile loop (reconcile/loop.py)."""

    retry_seconds: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
    """After a failed write, by attempt; the last one repeats. Transient errors start at the
    front, permanent ones at `permanent_from`."""
    permanent_from: int = 4
    """The index in `retry_seconds` where permanent errors (403, 422, ...) start: 30 s."""
    failed_pass_seconds: float = 5.0
    """After a pass that raised (a bug): kopf starts the Gpu's daemon again after this long."""
    exit_check_seconds: float = 1.0
    """While a Gpu's deletion runs, its daemon looks this often whether the operator exits
    (kopf's daemon flag fires once, for the deletion: handlers.py DaemonStop)."""
    max_steps: int = 8
    """Steps in one pass: apply, remove, status make three; more means something fights us."""
    burst_seconds: float = 0.05
    """After a wake-up, let the events of one burst arrive before the pass."""
    status_seconds: float = 1.0
    """At most one status write per this interval while only messages and counts change: a
    rollout changes DaemonSet counts every few dozen milliseconds. A transition (the state, or
    a condition's status or reason) is written at once; the coalesced write follows when the
    interval is over."""
    status_retry_seconds: float = 1.0
    """After a failed status write: write it again after this long at the latest."""
    sync_report_seconds: float = 5.0
    """While the first lists are awaited, say which every this many seconds."""
    follower_seconds: float = 0.25
    """How often a follower checks whether it leads now."""
    resync_seconds: float = 300.0
    """The periodic safety pass: this long after the last one, the leader reads the module's
    Flux objects again (a GET each) and reconciles, even if no event came. It writes nothing
    when nothing differs; it repairs what a lost event or a store that went wrong would leave
    (the store once kept a deleted HelmRepository for ever). Five minutes: a few requests
    per interval, while Flux's own drift detection looks inside the release."""
    freeze_heap: bool = True
    """After the first pass, collect once and freeze what survived (observe.informer.freeze_heap):
    no later collection walks the facts of every Node again. Off in tests that run many loops in
    one process."""


@dataclass(frozen=True, slots=True)
class ElectionSettings:
    """Leader election on a Lease (reconcile/election.py), with client-go's rules."""

    lease_name: str = "kyma-gpu-manager"
    """The Lease in the module's namespace."""
    lease_duration: int = 12
    """A follower takes over once the Lease has not changed for this long (its own clock)."""
    renew_deadline: float = 8.0
    """The holder stops writing when it could not renew for this long: less than
    `lease_duration`, so that two writers never overlap."""
    retry: float = 2.0
    """The holder renews, and a follower looks, every this many seconds."""


@dataclass(frozen=True, slots=True)
class KopfSettings:
    """kopf's part: its own API requests (handlers.py). It serves no resource; it reads the
    API's discovery once, at its start."""

    request_backoffs: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 5.0, 8.0)
    """kopf's retries of a failed request, then `request_backoff_forever` for as long as it
    takes: a finite list (kopf's default) ends the operator after about a minute without an
    API server, and an outage of minutes must be waited out (tests/e2e/test_outage.py)."""
    request_backoff_forever: float = 10.0


@dataclass(frozen=True, slots=True)
class Settings:
    watching: WatchSettings = field(default_factory=WatchSettings)
    loop: LoopSettings = field(default_factory=LoopSettings)
    election: ElectionSettings = field(default_factory=ElectionSettings)
    kopf: KopfSettings = field(default_factory=KopfSettings)
