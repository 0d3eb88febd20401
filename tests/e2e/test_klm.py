"""The user's path, end to end: the real Kyma Lifecycle Manager installs the module from its OCM
component in an OCI registry, the manager runs on a real node from the module's own image,
an upgrade through the channel replaces it, and disabling the module removes it.

On a cluster of its own (tests/harness/klm.py has KCP = SKR = this cluster): the registry, the
module released into it twice with Kyma's tools (hack/module.py release: buildah,
modulectl, the ocm CLI), KLM, Flux and the real NVIDIA controller on the demo fleet. kwok
plays the kubelet of the fleet; the manager's pods run on a real node
(tests/harness/realnode.py): the real kubelet on containerd pulls the pushed image from the
registry and runs it as a Gardener node would, with no passwd entry for the image's user.
What is asserted comes from the API (through the kubelet: exec), containerd and the kernel.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import LocalCluster
from tests.harness.klm import (
    KCP_NAMESPACE,
    SKR_KYMA,
    SKR_NAMESPACE,
    Landscape,
    LifecycleManager,
    manager_pods,
)
from tests.harness.module import condition, gpu, gpu_ready, helm_release, wait_until
from tests.harness.realnode import RealNode

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
log = logging.getLogger(__name__)

USERS = "ml"


@dataclass
class Delivery:
    landscape: Landscape
    seen: dict[str, Any]
    """What one test leaves for the next (uids before the upgrade)."""

    @property
    def cluster(self) -> LocalCluster:
        return self.landscape.cluster

    @property
    def klm(self) -> LifecycleManager:
        return self.landscape.klm

    @property
    def node(self) -> RealNode:
        return self.landscape.node


@pytest.fixture(scope="module")
def delivery(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Delivery]:
    out = tmp_path_factory.mktemp("releases")
    landscape = Landscape(out, versions=("0.1.0", "0.1.1"), progress=log.info).start()
    try:
        yield Delivery(landscape, {})
    finally:
        landscape.stop()


def _deployment_available(cluster: LocalCluster, image_tag: str) -> dict[str, Any] | None:
    dep = cluster.get_object("deployment", "gpu-manager", SKR_NAMESPACE)
    if dep is None:
        return None
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    status = dep.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    available = (conditions.get("Available") or {}).get("status") == "True"
    progressed = (conditions.get("Progressing") or {}).get("reason") == "NewReplicaSetAvailable"
    current = status.get("updatedReplicas") == status.get("replicas") == dep["spec"]["replicas"]
    fresh = status.get("observedGeneration") == dep["metadata"]["generation"]
    ok = f":{image_tag}@sha256:" in image and available and progressed and current and fresh
    return dep if ok else None


def _module_ready(d: Delivery, version: str) -> dict[str, Any] | None:
    status = d.klm.module_status("gpu")
    if status and status.get("state") == "Ready" and status.get("version") == version:
        return status
    return None


@pytest.mark.timeout(900)
def test_klm_installs_the_module_from_its_component(delivery: Delivery) -> None:
    d, cluster = delivery, delivery.cluster
    wait_until(
        lambda: d.klm.kyma(SKR_NAMESPACE, SKR_KYMA), 120, "KLM's SKR Kyma kyma-system/default"
    )
    d.klm.enable("gpu")  # what an admin does
    dep = wait_until(lambda: _deployment_available(cluster, "0.1.0"), 300,
                     "the manager Deployment Available, from the pushed image")  # fmt: skip
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith(f"{d.landscape.registry.host}/kyma-project/gpu-manager:0.1.0@sha256:")
    pods = manager_pods(cluster)
    assert {p["spec"].get("nodeName") for p in pods} == {d.node.name}, "on the real node"
    running = d.node.running_pods()
    assert {f"{SKR_NAMESPACE}/{p['metadata']['name']}" for p in pods} <= running, (
        "every manager pod runs in containerd"
    )
    # KLM created the default Gpu from the template's spec.data.
    created = wait_until(lambda: gpu(cluster), 120, "the default Gpu")
    assert created["spec"] == {} or created["spec"].get("source") is None
    # As an admin of a cluster without internet would: the chart from a mirror.
    mirror = {"chartRepository": d.landscape.flux.helm_repo_url, "insecure": True}
    cluster.kubectl("patch", "gpu", "gpu", "--type=merge", "-p",
                    json.dumps({"spec": {"source": mirror}}))  # fmt: skip
    ready = wait_until(lambda: gpu_ready(cluster), 420, "the Gpu Ready through the module")
    assert (condition(ready, "ReleaseReady") or {}).get("status") == "True"
    status = wait_until(lambda: _module_ready(d, "0.1.0"), 240, "KLM's module state Ready")
    assert status["channel"] == "regular"
    name = status["manifest"]["metadata"]["name"]
    manifest = cluster.get_object("manifests.operator.kyma-project.io", name, KCP_NAMESPACE)
    assert ((manifest or {}).get("status") or {}).get("state") == "Ready"
    d.seen["gpu_uid"] = ready["metadata"]["uid"]
    d.seen["release_uid"] = (helm_release(cluster) or {})["metadata"]["uid"]
    d.seen["pods"] = {p["metadata"]["name"] for p in manager_pods(cluster)}


def _exec(cluster: LocalCluster, pod: str, *command: str) -> str:
    """A command in the manager container, through the API server and the kubelet."""
    return cluster.kubectl("exec", "-n", SKR_NAMESPACE, pod, "-c", "manager", "--",
                           *command).stdout.strip()  # fmt: skip


def _proc_status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _memory_limit(pid: int) -> int:
    cgroups = Path(f"/proc/{pid}/cgroup").read_text(encoding="ascii").splitlines()
    path = next(line.split(":", 2)[2] for line in cgroups if line.split(":")[1] == "memory")
    limit = Path("/sys/fs/cgroup/memory", path.lstrip("/"), "memory.limit_in_bytes")
    return int(limit.read_text(encoding="ascii"))


def test_the_manager_runs_as_its_deployment_says(delivery: Delivery) -> None:
    d, cluster = delivery, delivery.cluster
    pods = manager_pods(cluster)
    assert len(pods) == 2
    for pod in pods:
        name = pod["metadata"]["name"]
        statuses = pod["status"]["containerStatuses"]
        assert [s["restartCount"] for s in statuses] == [0], f"{name} restarted: {statuses}"
        status = _proc_status(d.node.container_pid(pod, "manager"))
        assert set(status["Uid"].split()) == {"65532"}, f"{name} runs as uid {status['Uid']}"
        rss_kib = int(status["VmRSS"].split()[0])
        print(f"{name}: RSS {rss_kib / 1024:.1f} MiB")
        assert int(status["CapEff"], 16) == 0, "all capabilities dropped"
        assert status["NoNewPrivs"] == "1", "allowPrivilegeEscalation: false"
        assert status["Seccomp"] == "2", "the RuntimeDefault seccomp filter"
        assert _memory_limit(d.node.container_pid(pod, "manager")) == 512 * 1024 * 1024
        no_entry = "import os, pwd\ntry: pwd.getpwuid(os.getuid())\nexcept KeyError: print('none')"
        assert _exec(cluster, name, "python3", "-c", no_entry) == "none", (
            "containerd writes no passwd entry for the image's user (podman would)"
        )
        assert "Read-only file system" in _exec(
            cluster, name, "sh", "-c", "touch /opt/venv/x 2>&1 || true")  # fmt: skip
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        assert _exec(cluster, name, "cat", f"{sa}/namespace") == SKR_NAMESPACE
        assert _exec(cluster, name, "sh", "-c", "echo $POD_NAME") == name
        assert "KYMA_GPU_FLUX_HELM_CONTROLLER_IMAGE=" in _exec(cluster, name, "env")
        scrape = (
            "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8081/metrics').read())"
        )
        assert "kyma_gpu_" in _exec(cluster, name, "python3", "-c", scrape)
        ip = pod["status"]["podIP"]
        with urllib.request.urlopen(f"http://{ip}:8081/readyz", timeout=5) as answer:
            assert answer.status == 200  # the readiness probe's endpoint, from the node
    lease = cluster.get_object("lease", "kyma-gpu-manager", SKR_NAMESPACE)
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    assert holder in {p["metadata"]["name"] for p in pods}, f"the Lease holder {holder!r}"
    logs = cluster.kubectl("logs", "-n", SKR_NAMESPACE, pods[0]["metadata"]["name"],
                           "-c", "manager").stdout  # fmt: skip
    assert logs.strip(), "the container's log, through the API and the kubelet"


@pytest.mark.timeout(900)
def test_an_upgrade_through_the_channel_replaces_the_manager(delivery: Delivery) -> None:
    d, cluster = delivery, delivery.cluster
    d.klm.offer(d.landscape.releases["0.1.1"], {"regular": "0.1.1"})
    wait_until(lambda: _deployment_available(cluster, "0.1.1"), 420,
               "the manager Deployment rolled to 0.1.1")  # fmt: skip
    wait_until(lambda: not d.seen["pods"] & {p["metadata"]["name"] for p in manager_pods(cluster)},
               120, "the 0.1.0 pods gone")  # fmt: skip
    wait_until(lambda: _module_ready(d, "0.1.1"), 240, "KLM's module state Ready at 0.1.1")
    ready = wait_until(lambda: gpu_ready(cluster), 240, "the Gpu Ready after the upgrade")
    assert ready["metadata"]["uid"] == d.seen["gpu_uid"], "the Gpu was kept"
    release = helm_release(cluster) or {}
    assert release["metadata"]["uid"] == d.seen["release_uid"], "the HelmRelease was kept"


@pytest.mark.timeout(900)
def test_disabling_removes_the_module_and_leaves_the_users_objects(delivery: Delivery) -> None:
    d, cluster = delivery, delivery.cluster
    cluster.create_namespace(USERS)
    cluster.apply(_user_gpu_pod(), d.landscape.flux.helm_repository("users-charts", USERS))
    wait_until(lambda: (cluster.get_object("pod", "train", USERS) or {}).get("status", {})
               .get("phase") == "Running", 60, "ml/train Running")  # fmt: skip
    d.klm.disable()
    held = wait_until(lambda: condition(gpu(cluster), "WorkloadsProtected"), 180,
                      "the Gpu waiting for the user's GPU pod")  # fmt: skip
    assert "ml/train" in held["message"]
    # The documented way out: the admin decides the workloads may lose their driver.
    cluster.kubectl("annotate", "gpu", "gpu", "gpu.kyma-project.io/skip-workload-protection=true")
    wait_until(lambda: cluster.get_object("deployment", "gpu-manager", SKR_NAMESPACE) is None,
               420, "the manager Deployment removed by KLM")  # fmt: skip
    wait_until(lambda: d.klm.module_status("gpu") is None, 240, "the module gone from the Kyma")
    gone = cluster.kubectl("get", "crd", "gpus.gpu.kyma-project.io", "--ignore-not-found",
                           "-o", "name").stdout.strip()  # fmt: skip
    assert gone == "", "the Gpu CRD went with the module"
    assert cluster.list_objects("helmreleases.helm.toolkit.fluxcd.io", SKR_NAMESPACE) == []
    wait_until(lambda: not {p for p in d.node.running_pods() if p.startswith(SKR_NAMESPACE)},
               120, "no manager container left in containerd")  # fmt: skip
    # The user's own objects are untouched.
    assert (cluster.get_object("pod", "train", USERS) or {})["status"]["phase"] == "Running"
    assert cluster.get_object("helmrepositories.source.toolkit.fluxcd.io", "users-charts", USERS)
    assert cluster.get_object("namespace", USERS) is not None
    assert cluster.get_object("namespace", SKR_NAMESPACE) is not None


def _user_gpu_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train", "namespace": USERS},
        "spec": {"containers": [{"name": "train", "image": "nvcr.io/nvidia/cuda:12.4.0-base",
                                 "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }  # fmt: skip
