"""What operators of the cluster see, end to end with real Flux and the real NVIDIA GPU Operator
controller: a GPU pool scaled to zero is Ready (and says so), `kubectl get gpu` shows the GPU
nodes ready out of all and the driver version the driver DaemonSets run, and preflight findings
and Flux failures are Events on the Gpu, posted once, that `kubectl events -n kyma-system --for
gpu/gpu` shows.
Tests run in file order: the second builds on the release the first installed.
"""

from __future__ import annotations

import collections
import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.status.events import EVENT_BUDGET
from tests.harness import nfd
from tests.harness.chart_sources import allow_chart_sources, local_source
from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.module import (
    MODULE_NAMESPACE,
    ROOT,
    OperatorProcess,
    condition,
    gpu,
    module_on,
    wait_until,
)
from tests.harness.nodes import DEMO_FLEET

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

GPUS = "gpus.gpu.kyma-project.io"
Fleet = Callable[[Path | str], list[str]]


@pytest.fixture(scope="module")
def stack(
    local_cluster: LocalCluster, flux_stack: FluxStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator, and a CPU node for the chart's Deployments all along: a GPU pool scaled
    to zero leaves the cluster's other nodes."""
    cpu = _demo_nodes(tmp_path_factory.mktemp("fleet"), gpu_nodes=False)
    with module_on(local_cluster, name="operator-observed", fleet=cpu) as process:
        yield process
        local_cluster.kubectl("delete", GPUS, "gpu", "--wait=false", "--ignore-not-found")
        wait_until(lambda: gpu(local_cluster) is None, 240, "the Gpu gone after Flux uninstalled")


def _status(cluster: LocalCluster) -> dict[str, Any]:
    return dict((gpu(cluster) or {}).get("status") or {})


def _patch_spec(cluster: LocalCluster, spec: dict[str, Any]) -> None:
    cluster.kubectl("patch", GPUS, "gpu", "--type=merge", "-p", json.dumps({"spec": spec}))


def _ready_with(cluster: LocalCluster, ready_nodes: str) -> dict[str, Any] | None:
    status = _status(cluster)
    ok = status.get("state") == "Ready" and status.get("readyNodes") == ready_nodes
    return status if ok else None


def _demo_nodes(tmp_path: Path, gpu_nodes: bool) -> Path:
    """The demo fleet's GPU nodes, or its CPU node (where the chart's Deployments run)."""
    items = yaml.safe_load(DEMO_FLEET.read_text())["items"]
    chosen = [
        n for n in items if ("nvidia.com/gpu" in n["status"].get("capacity", {})) == gpu_nodes
    ]
    path = tmp_path / f"demo-{'gpu' if gpu_nodes else 'cpu'}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": chosen}))
    return path


def test_scaled_to_zero_is_ready_and_the_status_shows_what_runs(
    local_cluster: LocalCluster,
    flux_stack: FluxStack,
    stack: OperatorProcess,
    fleet: Fleet,
    tmp_path: Path,
) -> None:
    source = {"chartRepository": flux_stack.helm_repo_url, "insecure": True}
    local_cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                         "metadata": {"name": "gpu"}, "spec": {"source": source}})  # fmt: skip
    # What docs/user-guide.md tells users to run.
    local_cluster.kubectl("wait", "--for=condition=Ready", "gpu/gpu", "--timeout=300s",
                          timeout=320)  # fmt: skip
    status = _status(local_cluster)
    assert status["state"] == "Ready", status
    assert "scaled to zero" in status["message"]
    nodes = condition(gpu(local_cluster), "NodesDetected") or {}
    assert (nodes.get("status"), nodes.get("reason")) == ("False", "NoGpuNodes")
    assert "scaled to zero" in nodes["message"]
    assert status["readyNodes"] == "0/0"
    assert "driverVersion" not in status  # no driver pod runs anywhere
    assert status["desiredDriverVersion"] == "590"

    # The pool scales up: the real NVIDIA controller renders a driver DaemonSet per kernel.
    gpu_nodes = fleet(_demo_nodes(tmp_path, gpu_nodes=True))
    shown = wait_until(lambda: _ready_with(local_cluster, "2/2"), 240, "Ready with 2/2 nodes")
    assert shown["driverVersion"] == "590"  # read from the driver DaemonSet's image
    assert shown["gpuNodesReady"] == shown["gpuNodeCount"] == 2
    table = local_cluster.kubectl("get", "gpu", "gpu").stdout
    header, row = table.splitlines()[:2]
    assert "READY NODES" in header, table
    assert "DRIVER VERSION" in header, table
    assert "2/2" in row.split(), table
    assert "590" in row.split(), table

    # ... and back to zero.
    for name in gpu_nodes:
        local_cluster.delete_node(name)

    def at_zero() -> dict[str, Any] | None:
        status = _ready_with(local_cluster, "0/0")
        return status if status and "driverVersion" not in status else None

    back = wait_until(at_zero, 180, "Ready with 0/0 nodes and no driver running")
    assert "scaled to zero" in back["message"]


def _outside_matrix_fleet(tmp_path: Path) -> Path:
    """The golden scenario's Garden Linux nodes, one outside the installer's build matrix;
    the GPU pools declare their NVIDIA PCI device (what NFD would find, harness/nfd.py)."""
    scenario = ROOT / "tests" / "golden" / "scenarios" / "gardenlinux-outside-matrix"
    items = copy.deepcopy(yaml.safe_load((scenario / "nodes.yaml").read_text())["items"])
    for node in items:
        if "gpu" in node["metadata"]["labels"].get("worker.gardener.cloud/pool", ""):
            node["metadata"].setdefault("annotations", {})[nfd.PCI_ANNOTATION] = nfd.NVIDIA_VENDOR
    path = tmp_path / "outside-matrix.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def _gpu_events(cluster: LocalCluster) -> list[dict[str, Any]]:
    """Events about this Gpu: earlier tests' Gpus had the same name, not the same uid."""
    uid = ((gpu(cluster) or {}).get("metadata") or {}).get("uid", "")
    selector = f"involvedObject.kind=Gpu,involvedObject.name=gpu,involvedObject.uid={uid}"
    out = cluster.kubectl("get", "events", "-A", "-o", "json", "--field-selector", selector).stdout
    return list(json.loads(out)["items"])


def _event(cluster: LocalCluster, reason: str, text: str) -> list[dict[str, Any]]:
    return [e for e in _gpu_events(cluster) if e["reason"] == reason and text in e["message"]]


def test_findings_and_flux_failures_are_events_posted_once(
    local_cluster: LocalCluster,
    flux_stack: FluxStack,
    stack: OperatorProcess,
    fleet: Fleet,
    tmp_path: Path,
) -> None:
    assert gpu(local_cluster) is not None, "the Gpu of the test before"
    fleet(_outside_matrix_fleet(tmp_path))
    outside = wait_until(lambda: _event(local_cluster, "NoDriverImage", "1877.18"), 60,
                         "an Event for the node outside the build matrix")  # fmt: skip
    assert outside[0]["type"] == "Warning"
    assert "is not in installer release 1.17.0's build matrix" in outside[0]["message"]

    # Branch 570 has no precompiled driver for Garden Linux 2150.8+: a new finding.
    _patch_spec(local_cluster, {"driver": {"version": "570"}})
    excluded = wait_until(lambda: _event(local_cluster, "NoDriverImage", "2150.8.0"), 60,
                          "an Event for the excluded driver branch")  # fmt: skip
    assert "excludes driver 570" in excluded[0]["message"]
    # Back: the first finding again. Said a moment ago, so not said again.
    _patch_spec(local_cluster, {"driver": {"version": None}})
    wait_until(lambda: _status(local_cluster).get("desiredDriverVersion") == "590", 30,
               "the default branch again")  # fmt: skip

    # A chart version the repository does not have: Flux fails, and says why. The chart
    # sources allow it first (an administrator's ConfigMap), or the plan refuses it before
    # Flux sees it (ChartSourceNotAllowed); restored below.
    versions = ["v26.3.3", "v26.7.0", "v99.0.0"]
    allow_chart_sources(local_cluster, local_source(flux_stack.helm_repo_url,
                                                    operatorVersions=versions))  # fmt: skip
    _patch_spec(local_cluster, {"operatorVersion": "v99.0.0"})

    def flux_failure() -> list[dict[str, Any]]:
        return [e for e in _gpu_events(local_cluster)
                if e["message"].startswith("HelmRelease ") and "v99.0.0" in e["message"]
                and e["reason"] != "Error"]  # fmt: skip

    failed = wait_until(flux_failure, 180, "an Event for the Flux failure")
    assert failed[0]["type"] == "Warning"
    assert _event(local_cluster, "UnknownChartVersion", "v99.0.0")  # the preflight's view

    # No storm: while nothing changes, nothing is posted again (Flux retries meanwhile).
    time.sleep(20)
    events = _gpu_events(local_cluster)
    warned = collections.Counter(
        (e["reason"], e["message"]) for e in events if e["type"] == "Warning"
    )
    assert all(n == 1 for n in warned.values()), warned
    first = [e for e in events if e["message"] == outside[0]["message"]]
    assert sorted(e["reason"] for e in first) in (["NoDriverImage"], ["NoDriverImage", "Ready"])
    assert all(e.get("count", 1) == 1 for e in events)
    assert len(events) <= EVENT_BUDGET

    assert {e["metadata"]["namespace"] for e in events} == {MODULE_NAMESPACE}
    listed = local_cluster.kubectl("events", "-n", MODULE_NAMESPACE, "--for", f"{GPUS}/gpu").stdout
    assert "NoDriverImage" in listed, listed
    assert failed[0]["reason"] in listed, listed
    assert "v99.0.0" in listed, listed

    _patch_spec(local_cluster, {"operatorVersion": None})
    flux_stack.allow_chart_sources()
    wait_until(lambda: _status(local_cluster).get("state") in ("Ready", "Warning"), 240,
               "recovered from the missing chart version")  # fmt: skip
    # Uninstall while the nodes are there: the chart's pre-delete hook Job runs on one.
    local_cluster.kubectl("delete", GPUS, "gpu", "--wait=false")
    wait_until(lambda: gpu(local_cluster) is None, 240, "the Gpu gone after Flux uninstalled")
