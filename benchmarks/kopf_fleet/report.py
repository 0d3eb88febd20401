"""What an observer process tells the benchmark: JSON lines on its stdout (its log file)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

MARK = "KOPF-FLEET "
"""Every report line starts with this; the rest of the line is one JSON object."""


def say(event: str, **fields: Any) -> None:
    """One report: the event, the wall-clock time and the process's CPU seconds so far."""
    line = {"event": event, "at": time.time(), "cpu": time.process_time(), **fields}
    print(MARK + json.dumps(line, separators=(",", ":")), flush=True)


def parse(line: str) -> dict[str, Any] | None:
    """A report line's object; None for any other line of the log."""
    if not line.startswith(MARK):
        return None
    report: dict[str, Any] = json.loads(line[len(MARK) :])
    return report


def report_counts(count: Callable[[], int], interval: float = 1.0) -> threading.Thread:
    """A daemon thread that says ``count`` (the Nodes the observer holds) whenever it changed,
    looking every ``interval`` seconds: the benchmark waits on it for added Nodes, and follows
    a slow start by it. A ``len()`` a second costs nothing measurable."""

    def run() -> None:
        last = -1
        while True:
            now = count()
            if now != last:
                say("count", nodes=now)
                last = now
            time.sleep(interval)

    thread = threading.Thread(target=run, name="report-counts", daemon=True)
    thread.start()
    return thread
