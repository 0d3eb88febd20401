"""The scheduler of `make test` (tests/harness/scheduling.py, xdist_scheduler.py): whole files
per worker, longest first, and no worker left waiting. Simulated workers, no cluster."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.harness.scheduling import durations_from_reports, estimate, longest_first
from tests.harness.xdist_scheduler import LongestFileFirst

COLLECTION = [
    "tests/unit/test_a.py::test_1",
    "tests/unit/test_a.py::test_2",
    "tests/e2e/test_long.py::test_only",  # one test: it must still start at once
    "tests/e2e/test_mid.py::test_1",
    "tests/e2e/test_mid.py::test_2",
    "tests/integration/test_x.py::test_1",
]
DURATIONS = {"tests/e2e/test_long.py": 600.0, "tests/e2e/test_mid.py": 300.0}


class Worker:
    """What the scheduler sees of an xdist worker; it runs a test once it knows the next one
    (or has been told to shut down), as xdist's worker loop does."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.queue: list[int] = []
        self.ran: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue += indices

    def shutdown(self) -> None:
        self.shutting_down = True

    def runnable(self) -> int | None:
        if len(self.queue) >= 2 or (self.queue and self.shutting_down):
            return self.queue[0]
        return None


def _scheduler(workers: int) -> tuple[LongestFileFirst, list[Worker]]:
    config: Any = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"], option=None)
    scheduler = LongestFileFirst(config)
    scheduler.durations = DURATIONS
    nodes = [Worker(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, COLLECTION)
    scheduler.schedule()
    return scheduler, nodes


def _run(scheduler: LongestFileFirst, nodes: list[Worker]) -> None:
    """Let the workers run whatever they can until nothing moves."""
    moved = True
    while moved:
        moved = False
        for node in nodes:
            index = node.runnable()
            if index is not None:
                node.queue.pop(0)
                node.ran.append(index)
                scheduler.mark_test_complete(node, index)
                moved = True


def test_every_test_runs_once_and_files_stay_whole() -> None:
    scheduler, nodes = _scheduler(2)
    _run(scheduler, nodes)
    ran = [COLLECTION[i] for node in nodes for i in node.ran]
    assert sorted(ran) == sorted(COLLECTION)
    owners = {COLLECTION[i].split("::")[0]: node.gateway.id for node in nodes for i in node.ran}
    for node in nodes:
        files = {COLLECTION[i].split("::")[0] for i in node.ran}
        assert all(owners[f] == node.gateway.id for f in files)
    assert all(node.shutting_down for node in nodes)
    assert not scheduler.has_pending


def test_the_longest_files_start_first_even_a_file_of_one_test() -> None:
    _, nodes = _scheduler(2)
    first = {COLLECTION[node.queue[0]].split("::")[0] for node in nodes}
    assert first == {"tests/e2e/test_long.py", "tests/e2e/test_mid.py"}
    long_worker = next(n for n in nodes if "test_long" in COLLECTION[n.queue[0]])
    assert long_worker.runnable() is not None, "a one-test file must not wait for a successor"


def test_order_and_estimates() -> None:
    units = longest_first(COLLECTION, DURATIONS)
    assert list(units)[:2] == ["tests/e2e/test_long.py", "tests/e2e/test_mid.py"]
    assert list(units)[2] == "tests/integration/test_x.py"  # 20 s estimate beats unit files
    assert estimate("tests/e2e/test_new.py", {}) == 120.0
    assert estimate("tests/unit/test_new.py", {}) == 1.0
    reports = [SimpleNamespace(nodeid="tests/e2e/test_mid.py::test_1", duration=d)
               for d in (1.0, 2.5, 0.25)]  # fmt: skip
    assert durations_from_reports(reports) == {"tests/e2e/test_mid.py": 3.8}
