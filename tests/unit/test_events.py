"""Events on the Gpu: one per transition, one per change of what a deletion waits for, one per
new preflight finding or Flux failure; a budget bounds them."""

from __future__ import annotations

from typing import Any

from kyma_gpu.status.events import (
    EVENT_BUDGET,
    EVENT_WINDOW_SECONDS,
    MESSAGE_LIMIT,
    EventType,
    GpuEvent,
    Sent,
    admit,
    event_for,
    events_for,
    to_post,
)


def status(state: str, reason: str, message: str = "m") -> dict[str, Any]:
    ready = {"type": "Ready", "status": "True" if state == "Ready" else "False", "reason": reason}
    return {"state": state, "message": message, "conditions": [ready]}


def test_a_transition_posts_one_event() -> None:
    event = event_for(status("Processing", "Processing"), status("Ready", "Ready", "installed"))
    assert event is not None
    assert (event.type, event.reason, event.message) == (EventType.NORMAL, "Ready", "installed")


def test_errors_and_warnings_post_warning_events() -> None:
    for state in ("Error", "Warning"):
        event = event_for(status("Ready", "Ready"), status(state, "Error", "boom"))
        assert event is not None
        assert event.type is EventType.WARNING


def test_a_message_that_merely_moves_posts_nothing() -> None:
    before = status("Processing", "Processing", "3/5 DaemonSets ready")
    assert event_for(before, status("Processing", "Processing", "4/5 DaemonSets ready")) is None


def test_during_a_deletion_each_new_wait_posts() -> None:
    before = status("Warning", "Deleting", "deletion waits for 2 pods that use GPUs: ml/a, ml/b")
    after = status("Warning", "Deleting", "deletion waits for 1 pod that uses GPUs: ml/b")
    event = event_for(before, after)
    assert event is not None
    assert event.message.endswith("ml/b")
    assert event_for(after, after) is None


def test_first_status_posts_and_long_messages_are_cut() -> None:
    event = event_for({}, status("Error", "Error", "x" * 5000))
    assert event is not None
    assert len(event.message) == MESSAGE_LIMIT
    assert event_for({}, {}) is None


NO_IMAGE = (
    "node gl-3: installer release 1.17.0 excludes driver 570.211.01 on Garden Linux 2150.8.0 "
    "(>= 2150.8.0): 570.x is incompatible"
)
CHART_MISSING = (
    "HelmRelease kyma-system/gpu-operator: HelmChart 'kyma-system/kyma-system-gpu-operator' is "
    "not ready: invalid chart reference: no 'gpu-operator' chart with version matching 'v99.0.0'"
)


def posted(before: dict[str, Any], after: dict[str, Any]) -> list[GpuEvent]:
    """What the loop posts for a status write, with no Event posted before."""
    return to_post((), events_for(before, after), 0.0)[0]


def with_conditions(base: dict[str, Any], *conditions: tuple[str, str, str, str]) -> dict[str, Any]:
    extra = [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]
    return {**base, "conditions": [*base["conditions"], *extra]}


def test_a_preflight_finding_posts_a_warning_with_its_reason_once() -> None:
    ready = status("Ready", "Ready", "installed")
    found = with_conditions(
        status("Warning", "Ready", NO_IMAGE), ("Preflight", "False", "NoDriverImage", NO_IMAGE)
    )
    events = posted(ready, found)
    assert [(e.type, e.reason) for e in events] == [(EventType.WARNING, "NoDriverImage")]
    assert events[0].message == NO_IMAGE  # the transition says the same: posted once
    assert events_for(found, found).findings == ()
    assert posted(found, {**found, "message": "moved"}) == []  # unchanged finding: silent
    other = with_conditions(
        status("Warning", "Ready", NO_IMAGE), ("Preflight", "False", "NoDriverImage", "node x")
    )
    assert [e.message for e in posted(found, other)] == ["node x"]  # a new message posts


def test_a_flux_failure_posts_its_reason_and_progress_does_not() -> None:
    before = status("Processing", "Processing", "waiting")
    failed = with_conditions(
        status("Error", "Error", CHART_MISSING),
        ("ReleaseReady", "False", "SourceNotReady", CHART_MISSING),
    )
    events = posted(before, failed)
    assert [(e.type, e.reason, e.message) for e in events] == [
        (EventType.WARNING, "SourceNotReady", CHART_MISSING)
    ]
    assert posted(failed, failed) == []
    catching_up = with_conditions(
        before,
        ("ReleaseReady", "False", "SourceNotReady",
         "HelmRelease kyma-system/gpu-operator: HelmChart 'x' is not ready: latest generation of "
         "object has not been reconciled"),
    )  # fmt: skip
    assert posted(before, catching_up) == []
    progressing = with_conditions(before, ("ReleaseReady", "False", "Progressing", "installing"))
    assert posted(before, progressing) == []
    plan_errors = with_conditions(before, ("ReleaseReady", "False", "NotApplied", "plan errors"))
    assert posted(before, plan_errors) == []  # Preflight's to say
    source = with_conditions(
        status("Warning", "Ready", "HelmRepository down"),
        ("SourceReady", "False", "FetchFailed", "HelmRepository down"),
    )
    assert [e.reason for e in posted(status("Ready", "Ready"), source)] == ["FetchFailed"]


def test_a_transition_with_another_message_posts_both() -> None:
    before = status("Ready", "Ready", "installed")
    after = with_conditions(
        status("Error", "Error", "first error"), ("Preflight", "False", "NoDriverImage", "other")
    )
    assert [e.reason for e in posted(before, after)] == ["Error", "NoDriverImage"]
    assert posted(before, {}) == []


def test_a_transition_is_posted_when_its_finding_was_said_lately() -> None:
    """Error (570) -> Warning (the first finding again): the finding was posted a minute ago
    and is not posted again, but the transition to Warning is."""
    first = with_conditions(
        status("Warning", "Ready", NO_IMAGE), ("Preflight", "False", "NoDriverImage", NO_IMAGE)
    )
    error = with_conditions(
        status("Error", "Error", "e"), ("Preflight", "False", "NoDriverImage", "e")
    )
    events, sent = to_post((), events_for({}, first), 0.0)
    events, sent = to_post(sent, events_for(first, error), 30.0)
    assert [e.reason for e in events] == ["NoDriverImage"]
    events, sent = to_post(sent, events_for(error, first), 60.0)
    assert [(e.type, e.reason, e.message) for e in events] == [
        (EventType.WARNING, "Ready", NO_IMAGE)
    ]


def test_the_event_budget_is_bounded_per_window() -> None:
    sent: tuple[Sent, ...] = ()
    for n in range(EVENT_BUDGET):
        admitted = admit(sent, GpuEvent(EventType.NORMAL, "Ready", f"m{n}"), 100.0 + n)
        assert admitted is not None
        sent = admitted
    late = GpuEvent(EventType.NORMAL, "Ready", "late")
    assert admit(sent, late, 100.0 + EVENT_BUDGET) is None
    assert admit(sent, late, 100.0 + EVENT_WINDOW_SECONDS + 1) is not None  # the oldest aged out


def test_a_warning_said_lately_is_not_said_again() -> None:
    """A failure that flaps between two messages posts each once per window."""
    first = GpuEvent(EventType.WARNING, "SourceNotReady", "chart v99.0.0 not found")
    other = GpuEvent(EventType.WARNING, "SourceNotReady", "index not reachable")
    sent = admit((), first, 10.0)
    assert sent is not None
    sent = admit(sent, other, 20.0)
    assert sent is not None
    assert admit(sent, first, 30.0) is None
    assert admit(sent, first, 10.0 + EVENT_WINDOW_SECONDS) is not None
    ready = GpuEvent(EventType.NORMAL, "Ready", "ready")
    again = admit(admit((), ready, 1.0) or (), ready, 2.0)
    assert again is not None  # "Ready" again after a while is news
