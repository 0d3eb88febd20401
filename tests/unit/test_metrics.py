"""The manager's metrics (kyma_gpu/metrics.py): labels of writes, the hooks, the scrape-time
collectors, and the /metrics and /readyz server. The loop's hooks run against the in-memory
API of test_loop.py."""

from __future__ import annotations

import asyncio
import io
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kyma_gpu.adapter import KubeAdapter, ObjectRef
from kyma_gpu.metrics import (
    STATES,
    ErrorKind,
    Metrics,
    PoolGpus,
    Scraped,
    parse_address,
    serve,
    write_labels,
)
from kyma_gpu.observe.watches import NODES, REQUIRED
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu_tools.cli import main
from tests.harness.procs import free_port
from tests.unit.test_loop import new_world

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(metrics: Metrics) -> Samples:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, metric: str, **labels: str) -> float | None:
    return found.get((metric, tuple(sorted(labels.items()))))


@pytest.mark.parametrize(
    ("method", "path", "content_type", "want"),
    [
        ("PATCH", "/apis/helm.toolkit.fluxcd.io/v2/namespaces/kyma-system/helmreleases/gpu",
         "application/apply-patch+yaml", ("helmreleases", "apply")),
        ("DELETE", "/apis/source.toolkit.fluxcd.io/v1/namespaces/kyma-system/helmrepositories/x",
         None, ("helmrepositories", "delete")),
        ("PATCH", "/apis/gpu.kyma-project.io/v1beta1/gpus/gpu/status",
         "application/apply-patch+yaml", ("gpus/status", "apply")),
        ("PATCH", "/apis/gpu.kyma-project.io/v1beta1/gpus/gpu", "application/merge-patch+json",
         ("gpus", "patch")),
        ("POST", "/apis/coordination.k8s.io/v1/namespaces/kyma-system/leases", None,
         ("leases", "create")),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kyma-system/leases/kyma-gpu-manager",
         None, ("leases", "update")),
        ("POST", "/api/v1/namespaces/default/events", None, ("events", "create")),
        ("PATCH", "/api/v1/nodes/n1?fieldManager=x", "application/merge-patch+json",
         ("nodes", "patch")),
        ("POST", "/api/v1/namespaces", None, ("namespaces", "create")),
    ],
)  # fmt: skip
def test_write_labels(method: str, path: str, content_type: str | None, want: Any) -> None:
    assert write_labels(method, path, content_type) == want


def test_parse_address() -> None:
    assert parse_address("0.0.0.0:8081") == ("0.0.0.0", 8081)
    assert parse_address(":9000") == ("0.0.0.0", 9000)
    assert parse_address("[::1]:8081") == ("::1", 8081)
    for bad in ("8081", "host:", "host:port", "host:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_address(bad)


def test_reconcile_hooks_count_time_and_stamp_the_last_success() -> None:
    metrics = Metrics()
    before = samples(metrics)
    assert value(before, "kyma_gpu_last_successful_reconcile_timestamp_seconds") is None
    metrics.reconciled("Applying", 0.2, failed=False, clock=1000.0)
    metrics.reconciled("Failed", 0.1, failed=True, clock=2000.0)
    metrics.reconcile_failed(ErrorKind.TRANSIENT)
    found = samples(metrics)
    assert value(found, "kyma_gpu_reconciles_total", phase="Applying") == 1
    assert value(found, "kyma_gpu_reconciles_total", phase="Failed") == 1
    assert value(found, "kyma_gpu_reconcile_errors_total", kind="transient") == 1
    assert value(found, "kyma_gpu_reconcile_duration_seconds_count") == 2
    assert value(found, "kyma_gpu_reconcile_duration_seconds_bucket", le="0.25") == 2
    assert value(found, "kyma_gpu_reconcile_duration_seconds_bucket", le="0.1") == 1
    # the failed reconcile did not move the last success
    assert value(found, "kyma_gpu_last_successful_reconcile_timestamp_seconds") == 1000.0
    assert value(found, "kyma_gpu_build_info", version="0.1.0") == 1


def test_observed_state_one_gauge_per_state_leader_and_nodes() -> None:
    metrics = Metrics()
    now = Scraped(leader=False, gpu_states={"gpu": "Ready", "other": ""}, gpu_nodes=None)
    metrics.observe(lambda: now)
    found = samples(metrics)
    assert value(found, "kyma_gpu_leader") == 0
    for state in STATES:
        assert value(found, "kyma_gpu_gpu_state", name="gpu", state=state) == (
            1 if state == "Ready" else 0
        )
        assert value(found, "kyma_gpu_gpu_state", name="other", state=state) == 0
    assert value(found, "kyma_gpu_gpu_nodes") is None  # not listed yet: no sample
    now = Scraped(leader=True, gpu_states={}, gpu_nodes=3)
    found = samples(metrics)
    assert value(found, "kyma_gpu_leader") == 1
    assert value(found, "kyma_gpu_gpu_nodes") == 3
    assert not any(name == "kyma_gpu_gpu_state" for name, _ in found)


def test_gpu_health_per_pool_as_the_gpu_status_says() -> None:
    metrics = Metrics()
    said = {"name": "gpu-a", "gpusHealthy": 6, "gpuTotal": 8, "unhealthyNodes": 1, "nodes": 2}
    metrics.observe(lambda: Scraped(leader=True, pools=(PoolGpus.of(said),)))
    found = samples(metrics)
    assert value(found, "kyma_gpu_gpus", pool="gpu-a", health="healthy") == 6
    assert value(found, "kyma_gpu_gpus", pool="gpu-a", health="unhealthy") == 2
    assert value(found, "kyma_gpu_unhealthy_gpu_nodes", pool="gpu-a") == 1
    assert PoolGpus.of({"name": "x", "gpusHealthy": "6"}).healthy == 0  # not a number: 0


def test_process_metrics_and_no_created_series() -> None:
    found = samples(Metrics.for_process())
    names = {name for name, _ in found}
    assert "process_resident_memory_bytes" in names or "python_info" in names
    assert not any(name.endswith("_created") for name in names)


def test_the_loop_counts_reconciles_errors_and_reads_the_store(catalog: Catalog) -> None:
    world = new_world(catalog)
    metrics = world.loop.metrics = Metrics()
    world.loop.metrics.observe(world.loop.scrape)
    assert world.loop.waiting_for() == []
    world.api.fail = [500]  # the first write (the finalizer) fails once
    world.run()
    found = samples(metrics)
    assert value(found, "kyma_gpu_reconcile_errors_total", kind="transient") == 1
    assert value(found, "kyma_gpu_last_successful_reconcile_timestamp_seconds") is None
    world.loop.retries.failures.clear()  # the retry is due
    began = time.time()
    world.run()
    found = samples(metrics)
    assert sum(v for (n, _), v in found.items() if n == "kyma_gpu_reconciles_total") == 2
    stamp = value(found, "kyma_gpu_last_successful_reconcile_timestamp_seconds")
    assert stamp is not None
    assert stamp >= began
    assert value(found, "kyma_gpu_gpu_nodes") == 2  # gpu-1, gpu-2; not cpu-1
    assert value(found, "kyma_gpu_gpu_state", name="gpu", state="Processing") == 1
    assert value(found, "kyma_gpu_leader") == 1
    world.loop.may_write = lambda: False
    assert value(samples(metrics), "kyma_gpu_leader") == 0


def test_the_loop_waits_for_what_the_first_reconcile_needs(catalog: Catalog) -> None:
    world = new_world(catalog)
    world.store.forget(NODES)
    assert world.loop.waiting_for() == [NODES]
    assert world.loop.scrape().gpu_nodes is None
    assert set(REQUIRED) >= {NODES}


def test_the_adapter_counts_every_write_by_resource_and_verb() -> None:
    metrics = Metrics()
    adapter = KubeAdapter(api=None, metrics=metrics)  # type: ignore[arg-type]

    def answer(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}

    adapter._json = answer  # type: ignore[method-assign]
    asyncio.run(adapter.apply_status("gpu", {"state": "Ready"}))
    ref = ObjectRef("helm.toolkit.fluxcd.io/v2", "HelmRelease", "kyma-system", "gpu-operator")
    asyncio.run(adapter.patch(ref, []))
    asyncio.run(adapter.write_lease("kyma-system", "kyma-gpu-manager", {}, "7"))
    found = samples(metrics)
    assert value(found, "kyma_gpu_api_writes_total", resource="gpus/status", verb="apply") == 1
    assert value(found, "kyma_gpu_api_writes_total", resource="helmreleases", verb="patch") == 1
    assert value(found, "kyma_gpu_api_writes_total", resource="leases", verb="update") == 1


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_server_answers_metrics_and_readiness() -> None:
    metrics = Metrics()
    metrics.reconciled("Ready", 0.01, failed=False, clock=1.0)
    missing = ["nodes", "daemonsets"]

    async def scenario() -> list[tuple[int, str]]:
        port = free_port()
        runner = await serve(f"127.0.0.1:{port}", metrics, lambda: list(missing))
        base = f"http://127.0.0.1:{port}"
        try:
            answers = [await asyncio.to_thread(_get, f"{base}/readyz")]
            missing.clear()
            answers.append(await asyncio.to_thread(_get, f"{base}/readyz"))
            answers.append(await asyncio.to_thread(_get, f"{base}/metrics"))
        finally:
            await runner.cleanup()
        return answers

    waiting, ready, scraped = asyncio.run(scenario())
    assert waiting == (503, "waiting for the first list of nodes, daemonsets\n")
    assert ready == (200, "ready\n")
    assert scraped[0] == 200
    assert 'kyma_gpu_reconciles_total{phase="Ready"} 1.0' in scraped[1]


def test_run_refuses_a_bad_metrics_address() -> None:
    err = io.StringIO()
    code = main(["run", "--standalone", "--metrics-address", "8081"], stderr=err)
    assert code == 2
    assert "--metrics-address: not HOST:PORT: '8081'" in err.getvalue()
