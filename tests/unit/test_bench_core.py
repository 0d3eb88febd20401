"""`make bench` runs: it imported a module that no longer existed and nobody noticed. A small
fleet here; the numbers are not checked (a benchmark prints, it does not assert)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_core.py"


def test_the_core_benchmark_prints_every_row() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--nodes", "60"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [line.split("  ")[0] for line in result.stdout.splitlines()]
    for row in (
        "node_facts of one Node (per heartbeat)",
        "memoized plan lookup (reconcile without change)",
        "status aggregation, 20 nodes in a rollout",
        "cluster_facts + plan after one upgrade label moved",
        "memory: compact facts per Node",
    ):
        assert any(r.startswith(row) for r in rows), (row, result.stdout)


def test_the_start_replay_folds_every_node_of_the_fleet() -> None:
    """benchmarks/start_replay.py: this tree's row, its child having read all 300 Nodes (the
    child fails on a tree whose parser or facts it cannot call)."""
    replay = BENCH.with_name("start_replay.py")
    result = subprocess.run(
        [sys.executable, str(replay), "--nodes", "300"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("300 Nodes, "), result.stdout
    row = result.stdout.splitlines()[-1].split("|")
    assert row[1].strip() == str(BENCH.parents[1]), result.stdout
    assert float(row[4]) > 0, result.stdout


def test_the_label_pass_benchmark_runs_its_passes() -> None:
    """benchmarks/label_pass.py on a small fleet: its line names the GPU nodes it found."""
    result = subprocess.run(
        [sys.executable, str(BENCH.with_name("label_pass.py")), "--nodes", "300", "--labels", "5"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("300 Nodes (30 GPU): "), result.stdout
