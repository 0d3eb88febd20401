"""How `make test` spreads the test files over pytest-xdist workers.

Each worker is a process with a local cluster of its own (the session-scoped
``local_cluster`` fixture), so every test file runs whole on one worker, in its
order: an e2e file is a story whose module-scoped stack (Flux, the operator)
its tests share. The files are handed out longest first (greedy list
scheduling: a free worker takes the longest file left), so that the few
files that wait for NVIDIA driver rollouts start at once and the short ones
fill the gaps at the end. A worker gets its next file only when it is about to
finish the current one (pytest needs the next test to decide which fixtures to
tear down), never several files ahead as xdist's ``loadscope`` does.

How long a file takes comes from ``tests/durations.json`` (seconds per file,
measured: ``make test-durations`` rewrites it from the last run); a file that
is not in it is estimated by its directory. A stale number costs only some
minutes of a run, never a test.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DURATIONS = ROOT / "tests" / "durations.json"
DEFAULT_SECONDS = {"tests/e2e/": 120.0, "tests/integration/": 20.0}
"""The estimate for a file that durations.json does not know, by directory; else 1 s."""


def file_of(nodeid: str) -> str:
    """The test file of a node id (``tests/e2e/test_flux.py::test_install`` -> its path)."""
    return nodeid.split("::", 1)[0]


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test file, from the committed measurement ({} when the file is absent)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {str(name): float(seconds) for name, seconds in data["files"].items()}


def estimate(test_file: str, durations: Mapping[str, float]) -> float:
    if test_file in durations:
        return durations[test_file]
    for prefix, seconds in DEFAULT_SECONDS.items():
        if test_file.startswith(prefix):
            return seconds
    return 1.0


def longest_first(
    nodeids: Sequence[str], durations: Mapping[str, float]
) -> OrderedDict[str, dict[str, bool]]:
    """The work units (one per test file, its tests in collection order), longest first.

    Ties keep the collection order, so the order is the same on every run.
    """
    units: dict[str, dict[str, bool]] = {}
    for nodeid in nodeids:
        units.setdefault(file_of(nodeid), {})[nodeid] = False
    order = sorted(enumerate(units), key=lambda item: (-estimate(item[1], durations), item[0]))
    return OrderedDict((name, units[name]) for _, name in order)


def durations_from_reports(reports: Sequence[Any]) -> dict[str, float]:
    """Seconds per test file: the sum of every phase (setup, call, teardown) of its tests."""
    files: dict[str, float] = {}
    for report in reports:
        name = file_of(report.nodeid)
        files[name] = files.get(name, 0.0) + float(report.duration)
    return {name: round(seconds, 1) for name, seconds in sorted(files.items())}


def write_durations(files: Mapping[str, float], path: Path = DURATIONS) -> None:
    body = {
        "about": "seconds per test file from the last full run; tests/harness/scheduling.py "
        "hands the longest out first. Regenerate: make test-durations",
        "files": dict(files),
    }
    path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
