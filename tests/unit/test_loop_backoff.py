"""The informers' backoff by cause, as a pure function (observe/informer.py `Backoff`): fast
while a CRD that exists is still starting (404), client-go's doubling up to 30 s for the API
server and the network, started over after two minutes without an error. And the loop's
retries of failed writes (reconcile/effects.py `Retries`)."""

from __future__ import annotations

import pytest

from kyma_gpu.errors import ApiError, classify
from kyma_gpu.observe.informer import Backoff, Cause, WatchSettings
from kyma_gpu.reconcile.effects import Retries

SETTINGS = WatchSettings()


def waits(
    cause: Cause, count: int, every: float = 0.0, backoff: Backoff | None = None
) -> list[float]:
    """The waits after `count` errors of `cause`, `every` seconds apart."""
    state, clock, out = backoff or Backoff(), 1000.0, []
    for _ in range(count):
        delay, state = state.failed(cause, clock, SETTINGS)
        out.append(delay)
        clock += delay + every
    return out


def _attempts(retries: Retries, name: str) -> int:
    failure = retries.failures.get(name)
    return failure.attempts if failure is not None else 0


def test_a_starting_crd_is_asked_again_fast() -> None:
    assert waits(Cause.STARTING, 8) == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_server_errors_double_up_to_30_seconds() -> None:
    assert waits(Cause.SERVER, 10) == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_the_first_server_waits_are_the_fast_ones() -> None:
    """A CRD whose storage reinitializes answers 429 for a moment: as fast as before."""
    assert waits(Cause.SERVER, 5) == waits(Cause.STARTING, 5)


def test_an_outage_of_minutes_is_asked_every_30_seconds() -> None:
    delays = waits(Cause.SERVER, 1000)
    assert max(delays) == SETTINGS.error_backoff_cap
    assert delays[-1] == 30.0  # no overflow however long it lasts


def test_two_quiet_minutes_start_the_server_waits_over() -> None:
    _, state = Backoff().failed(Cause.SERVER, 0.0, SETTINGS)
    for clock in (1.0, 2.0, 4.0, 8.0, 16.0):
        _, state = state.failed(Cause.SERVER, clock, SETTINGS)
    assert state.server == 6
    healthy = state.succeeded()
    soon, _ = healthy.failed(Cause.SERVER, 16.0 + 119.0, SETTINGS)
    assert soon == 16.0  # the seventh wait: a good watch alone is not two minutes of health
    later, after = healthy.failed(Cause.SERVER, 16.0 + 120.0, SETTINGS)
    assert later == 0.25
    assert after.server == 1


def test_a_good_watch_starts_the_errors_in_a_row_over() -> None:
    """The count that decides when a 404 means 'not served' (unserved_after)."""
    _, state = Backoff().failed(Cause.STARTING, 0.0, SETTINGS)
    _, state = state.failed(Cause.STARTING, 1.0, SETTINGS)
    assert state.in_a_row == 2
    assert state.succeeded().in_a_row == 0
    delay, _ = state.succeeded().failed(Cause.STARTING, 2.0, SETTINGS)
    assert delay == 0.25


@pytest.mark.parametrize("cause", list(Cause))
def test_every_error_counts_in_a_row(cause: Cause) -> None:
    _, state = Backoff().failed(cause, 0.0, SETTINGS)
    assert state.in_a_row == 1
    assert state.last_error == 0.0


def test_settings_shape_the_waits() -> None:
    fast = WatchSettings(error_backoff=1.0, error_backoff_cap=3.0, starting_backoff=(0.1,))
    state, delays = Backoff(), []
    for clock in range(4):
        delay, state = state.failed(Cause.SERVER, float(clock), fast)
        delays.append(delay)
    assert delays == [1.0, 2.0, 3.0, 3.0]
    assert state.failed(Cause.STARTING, 5.0, fast)[0] == 0.1


# -- the retries of failed writes (reconcile/effects.py `Retries`) --


def _err(status: int) -> ApiError:
    return classify("apply HelmRelease", status, "Injected", "injected")


def test_a_transient_write_failure_waits_longer_each_attempt() -> None:
    retries = Retries()
    waits = [retries.failed("gpu", "k", _err(429), 100.0).retry_at - 100.0 for _ in range(7)]
    assert waits == [1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 60.0]
    assert _attempts(retries, "gpu") == 7


def test_a_permanent_write_failure_starts_at_30_seconds() -> None:
    retries = Retries()
    first = retries.failed("gpu", "k", _err(403), 0.0)
    assert (first.permanent, first.retry_at) == (True, 30.0)
    assert retries.failed("gpu", "k", _err(403), 0.0).retry_at == 60.0


def test_other_writes_start_the_attempts_over_and_a_success_forgets() -> None:
    retries = Retries()
    retries.failed("gpu", "k", _err(500), 0.0)
    retries.failed("gpu", "k", _err(500), 0.0)
    assert retries.failed("gpu", "other", _err(500), 0.0).attempts == 1
    assert _attempts(retries, "another-gpu") == 0
    retries.forget("gpu")
    assert _attempts(retries, "gpu") == 0
    assert retries.failures == {}
