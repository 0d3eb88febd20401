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
        "cluster_facts + make_plan after one upgrade label moved",
        "memory: compact facts per Node",
    ):
        assert any(r.startswith(row) for r in rows), (row, result.stdout)
