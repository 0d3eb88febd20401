"""Deleting the Gpu end to end: it waits only for users' GPU pods and says so (condition and
Event); the annotation skips that wait; and with helm-controller gone, the uninstall turns
Error past its bound and the documented way out (remove the named finalizers) ends it.

The operator runs with a values-rules copy whose HelmRelease uninstall timeout is 30s, so the
bound (timeout + 60s grace) passes within the test.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kyma_gpu.extensions.workload_protection.machine import SKIP_PROTECTION_ANNOTATION
from kyma_gpu.rules.catalog import ENV_RULES_DIR
from kyma_gpu.status.deletion import UNINSTALL_GRACE_SECONDS
from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.module import (
    MODULE_NAMESPACE,
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

UNINSTALL_TIMEOUT_SECONDS = 30  # the chart's pre-delete hook Job needs a few seconds
USERS = "ml"


@pytest.fixture(scope="module")
def stack(
    local_cluster: LocalCluster, flux_stack: FluxStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    rules = tmp_path_factory.mktemp("rules") / "values-rules"
    shutil.copytree(ROOT / "values-rules", rules)
    defaults = yaml.safe_load((rules / "defaults.yaml").read_text())
    defaults["flux"]["uninstallTimeout"] = f"{UNINSTALL_TIMEOUT_SECONDS}s"
    (rules / "defaults.yaml").write_text(yaml.safe_dump(defaults))
    local_cluster.create_namespace(USERS)
    env = {ENV_RULES_DIR: str(rules)}
    with module_on(local_cluster, name="operator-deletion", env=env) as process:
        yield process
    local_cluster.kubectl("delete", "namespace", USERS, "--wait=false", check=False)


def _install(cluster: LocalCluster, flux: FluxStack) -> None:
    source = {"chartRepository": flux.helm_repo_url, "insecure": True}
    cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                   "metadata": {"name": "gpu"}, "spec": {"source": source}})  # fmt: skip
    wait_until(lambda: _state(cluster) == "Ready", 240, "Gpu Ready", interval=0.5)


def _state(cluster: LocalCluster) -> str | None:
    return ((gpu(cluster) or {}).get("status") or {}).get("state")


def _pod(namespace: str, name: str, gpus: int) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "cuda:12", "resources": resources}],
                 "tolerations": [{"operator": "Exists"}]},
    }  # fmt: skip


def _phase(cluster: LocalCluster, namespace: str, name: str) -> str | None:
    pod = cluster.get_object("pod", name, namespace)
    return ((pod or {}).get("status") or {}).get("phase")


def _waiting_on(cluster: LocalCluster, type_: str, reason: str) -> dict[str, Any] | None:
    cond = condition(gpu(cluster), type_)
    return cond if cond is not None and cond.get("reason") == reason else None


def _gpu_events(cluster: LocalCluster) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "events", "-A", "-o", "json",
        "--field-selector", "involvedObject.kind=Gpu,involvedObject.name=gpu",
    ).stdout  # fmt: skip
    return list(json.loads(out)["items"])


def _delete_pod(cluster: LocalCluster, namespace: str, name: str) -> None:
    cluster.kubectl("delete", "pod", name, "-n", namespace, "--grace-period=0", "--force",
                    "--ignore-not-found", "--wait=true")  # fmt: skip


def test_deletion_waits_only_for_users_gpu_pods_and_says_so(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    _install(local_cluster, flux_stack)
    for namespace, name, gpus in ((USERS, "train", 1), (USERS, "web", 0),
                                  (TARGET_NAMESPACE, "stuck-validator", 64)):  # fmt: skip
        local_cluster.apply(_pod(namespace, name, gpus))
    wait_until(lambda: _phase(local_cluster, USERS, "train") == "Running", 60, "ml/train Running")
    assert _phase(local_cluster, TARGET_NAMESPACE, "stuck-validator") == "Pending"

    local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    held = wait_until(
        lambda: _waiting_on(local_cluster, "WorkloadsProtected", "GpuWorkloadsRunning"),
        60, "the deletion waiting for GPU pods",
    )  # fmt: skip
    assert "1 pod that uses GPUs" in held["message"]
    assert f"{USERS}/train" in held["message"]
    assert "stuck-validator" not in held["message"]  # the stack's own pod does not count
    assert f"{USERS}/web" not in held["message"]  # no GPU, no wait
    assert _state(local_cluster) == "Warning"
    assert helm_release(local_cluster) is not None  # nothing uninstalled yet

    waits = "deletion waits for 1 pod that uses GPUs"
    events = wait_until(
        lambda: [e for e in _gpu_events(local_cluster) if waits in e["message"]],
        30, "an Event on the wait",
    )  # fmt: skip
    assert events[0]["reason"] == "Deleting"
    assert events[0]["type"] == "Warning"
    # In the module's namespace, counting users' pods without naming them (issue 32).
    assert events[0]["metadata"]["namespace"] == MODULE_NAMESPACE
    assert f"{USERS}/train" not in events[0]["message"]
    listed = local_cluster.kubectl("events", "-n", MODULE_NAMESPACE,
                                   "--for", "gpus.gpu.kyma-project.io/gpu").stdout  # fmt: skip
    assert waits in listed, listed

    _delete_pod(local_cluster, USERS, "train")
    wait_until(lambda: gpu(local_cluster) is None, 180, "the Gpu gone after the pod went")
    assert helm_release(local_cluster) is None
    messages = [e["message"] for e in _gpu_events(local_cluster)]
    assert any(m.startswith("Flux is uninstalling the GPU stack") for m in messages), messages
    _delete_pod(local_cluster, TARGET_NAMESPACE, "stuck-validator")


def test_the_way_out_skip_annotation_and_a_stalled_uninstall(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    _install(local_cluster, flux_stack)
    local_cluster.apply(_pod(USERS, "train", 1))
    wait_until(lambda: _phase(local_cluster, USERS, "train") == "Running", 60, "ml/train Running")
    flux_stack.stop_controller("helm-controller")
    try:
        local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
        wait_until(
            lambda: _waiting_on(local_cluster, "WorkloadsProtected", "GpuWorkloadsRunning"),
            60, "the deletion waiting for GPU pods",
        )  # fmt: skip
        local_cluster.kubectl("annotate", "gpus.gpu.kyma-project.io", "gpu",
                              f"{SKIP_PROTECTION_ANNOTATION}=true")  # fmt: skip
        wait_until(
            lambda: _waiting_on(local_cluster, "Uninstalled", "UninstallInProgress"),
            60, "the uninstall under way despite the pod",
        )  # fmt: skip
        skipped = condition(gpu(local_cluster), "WorkloadsProtected") or {}
        assert skipped.get("reason") == "ProtectionSkipped"
        assert _phase(local_cluster, USERS, "train") == "Running"

        bound = round(UNINSTALL_TIMEOUT_SECONDS + UNINSTALL_GRACE_SECONDS)
        stalled = wait_until(
            lambda: _waiting_on(local_cluster, "Uninstalled", "UninstallStalled"),
            bound + 60, "the uninstall reported as stalled",
        )  # fmt: skip
        hr = f"HelmRelease/{MODULE_NAMESPACE}/gpu-operator"
        assert hr in stalled["message"]
        assert f"within {bound}s" in stalled["message"]
        assert _state(local_cluster) == "Error"
        warnings = [e for e in _gpu_events(local_cluster) if "has not removed" in e["message"]]
        assert warnings
        assert warnings[0]["type"] == "Warning"

        # The documented next step (docs/troubleshooting.md): remove the named finalizers.
        local_cluster.kubectl("patch", "helmreleases.helm.toolkit.fluxcd.io", "gpu-operator",
                              "-n", MODULE_NAMESPACE, "--type=merge",
                              "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
        wait_until(lambda: gpu(local_cluster) is None, 60, "the Gpu gone after the way out")
    finally:
        flux_stack.start_controller("helm-controller")
        _delete_pod(local_cluster, USERS, "train")

    # Nothing lost: the chart left behind is adopted by a new Gpu, and a normal deletion
    # with helm-controller back removes it.
    _install(local_cluster, flux_stack)
    local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    wait_until(lambda: gpu(local_cluster) is None, 180, "the Gpu gone with helm-controller back")
    assert local_cluster.get_object("deployment", "gpu-operator", TARGET_NAMESPACE) is None
