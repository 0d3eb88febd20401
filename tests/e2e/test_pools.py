"""One blocked worker pool never blocks the fleet, end to end: Gardener's maintenance moved one
Garden Linux pool past the installer release's build matrix (golden scenario
gardenlinux-pool-past-matrix). The module still plans and applies the good pool through the real
Flux and the real NVIDIA controller, whose driver for the good pool's kernel becomes ready; the
Gpu is Warning, not Error, with PoolsReady naming the blocked pool and the Preflight condition
the advice. Once the blocked pool is gone (pinned back, scaled away), the Gpu is Ready.

On kwok nodes every pod runs, also the blocked pool's driver, whose image does not exist on a
real registry: what this shows is the plan, the values and the status, not an image pull.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import nfd
from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.module import (
    ROOT,
    TARGET_NAMESPACE,
    OperatorProcess,
    condition,
    gpu,
    helm_release,
    module_on,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SCENARIO = ROOT / "tests" / "golden" / "scenarios" / "gardenlinux-pool-past-matrix"
POOL_LABEL = "worker.gardener.cloud/pool"
KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"
GOOD, BLOCKED = "gpu", "l40s"
GOOD_KERNEL = "6.6.63-cloud-amd64"


@pytest.fixture(scope="module")
def stack(local_cluster: LocalCluster, flux_stack: FluxStack) -> Iterator[OperatorProcess]:
    with module_on(local_cluster, name="operator-pools", fleet=None) as process:
        yield process


def _fleet_file(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The scenario's nodes; the GPU pools' hosts declare their NVIDIA PCI device (what NFD
    finds on them: tests/harness/nfd.py)."""
    scenario = yaml.safe_load((SCENARIO / "nodes.yaml").read_text())["items"]
    items = [nfd.before_nfd(node) for node in scenario]
    for node in items:
        if node["metadata"]["labels"][POOL_LABEL] != "cpu":
            node["metadata"].setdefault("annotations", {})[nfd.PCI_ANNOTATION] = nfd.NVIDIA_VENDOR
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path, items


def _status(cluster: LocalCluster) -> dict[str, Any]:
    return dict((gpu(cluster) or {}).get("status") or {})


def _warning_naming_the_pool(cluster: LocalCluster, flux: FluxStack) -> dict[str, Any] | None:
    flux.check_alive()
    obj = gpu(cluster)
    pools = condition(obj, "PoolsReady") or {}
    ready = _status(cluster).get("state") == "Warning" and pools.get("reason") == "PoolBlocked"
    return obj if ready and (condition(obj, "Ready") or {}).get("status") == "True" else None


def _driver_for(cluster: LocalCluster, kernel: str) -> dict[str, Any] | None:
    for ds in cluster.list_objects("daemonsets", TARGET_NAMESPACE):
        selector = ds["spec"]["template"]["spec"].get("nodeSelector") or {}
        if "driver" in ds["metadata"]["name"] and selector.get(KERNEL_LABEL) == kernel:
            return dict(ds)
    return None


def _ready_pods(cluster: LocalCluster, kernel: str) -> int | None:
    status = (_driver_for(cluster, kernel) or {}).get("status") or {}
    ready = status.get("numberReady")
    return ready if isinstance(ready, int) else None


def test_a_good_pool_reaches_ready_while_a_blocked_pool_is_reported(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess,
    fleet: Any, tmp_path: Path,
) -> None:  # fmt: skip
    path, items = _fleet_file(tmp_path)
    fleet(path)
    source = {"chartRepository": flux_stack.helm_repo_url, "insecure": True}
    local_cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                         "metadata": {"name": "gpu"}, "spec": {"source": source}})  # fmt: skip
    obj = wait_until(lambda: _warning_naming_the_pool(local_cluster, flux_stack), 300,
                     "Gpu Warning, PoolsReady PoolBlocked, Ready True")  # fmt: skip

    # The blocked pool is named, with the advice; the fleet is not an Error.
    pools = condition(obj, "PoolsReady") or {}
    assert pools["status"] == "False"
    assert pools["message"].startswith(
        f"worker pool {BLOCKED} is blocked (3 of 3 nodes get no working GPU: NoDriverImage)"
    ), pools
    assert f"served: {GOOD}" in pools["message"], pools
    preflight = condition(obj, "Preflight") or {}
    assert preflight["reason"] == "NoDriverImage", preflight
    assert (
        "Garden Linux 2150.10.0 is not in installer release 1.17.0's build matrix"
        in (preflight["message"])
    )
    assert "pin the pool's machine image to 2150.9.0" in preflight["message"]
    print(f"\nGpu {_status(local_cluster)['state']}: {_status(local_cluster)['message']}")

    # The good pool was planned and applied as before: the release is installed with the
    # precompiled branch, and the real controller's driver for its kernel is ready on its nodes.
    assert (condition(obj, "ReleaseReady") or {}).get("status") == "True"
    values = (helm_release(local_cluster) or {})["spec"]["values"]
    assert (values["driver"]["usePrecompiled"], values["driver"]["version"]) == (True, "590")
    driver = wait_until(lambda: _driver_for(local_cluster, GOOD_KERNEL), 60,
                        "the driver DaemonSet of the good pool's kernel")  # fmt: skip
    image = driver["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f"/driver:590-{GOOD_KERNEL}-gardenlinux0"), image
    wait_until(lambda: _ready_pods(local_cluster, GOOD_KERNEL) == 2, 120,
               "the good pool's driver ready on its 2 nodes")  # fmt: skip
    good = [n["metadata"]["name"] for n in items if n["metadata"]["labels"][POOL_LABEL] == GOOD]
    shown = {n["name"]: n.get("pool") for n in _status(local_cluster)["nodes"]}
    assert all(shown[name] == GOOD for name in good), shown

    # The blocked pool goes (its machine image pinned back, or scaled away): Ready.
    for node in items:
        if node["metadata"]["labels"][POOL_LABEL] == BLOCKED:
            local_cluster.delete_node(node["metadata"]["name"])
    wait_until(lambda: _status(local_cluster).get("state") == "Ready", 180,
               "Ready once the blocked pool is gone")  # fmt: skip
    served = condition(gpu(local_cluster), "PoolsReady") or {}
    assert (served.get("status"), served.get("reason")) == ("True", "PoolsServed"), served

    # Uninstall while the good pool's nodes are still there: the chart's pre-delete hook (a
    # Job, v26.7.0's gpucluster cleanup) needs a node to run on, and the fleet goes with this
    # test. Without a node Helm waits for the hook until the uninstall timeout.
    local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    wait_until(lambda: gpu(local_cluster) is None, 180, "the Gpu gone after Flux uninstalled")
    assert helm_release(local_cluster) is None
