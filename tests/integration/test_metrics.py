"""The manager's /metrics and /readyz, scraped from the running process on the local cluster.

A manager runs as in the Deployment (`--leader-election`, `--metrics-address`) with the demo
fleet; the test creates the Gpu and compares what /metrics says with the cluster: the
reconciles, the writes per resource (equal to the API server's audit log), the Gpu's state,
the GPU nodes. A second manager is the standby: ready, observing the same world, not leading,
writing nothing.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.cluster import LocalCluster
from tests.harness.module import (
    MODULE_NAMESPACE,
    OperatorProcess,
    gpu,
    helm_release,
    module_on,
    wait_until,
)
from tests.harness.procs import free_port

pytestmark = pytest.mark.integration

LEASE = "kyma-gpu-manager"
LEADER, STANDBY = "metrics-a", "metrics-b"
GPU = {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
       "metadata": {"name": "gpu"}, "spec": {}}  # fmt: skip
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:  # not listening yet
        return 0, str(err)


def _scrape(port: int) -> Samples:
    code, text = _get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200, text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(found: Samples, metric: str, **labels: str) -> float | None:
    return found.get((metric, tuple(sorted(labels.items()))))


def _sum(found: Samples, metric: str) -> float:
    return sum(v for (name, _), v in found.items() if name == metric)


def _scrape_until(port: int, good: Callable[[Samples], bool], timeout: float, what: str) -> Samples:
    """The first scrape that is good, within the timeout."""

    def probe() -> Samples | None:
        found = _scrape(port)
        return found if good(found) else None

    return wait_until(probe, timeout, what)


def _ready(port: int) -> bool:
    return _get(f"http://127.0.0.1:{port}/readyz")[0] == 200


def _harness_gpu_nodes(cluster: LocalCluster) -> int:
    """Nodes of the harness with nvidia.com/gpu capacity: what the fleet file made GPU nodes."""
    nodes = cluster.list_objects("nodes")
    capacity = [(n.get("status") or {}).get("capacity") or {} for n in nodes]
    return sum(1 for c in capacity if int(c.get("nvidia.com/gpu", "0")) > 0)


def _audited_writes(cluster: LocalCluster, identity: str) -> Counter[tuple[str, str]]:
    """(resource, verb) of the identity's successful writes, from the API server's audit log."""
    found: Counter[tuple[str, str]] = Counter()
    for line in (cluster.log_dir / "audit.log").read_text().splitlines():
        event: dict[str, Any] = json.loads(line)
        if (
            event.get("stage") != "ResponseComplete"
            or f"({identity})" not in str(event.get("userAgent", ""))
            or event.get("verb") not in ("create", "update", "patch", "delete")
        ):
            continue
        ref = event.get("objectRef") or {}
        resource = "/".join(p for p in (ref.get("resource"), ref.get("subresource")) if p)
        found[(resource, str(event["verb"]))] += 1
    return found


def _manager(identity: str, port: int) -> tuple[tuple[str, ...], dict[str, str]]:
    args = ("--leader-election", "--metrics-address", f"127.0.0.1:{port}")
    return args, {"POD_NAME": identity}


@pytest.fixture(scope="module")
def leader(local_cluster: LocalCluster) -> Iterator[tuple[OperatorProcess, int]]:
    port = free_port()
    args, env = _manager(LEADER, port)
    with module_on(local_cluster, name=f"operator-{LEADER}", args=args, env=env) as process:
        yield process, port
    local_cluster.kubectl("delete", "lease", LEASE, "-n", MODULE_NAMESPACE, "--ignore-not-found")


@pytest.fixture
def show_log(leader: tuple[OperatorProcess, int], request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed > failed_before:
        print(f"--- operator log (tail) ---\n{leader[0].log()}")


def test_leader_metrics_match_the_cluster(
    local_cluster: LocalCluster, leader: tuple[OperatorProcess, int], show_log: None
) -> None:
    process, port = leader
    wait_until(lambda: _ready(port), 60, "/readyz answering 200")
    wait_until(lambda: _value(_scrape(port), "kyma_gpu_leader") == 1, 40, "leading")
    local_cluster.apply(GPU)
    wait_until(lambda: helm_release(local_cluster), 60, "the HelmRelease")
    status = wait_until(lambda: (gpu(local_cluster) or {}).get("status"), 30, "Gpu status")
    assert process.alive()

    # The status is written during a reconcile and the counters at its end: wait for the end.
    found = _scrape_until(port, lambda s: _sum(s, "kyma_gpu_reconciles_total") > 0,
                          30, "a reconcile counted")  # fmt: skip
    assert _value(found, "kyma_gpu_reconcile_duration_seconds_count") == _sum(
        found, "kyma_gpu_reconciles_total"
    )
    stamp = _value(found, "kyma_gpu_last_successful_reconcile_timestamp_seconds")
    assert stamp is not None
    assert time.time() - 120 < stamp <= time.time()

    expected_nodes = _harness_gpu_nodes(local_cluster)
    assert expected_nodes == 2  # the demo fleet: two g6.xlarge, one m5.large
    assert _value(found, "kyma_gpu_gpu_nodes") == expected_nodes == status["gpuNodeCount"]

    state = str((gpu(local_cluster) or {}).get("status", {}).get("state"))
    found = _scrape_until(
        port, lambda s: _value(s, "kyma_gpu_gpu_state", name="gpu", state=state) == 1,
        20, f"the state gauge saying {state}",
    )  # fmt: skip
    states = {labels: v for (name, labels), v in found.items() if name == "kyma_gpu_gpu_state"}
    assert sum(states.values()) == 1
    assert len(states) == 5  # Ready, Processing, Warning, Error, Deleting

    # kopf adds the Gpu's finalizer (the module removes it at the end of a deletion only)
    for resource, verb in [("helmreleases", "apply"), ("helmrepositories", "apply"),
                           ("gpus/status", "apply")]:  # fmt: skip
        assert (_value(found, "kyma_gpu_api_writes_total", resource=resource, verb=verb) or 0) >= 1

    def counted_equals_audited() -> bool:
        counted = _scrape(port)
        audited = _audited_writes(local_cluster, LEADER)
        return all(
            _value(counted, "kyma_gpu_api_writes_total", resource=r, verb="apply")
            == audited[(r, "patch")]  # server-side apply is a patch to the API server
            for r in ("helmreleases", "helmrepositories")
        )

    wait_until(counted_equals_audited, 20, "the Flux writes counted = the audit log's")


def test_the_standby_serves_metrics_too(
    local_cluster: LocalCluster, leader: tuple[OperatorProcess, int], show_log: None
) -> None:
    _, leader_port = leader
    port = free_port()
    args, env = _manager(STANDBY, port)
    standby = OperatorProcess(local_cluster, name=f"operator-{STANDBY}", args=args, env=env)
    standby.start()
    try:
        wait_until(lambda: _ready(port), 60, "the standby's /readyz answering 200")
        found = _scrape_until(port, lambda s: _value(s, "kyma_gpu_gpu_nodes") == 2,
                              20, "the standby observing the GPU nodes")  # fmt: skip
        assert _value(found, "kyma_gpu_leader") == 0
        assert _value(_scrape(leader_port), "kyma_gpu_leader") == 1
        assert _sum(found, "kyma_gpu_reconciles_total") == 0
        assert _sum(found, "kyma_gpu_api_writes_total") == 0
        assert _value(found, "kyma_gpu_last_successful_reconcile_timestamp_seconds") is None

        def same_state(samples: Samples) -> bool:
            """The Gpu reaches the standby through kopf, after the first lists: wait for it,
            and compare with the state the Gpu shows at that moment."""
            state = str((gpu(local_cluster) or {}).get("status", {}).get("state"))
            return _value(samples, "kyma_gpu_gpu_state", name="gpu", state=state) == 1

        _scrape_until(port, same_state, 20, "the standby reporting the Gpu's state")
    except BaseException:
        print(f"--- standby log (tail) ---\n{standby.log()}")
        raise
    finally:
        standby.stop()


def test_a_metrics_port_in_use_stops_the_manager(
    local_cluster: LocalCluster, leader: tuple[OperatorProcess, int]
) -> None:
    _, taken = leader  # the leader listens there
    args, env = _manager("metrics-clash", taken)
    clash = OperatorProcess(local_cluster, name="operator-metrics-clash", args=args, env=env)
    clash.start()
    try:
        wait_until(lambda: not clash.alive(), 60, "the manager stopping")
        assert clash.process is not None
        assert clash.process.returncode != 0
        assert f"cannot serve metrics on 127.0.0.1:{taken}" in clash.log(200)
    finally:
        clash.stop()
