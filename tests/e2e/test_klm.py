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

# Each step of the user's path is a module-scoped fixture (the landscape, enabled, installed,
# upgraded, disabled), started once by the first test that needs it; each test checks one
# property of that step. Any test may start the chain up to its step, hence one timeout for all.
pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(900)]
log = logging.getLogger(__name__)

USERS = "ml"


@dataclass
class Delivery:
    landscape: Landscape

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
        yield Delivery(landscape)
    finally:
        landscape.stop()


@dataclass(frozen=True)
class Installed:
    """The module as KLM installed it, with the Gpu Ready through it."""

    ready: dict[str, Any]
    """The Gpu, Ready."""
    module: dict[str, Any]
    """KLM's status of the module in the Kyma, Ready at 0.1.0."""
    release_uid: str
    """The HelmRelease's uid: the upgrade must keep the object."""
    pods: frozenset[str]
    """The names of the manager's pods: the upgrade must replace them."""


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


@pytest.fixture(scope="module")
def enabled(delivery: Delivery) -> dict[str, Any]:
    """The module enabled as an admin does it; the manager's Deployment, Available."""
    d, cluster = delivery, delivery.cluster
    wait_until(
        lambda: d.klm.kyma(SKR_NAMESPACE, SKR_KYMA), 120, "KLM's SKR Kyma kyma-system/default"
    )
    d.klm.enable("gpu")  # what an admin does
    return wait_until(lambda: _deployment_available(cluster, "0.1.0"), 300,
                      "the manager Deployment Available, from the pushed image")  # fmt: skip


@pytest.fixture(scope="module")
def default_gpu(delivery: Delivery, enabled: dict[str, Any]) -> dict[str, Any]:
    """The Gpu KLM created from the template's spec.data, before anyone changed it."""
    return wait_until(lambda: gpu(delivery.cluster), 120, "the default Gpu")


@pytest.fixture(scope="module")
def installed(delivery: Delivery, default_gpu: dict[str, Any]) -> Installed:
    """The chart from a mirror, as an admin of a cluster without internet would set it; then
    the Gpu Ready through the module and KLM's module state Ready."""
    d, cluster = delivery, delivery.cluster
    mirror = {"chartRepository": d.landscape.flux.helm_repo_url, "insecure": True}
    cluster.kubectl("patch", "gpu", "gpu", "--type=merge", "-p",
                    json.dumps({"spec": {"source": mirror}}))  # fmt: skip
    ready = wait_until(lambda: gpu_ready(cluster), 420, "the Gpu Ready through the module")
    module = wait_until(lambda: _module_ready(d, "0.1.0"), 240, "KLM's module state Ready")
    release_uid = (helm_release(cluster) or {})["metadata"]["uid"]
    pods = frozenset(p["metadata"]["name"] for p in manager_pods(cluster))
    return Installed(ready, module, release_uid, pods)


def test_klm_deploys_the_manager_from_the_pushed_image(
    delivery: Delivery, enabled: dict[str, Any]
) -> None:
    image = enabled["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith(
        f"{delivery.landscape.registry.host}/kyma-project/gpu-manager:0.1.0@sha256:"
    )


def test_the_manager_pods_are_on_the_real_node(delivery: Delivery, enabled: dict[str, Any]) -> None:
    pods = manager_pods(delivery.cluster)
    assert {p["spec"].get("nodeName") for p in pods} == {delivery.node.name}, "on the real node"


def test_every_manager_pod_runs_in_containerd(delivery: Delivery, enabled: dict[str, Any]) -> None:
    pods = manager_pods(delivery.cluster)
    running = delivery.node.running_pods()
    assert {f"{SKR_NAMESPACE}/{p['metadata']['name']}" for p in pods} <= running, (
        "every manager pod runs in containerd"
    )


def test_klm_creates_the_default_gpu_from_the_templates_data(default_gpu: dict[str, Any]) -> None:
    assert default_gpu["spec"] == {} or default_gpu["spec"].get("source") is None


def test_the_gpu_turns_ready_with_the_chart_from_a_mirror(installed: Installed) -> None:
    assert (condition(installed.ready, "ReleaseReady") or {}).get("status") == "True"


def test_klm_reports_the_module_ready_on_the_regular_channel(installed: Installed) -> None:
    assert installed.module["channel"] == "regular"


def test_klms_manifest_of_the_module_is_ready(delivery: Delivery, installed: Installed) -> None:
    name = installed.module["manifest"]["metadata"]["name"]
    manifest = delivery.cluster.get_object(
        "manifests.operator.kyma-project.io", name, KCP_NAMESPACE
    )
    assert ((manifest or {}).get("status") or {}).get("state") == "Ready"


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


@pytest.fixture(scope="module")
def manager(delivery: Delivery, installed: Installed) -> list[dict[str, Any]]:
    """The manager's pods once the module is installed, as the API shows them."""
    return manager_pods(delivery.cluster)


def _name(pod: dict[str, Any]) -> str:
    name: str = pod["metadata"]["name"]
    return name


def _manager_status(delivery: Delivery, pod: dict[str, Any]) -> dict[str, str]:
    return _proc_status(delivery.node.container_pid(pod, "manager"))


def test_the_deployment_runs_two_manager_pods(manager: list[dict[str, Any]]) -> None:
    assert len(manager) == 2


def test_no_manager_container_restarted(manager: list[dict[str, Any]]) -> None:
    for pod in manager:
        statuses = pod["status"]["containerStatuses"]
        assert [s["restartCount"] for s in statuses] == [0], f"{_name(pod)} restarted: {statuses}"


def test_the_manager_runs_as_uid_65532(delivery: Delivery, manager: list[dict[str, Any]]) -> None:
    for pod in manager:
        status = _manager_status(delivery, pod)
        assert set(status["Uid"].split()) == {"65532"}, f"{_name(pod)} runs as uid {status['Uid']}"


def test_the_manager_has_no_capabilities(delivery: Delivery, manager: list[dict[str, Any]]) -> None:
    for pod in manager:
        assert int(_manager_status(delivery, pod)["CapEff"], 16) == 0, "all capabilities dropped"


def test_the_manager_cannot_gain_privileges(
    delivery: Delivery, manager: list[dict[str, Any]]
) -> None:
    for pod in manager:
        status = _manager_status(delivery, pod)
        assert status["NoNewPrivs"] == "1", "allowPrivilegeEscalation: false"


def test_the_manager_runs_under_the_runtime_default_seccomp_filter(
    delivery: Delivery, manager: list[dict[str, Any]]
) -> None:
    for pod in manager:
        status = _manager_status(delivery, pod)
        assert status["Seccomp"] == "2", "the RuntimeDefault seccomp filter"


def test_the_managers_memory_is_limited_to_512_mib(
    delivery: Delivery, manager: list[dict[str, Any]]
) -> None:
    for pod in manager:
        pid = delivery.node.container_pid(pod, "manager")
        rss_kib = int(_proc_status(pid)["VmRSS"].split()[0])
        print(f"{_name(pod)}: RSS {rss_kib / 1024:.1f} MiB")
        assert _memory_limit(pid) == 512 * 1024 * 1024


def test_the_images_user_has_no_passwd_entry(
    delivery: Delivery, manager: list[dict[str, Any]]
) -> None:
    no_entry = "import os, pwd\ntry: pwd.getpwuid(os.getuid())\nexcept KeyError: print('none')"
    for pod in manager:
        assert _exec(delivery.cluster, _name(pod), "python3", "-c", no_entry) == "none", (
            "containerd writes no passwd entry for the image's user (podman would)"
        )


def test_the_managers_root_filesystem_is_read_only(
    delivery: Delivery, manager: list[dict[str, Any]]
) -> None:
    for pod in manager:
        assert "Read-only file system" in _exec(
            delivery.cluster, _name(pod), "sh", "-c", "touch /opt/venv/x 2>&1 || true")  # fmt: skip


def test_the_manager_has_its_service_account_of_kyma_system(
    delivery: Delivery, manager: list[dict[str, Any]]
) -> None:
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    for pod in manager:
        assert _exec(delivery.cluster, _name(pod), "cat", f"{sa}/namespace") == SKR_NAMESPACE


def test_the_manager_knows_its_pod_name(delivery: Delivery, manager: list[dict[str, Any]]) -> None:
    for pod in manager:
        assert _exec(delivery.cluster, _name(pod), "sh", "-c", "echo $POD_NAME") == _name(pod)


def test_the_manager_is_given_the_helm_controllers_image(
    delivery: Delivery, manager: list[dict[str, Any]]
) -> None:
    for pod in manager:
        assert "KYMA_GPU_FLUX_HELM_CONTROLLER_IMAGE=" in _exec(delivery.cluster, _name(pod), "env")


def test_the_manager_serves_its_metrics(delivery: Delivery, manager: list[dict[str, Any]]) -> None:
    scrape = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8081/metrics').read())"
    for pod in manager:
        assert "kyma_gpu_" in _exec(delivery.cluster, _name(pod), "python3", "-c", scrape)


def test_the_readiness_endpoint_answers_from_the_node(manager: list[dict[str, Any]]) -> None:
    for pod in manager:
        ip = pod["status"]["podIP"]
        with urllib.request.urlopen(f"http://{ip}:8081/readyz", timeout=5) as answer:
            assert answer.status == 200  # the readiness probe's endpoint, from the node


def test_a_manager_pod_holds_the_leader_lease(
    delivery: Delivery, manager: list[dict[str, Any]]
) -> None:
    lease = delivery.cluster.get_object("lease", "kyma-gpu-manager", SKR_NAMESPACE)
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    assert holder in {_name(p) for p in manager}, f"the Lease holder {holder!r}"


def test_the_managers_log_reads_through_the_api(
    delivery: Delivery, manager: list[dict[str, Any]]
) -> None:
    logs = delivery.cluster.kubectl("logs", "-n", SKR_NAMESPACE, _name(manager[0]),
                                    "-c", "manager").stdout  # fmt: skip
    assert logs.strip(), "the container's log, through the API and the kubelet"


@pytest.fixture(scope="module")
def upgraded(delivery: Delivery, installed: Installed) -> dict[str, Any]:
    """0.1.1 offered on the regular channel, and what it moves settled: the manager's
    Deployment rolled, its 0.1.0 pods gone, KLM's module state Ready at 0.1.1. The Gpu, Ready
    after the upgrade."""
    d, cluster = delivery, delivery.cluster
    d.klm.offer(d.landscape.releases["0.1.1"], {"regular": "0.1.1"})
    wait_until(lambda: _deployment_available(cluster, "0.1.1"), 420,
               "the manager Deployment rolled to 0.1.1")  # fmt: skip
    wait_until(lambda: not installed.pods & {_name(p) for p in manager_pods(cluster)},
               120, "the 0.1.0 pods gone")  # fmt: skip
    wait_until(lambda: _module_ready(d, "0.1.1"), 240, "KLM's module state Ready at 0.1.1")
    return wait_until(lambda: gpu_ready(cluster), 240, "the Gpu Ready after the upgrade")


def test_an_upgrade_through_the_channel_replaces_the_manager(
    delivery: Delivery, installed: Installed, upgraded: dict[str, Any]
) -> None:
    assert _deployment_available(delivery.cluster, "0.1.1"), "the manager Deployment at 0.1.1"
    pods = {_name(p) for p in manager_pods(delivery.cluster)}
    assert not installed.pods & pods, f"0.1.0 pods {sorted(installed.pods)}, now {sorted(pods)}"


def test_the_upgrade_keeps_the_gpu(installed: Installed, upgraded: dict[str, Any]) -> None:
    assert upgraded["metadata"]["uid"] == installed.ready["metadata"]["uid"], "the Gpu was kept"


def test_the_upgrade_keeps_the_helmrelease(
    delivery: Delivery, installed: Installed, upgraded: dict[str, Any]
) -> None:
    release = helm_release(delivery.cluster) or {}
    assert release["metadata"]["uid"] == installed.release_uid, "the HelmRelease was kept"


@pytest.fixture(scope="module")
def held(delivery: Delivery, upgraded: dict[str, Any]) -> dict[str, Any]:
    """A user's GPU pod running and a HelmRepository of theirs, then the module disabled: the
    Gpu's WorkloadsProtected condition."""
    d, cluster = delivery, delivery.cluster
    cluster.create_namespace(USERS)
    cluster.apply(_user_gpu_pod(), d.landscape.flux.helm_repository("users-charts", USERS))
    wait_until(lambda: (cluster.get_object("pod", "train", USERS) or {}).get("status", {})
               .get("phase") == "Running", 60, "ml/train Running")  # fmt: skip
    d.klm.disable()
    return wait_until(lambda: condition(gpu(cluster), "WorkloadsProtected"), 180,
                      "the Gpu waiting for the user's GPU pod")  # fmt: skip


@pytest.fixture(scope="module")
def disabled(delivery: Delivery, held: dict[str, Any]) -> None:
    """The documented way out: the admin decides the workloads may lose their driver. Then KLM
    removes the manager, and the module from the Kyma."""
    d, cluster = delivery, delivery.cluster
    cluster.kubectl("annotate", "gpu", "gpu", "gpu.kyma-project.io/skip-workload-protection=true")
    wait_until(lambda: cluster.get_object("deployment", "gpu-manager", SKR_NAMESPACE) is None,
               420, "the manager Deployment removed by KLM")  # fmt: skip
    wait_until(lambda: d.klm.module_status("gpu") is None, 240, "the module gone from the Kyma")


def test_disabling_waits_for_the_users_gpu_pod(held: dict[str, Any]) -> None:
    assert "ml/train" in held["message"]


def test_disabling_removes_the_gpu_crd(delivery: Delivery, disabled: None) -> None:
    gone = delivery.cluster.kubectl("get", "crd", "gpus.gpu.kyma-project.io",
                                    "--ignore-not-found", "-o", "name").stdout.strip()  # fmt: skip
    assert gone == "", "the Gpu CRD went with the module"


def test_disabling_removes_the_helmreleases(delivery: Delivery, disabled: None) -> None:
    cluster = delivery.cluster
    assert cluster.list_objects("helmreleases.helm.toolkit.fluxcd.io", SKR_NAMESPACE) == []


def test_disabling_leaves_no_manager_container(delivery: Delivery, disabled: None) -> None:
    d = delivery
    wait_until(lambda: not {p for p in d.node.running_pods() if p.startswith(SKR_NAMESPACE)},
               120, "no manager container left in containerd")  # fmt: skip


# The user's own objects are untouched.


def test_disabling_leaves_the_users_gpu_pod_running(delivery: Delivery, disabled: None) -> None:
    pod = delivery.cluster.get_object("pod", "train", USERS)
    assert (pod or {})["status"]["phase"] == "Running"


def test_disabling_leaves_the_users_helmrepository(delivery: Delivery, disabled: None) -> None:
    assert delivery.cluster.get_object(
        "helmrepositories.source.toolkit.fluxcd.io", "users-charts", USERS
    )


def test_disabling_leaves_the_users_namespace(delivery: Delivery, disabled: None) -> None:
    assert delivery.cluster.get_object("namespace", USERS) is not None


def test_disabling_leaves_the_kyma_system_namespace(delivery: Delivery, disabled: None) -> None:
    assert delivery.cluster.get_object("namespace", SKR_NAMESPACE) is not None


def _user_gpu_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train", "namespace": USERS},
        "spec": {"containers": [{"name": "train", "image": "nvcr.io/nvidia/cuda:12.4.0-base",
                                 "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }  # fmt: skip
