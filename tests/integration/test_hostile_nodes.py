"""Hostile Nodes on a real API server: absurd labels, a 100 kB osImage, a 200 kB annotation, no
nodeInfo, an unknown provider. Detection does not crash, the manager keeps reconciling, and the
Gpu status stays small (tests/unit/test_hostile_nodes.py covers thousands of pools)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.cluster import LocalCluster
from tests.harness.module import OperatorProcess, gpu, module_on, wait_until

pytestmark = pytest.mark.integration


EMPTY_INFO = dict.fromkeys(
    ("architecture", "bootID", "containerRuntimeVersion", "kernelVersion", "kubeProxyVersion",
     "kubeletVersion", "machineID", "operatingSystem", "osImage", "systemUUID"), "",
)  # fmt: skip
"""Every nodeInfo field, empty: the harness's typed client needs them as strings."""


def _node(name: str, labels: dict[str, str], status: dict[str, Any], **meta: Any) -> dict[str, Any]:
    if "nodeInfo" in status:
        status["nodeInfo"] = {**EMPTY_INFO, **status["nodeInfo"]}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kwok.x-k8s.io/node": "fake",
                                                  "type": "kwok", **labels}, **meta},
            "spec": {"providerID": f"nowhere-cloud:///{name}"},
            "status": status}  # fmt: skip


HOSTILE = [
    _node("hostile-huge-os", {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "x" * 63},
          {"capacity": {"nvidia.com/gpu": "8", "cpu": "1", "memory": "1Gi", "pods": "10"},
           "nodeInfo": {"osImage": "Weird OS " + "z" * 100_000, "kernelVersion": "k" * 5000,
                        "architecture": "riscv64", "operatingSystem": "linux"}},
          annotations={"huge": "a" * 200_000}),
    _node("hostile-no-node-info", {"nvidia.com/gpu.present": "true",
                                   "node.kubernetes.io/instance-type": "g6.xlarge"},
          {"capacity": {"nvidia.com/gpu": "0", "cpu": "1", "memory": "1Gi", "pods": "10"}}),
    _node("hostile-labels", {"nvidia.com/gpu.product": "a" + "-" * 61 + "z",
                             "gpu.kyma-project.io/gpu": "true",
                             "worker.gardener.cloud/pool": "p" * 63},
          {"capacity": {"cpu": "1", "memory": "1Gi", "pods": "10"},
           "nodeInfo": {"osImage": "", "architecture": ""}}),
]  # fmt: skip


@pytest.fixture(scope="module")
def stack(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[OperatorProcess]:  # fmt: skip
    fleet = tmp_path_factory.mktemp("hostile") / "nodes.yaml"
    fleet.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": HOSTILE}))
    with module_on(local_cluster, name="operator-hostile", fleet=Path(fleet)) as process:
        yield process


def test_hostile_nodes_neither_crash_nor_bloat(
    local_cluster: LocalCluster, stack: OperatorProcess
) -> None:
    local_cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                         "metadata": {"name": "gpu"}, "spec": {}})  # fmt: skip
    status = wait_until(
        lambda: ((gpu(local_cluster) or {}).get("status") or {}).get("gpuNodeCount") and
        (gpu(local_cluster) or {}).get("status"), 60, "the status with the hostile GPU nodes",
    )  # fmt: skip
    assert stack.alive(), stack.log()
    names = {n["name"] for n in status["nodes"]}
    assert {"hostile-huge-os", "hostile-no-node-info"} <= names, names
    huge = next(n for n in status["nodes"] if n["name"] == "hostile-huge-os")
    assert huge["provider"] == "nowhere-cloud"  # reported as the providerID says, bounded
    assert len(yaml.safe_dump(status)) < 64 * 1024
    assert "Traceback" not in stack.log(400)
    local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    wait_until(lambda: gpu(local_cluster) is None, 60, "the Gpu gone")
