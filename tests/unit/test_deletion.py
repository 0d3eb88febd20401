"""What a deletion waits for: durations, the uninstall bound, the wait messages. Pure."""

from __future__ import annotations

import pytest

from kyma_gpu.api.conditions import UninstallReason
from kyma_gpu.api.models import GpuState
from kyma_gpu.status.deletion import (
    UNINSTALL_GRACE_SECONDS,
    Deleting,
    go_duration_seconds,
    uninstall_of,
    uninstall_wait,
)

HR = "HelmRelease/kyma-system/gpu-operator"
REPO = "HelmRepository/kyma-system/gpu-operator"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300.0), ("10m0s", 600.0), ("1h30m", 5400.0), ("90s", 90.0), ("1m0.5s", 60.5),
     ("250ms", 0.25), ("", None), ("5", None), ("five minutes", None), ("5m junk", None)],
)  # fmt: skip
def test_go_durations(text: str, seconds: float | None) -> None:
    assert go_duration_seconds(text) == seconds


def test_nothing_deleting_waits_for_nothing() -> None:
    assert uninstall_wait(uninstall_of((), "2026-12-01T10:00:00Z")) is None


def test_within_the_bound_the_uninstall_is_in_progress() -> None:
    objects = (Deleting(HR, "2026-12-01T10:00:00Z", "5m"), Deleting(REPO, "2026-12-01T10:00:00Z"))
    uninstall = uninstall_of(objects, "2026-12-01T10:04:00Z")
    assert uninstall.pending == (HR, REPO)
    assert uninstall.stalled == ()
    assert uninstall.next_stall_in == 300 + UNINSTALL_GRACE_SECONDS - 240
    wait = uninstall_wait(uninstall)
    assert wait is not None
    assert (wait.reason, wait.state) == (UninstallReason.UNINSTALL_IN_PROGRESS, GpuState.DELETING)
    assert HR in wait.message
    assert REPO in wait.message


def test_past_the_bound_the_uninstall_is_stalled_and_says_what_to_do() -> None:
    objects = (Deleting(HR, "2026-12-01T10:00:00Z", "5m"),)
    uninstall = uninstall_of(objects, "2026-12-01T10:06:01Z")
    assert uninstall.stalled == (HR,)
    assert uninstall.next_stall_in is None
    wait = uninstall_wait(uninstall)
    assert wait is not None
    assert (wait.reason, wait.state) == (UninstallReason.UNINSTALL_STALLED, GpuState.ERROR)
    assert "within 360s" in wait.message
    assert "flux get helmreleases -A" in wait.message
    assert "A deletion waits for Flux" in wait.message


def test_the_default_bound_applies_without_a_timeout_and_bad_stamps_count_as_fresh() -> None:
    late = uninstall_of((Deleting(REPO, "2026-12-01T10:00:00Z"),), "2026-12-01T10:06:01Z")
    assert late.stalled == (REPO,)
    garbled = uninstall_of((Deleting(HR, "not a time", "bogus"),), "2026-12-01T10:06:01Z")
    assert garbled.pending == (HR,)
