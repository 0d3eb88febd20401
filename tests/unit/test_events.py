"""Events on the Gpu: one per transition, one per change of what a deletion waits for."""

from __future__ import annotations

from typing import Any

from kyma_gpu.status.events import MESSAGE_LIMIT, EventType, event_for


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
    after = status("Warning", "Deleting", "deletion waits for 1 pods that use GPUs: ml/b")
    event = event_for(before, after)
    assert event is not None
    assert event.message.endswith("ml/b")
    assert event_for(after, after) is None


def test_first_status_posts_and_long_messages_are_cut() -> None:
    event = event_for({}, status("Error", "Error", "x" * 5000))
    assert event is not None
    assert len(event.message) == MESSAGE_LIMIT
    assert event_for({}, {}) is None
