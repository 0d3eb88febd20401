"""Scale smoke test: the scale benchmark (benchmarks/bench_scale.py, `make bench-scale`) at
300 nodes (30 GPU, in 3 worker pools: two Garden Linux versions and Ubuntu) and 300 pods,
asserting the shape (0 writes on heartbeats, a rollout's writes coalesced, sizes, memory) and
only the benchmark's own step timeouts for time, so that CI notices a broken benchmark and a
large regression long before someone runs the 20,000-node version. The code is benchmarks/scale/.

It runs on the session's `local_cluster`, not on a cluster of its own: a second control
plane would cost CI another start and its memory for nothing the shared one cannot do. What it
adds is removed afterwards (teardown_fleet: the Gpu while the operator still runs, so that
the finalizer is released, then the pod namespaces and every Node labelled
harness.kyma-gpu.test/scale=true), so later tests see the cluster as it was. The Nodes use
their own address range (10.181.x.y), apart from the demo fleet's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

import pytest

from benchmarks.scale import (
    Operator,
    Rest,
    ScaleConfig,
    build_fleet,
    measure_operator,
    teardown_fleet,
)
from tests.harness.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SMOKE = ScaleConfig(
    nodes=300,
    heartbeat_seconds=10.0,
    spec_changes=5,
    restart_spec_changes=2,
    start_timeout=180.0,
    step_timeout=30.0,
    settle_quiet=5.0,
    octet=181,
    namespaces=3,
    workers=4,
    ready_timeout=180.0,
)


BEGAN = time.monotonic()


def say(message: str) -> None:
    print(f"scale smoke [{time.monotonic() - BEGAN:5.0f}s]: {message}", flush=True)


def test_scale_smoke(local_cluster: LocalCluster) -> None:
    rest = Rest(local_cluster)
    operator: Operator | None = None
    try:
        fleet = build_fleet(local_cluster, rest, SMOKE, say)
        metrics, breakdown, operator = measure_operator(
            local_cluster, rest, SMOKE, fleet, say, keep_running=True
        )
    finally:
        teardown_fleet(local_cluster, rest, SMOKE.namespace_names, say)
        if operator is not None:
            operator.stop()
    print(json.dumps({"metrics": metrics, "writes": dict(breakdown)}, indent=1))
    assert metrics.get("error") is None, metrics["error"]
    assert metrics["nodes_ready"] == SMOKE.nodes
    assert _number(metrics, "start_settled_rss_mib") < 250
    assert metrics["heartbeat_writes"] == 0
    # Times are the benchmark's figures (printed above; docs/performance.md), not this test's:
    # a busy CI machine must not fail it. Each step had to finish within SMOKE's timeouts
    # (start and ready 180 s, every other step 30 s), or measure_operator reports an error.
    for timed in ("start_first_reconcile_s", "spec_max_ms", "node_join_s",
                  "restart_first_reconcile_s", "restart_spec_max_ms"):  # fmt: skip
        assert _number(metrics, timed) > 0
    # a driver rollout relabels every GPU node once: no HelmRelease write, status writes
    # coalesced (fewer than one per node)
    assert metrics["rollout_nodes"] == SMOKE.gpu_nodes
    assert metrics["rollout_helmrelease_writes"] == 0
    assert 1 <= _number(metrics, "rollout_status_writes") < SMOKE.gpu_nodes
    assert 0 < _number(metrics, "gpu_status_bytes") < 1_572_864  # the API server's object limit
    assert 0 < _number(metrics, "helmrelease_values_bytes") < 1_572_864


def _number(metrics: Mapping[str, object], key: str) -> float:
    value = metrics.get(key)
    assert isinstance(value, int | float), f"{key}: {value!r}"
    return float(value)
