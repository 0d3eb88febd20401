"""The local cluster harness itself: real control plane, kwok nodes, Flux."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.harness.binaries import tool_versions
from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack, helm_release
from tests.harness.procs import wait_for

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"
GPU_OPERATOR_VERSION = "v26.3.3"


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


@pytest.mark.integration
def test_api_server_answers(local_cluster: LocalCluster) -> None:
    version = local_cluster.kubectl("version", "-o", "json").stdout
    assert tool_versions()["KUBERNETES_VERSION"] in version
    assert local_cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    namespaces = {ns["metadata"]["name"] for ns in local_cluster.list_objects("namespaces")}
    assert {"default", "kube-system"} <= namespaces


@pytest.mark.integration
def test_daemonset_gets_ready_on_kwok_nodes(
    local_cluster: LocalCluster, demo_fleet: list[str], namespace: str
) -> None:
    labels = {"app": "probe"}
    local_cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "pause", "image": PAUSE_IMAGE}]},
                },
            },
        }
    )
    nodes = len(demo_fleet)

    def ready() -> bool:
        ds = local_cluster.get_object("daemonset", "probe", namespace) or {}
        status = ds.get("status", {})
        return bool(
            status.get("observedGeneration") == ds["metadata"]["generation"]
            and status.get("desiredNumberScheduled") == nodes
            and status.get("numberReady") == nodes
            and status.get("numberAvailable") == nodes
        )

    wait_for(ready, 60, "DaemonSet probe ready on every node", interval=0.5)
    pods = local_cluster.list_objects("pods", namespace)
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == sorted(demo_fleet)
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert pod["status"]["podIP"]
        assert pod["status"]["containerStatuses"][0]["ready"] is True


def _gpu_pod(name: str, namespace: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": PAUSE_IMAGE,
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        },
    }


@pytest.mark.integration
def test_gpu_pod_runs_on_a_gpu_node(
    local_cluster: LocalCluster, demo_fleet: list[str], namespace: str
) -> None:
    local_cluster.apply(_gpu_pod("one-gpu", namespace, 1), _gpu_pod("too-many-gpus", namespace, 2))

    def running() -> bool:
        pod = local_cluster.get_object("pod", "one-gpu", namespace) or {}
        ready = _condition(pod, "Ready").get("status") == "True"
        return ready and pod["status"].get("phase") == "Running"

    wait_for(running, 60, "pod one-gpu Running and Ready", interval=0.5)
    pod = local_cluster.get_object("pod", "one-gpu", namespace)
    assert pod is not None
    node = local_cluster.get_object("node", pod["spec"]["nodeName"])
    assert node is not None
    assert node["metadata"]["labels"].get(GPU_LABEL) == "true"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"

    def unschedulable() -> bool:
        pod = local_cluster.get_object("pod", "too-many-gpus", namespace)
        return _condition(pod, "PodScheduled").get("reason") == "Unschedulable"

    wait_for(unschedulable, 60, "pod too-many-gpus reported Unschedulable", interval=0.5)


@pytest.mark.integration
def test_job_pods_complete_and_deleted_pods_go(
    local_cluster: LocalCluster, demo_fleet: list[str], namespace: str
) -> None:
    local_cluster.apply(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "once", "namespace": namespace},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": PAUSE_IMAGE}],
                    }
                }
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "guarded",
                "namespace": namespace,
                "finalizers": ["example.com/guard"],
            },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": PAUSE_IMAGE}],
            },
        },
    )

    local_cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "one-shot",
                "namespace": namespace,
                "annotations": {"harness.kyma-gpu.test/complete-after": "1s"},
            },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": PAUSE_IMAGE}],
            },
        }
    )

    def job_complete() -> bool:
        job = local_cluster.get_object("job", "once", namespace)
        return _condition(job, "Complete").get("status") == "True"

    wait_for(job_complete, 60, "Job once Complete", interval=0.5)
    wait_for(
        lambda: (
            (local_cluster.get_object("pod", "one-shot", namespace) or {})
            .get("status", {})
            .get("phase")
            == "Succeeded"
        ),
        60,
        "annotated pod one-shot Succeeded",
        interval=0.5,
    )
    wait_for(
        lambda: (
            (local_cluster.get_object("pod", "guarded", namespace) or {})
            .get("status", {})
            .get("phase")
            == "Running"
        ),
        60,
        "pod guarded Running",
        interval=0.5,
    )
    # A bare pod is not a Job: it keeps running until deleted.
    time.sleep(2)
    guarded = local_cluster.get_object("pod", "guarded", namespace)
    assert guarded is not None
    assert guarded["status"]["phase"] == "Running"
    local_cluster.kubectl("delete", "pod", "guarded", "-n", namespace, "--wait=false")
    wait_for(
        lambda: local_cluster.get_object("pod", "guarded", namespace) is None,
        30,
        "pod guarded gone (finalizer removed by kwok)",
        interval=0.5,
    )


@pytest.mark.integration
@pytest.mark.e2e
def test_flux_installs_gpu_operator_from_local_helm_repo(
    local_cluster: LocalCluster, flux_stack: FluxStack, demo_fleet: list[str]
) -> None:
    namespace = "harness-gpu-operator"  # not the module's: the Flux e2e test leaves that one
    crds_before = {crd["metadata"]["name"] for crd in local_cluster.list_objects("crds")}
    local_cluster.create_namespace(namespace)
    began = time.monotonic()
    local_cluster.apply(
        flux_stack.helm_repository("local-charts", namespace),
        helm_release(
            "gpu-operator", namespace, "gpu-operator", GPU_OPERATOR_VERSION, "local-charts"
        ),
    )
    try:

        def release_ready() -> bool:
            hr = local_cluster.get_object("helmrelease", "gpu-operator", namespace)
            ready = _condition(hr, "Ready")
            return bool(
                hr
                and ready.get("status") == "True"
                and ready.get("observedGeneration") == hr["metadata"]["generation"]
            )

        wait_for(
            release_ready,
            300,
            "HelmRelease gpu-operator Ready",
            interval=1.0,
            alive=list(flux_stack.processes.values()),
        )
        print(f"HelmRelease gpu-operator Ready after {time.monotonic() - began:.1f}s")
        hr = local_cluster.get_object("helmrelease", "gpu-operator", namespace)
        assert hr is not None
        assert hr["status"]["history"][0]["chartVersion"] == GPU_OPERATOR_VERSION

        operator = local_cluster.get_object("deployment", "gpu-operator", namespace)
        assert operator is not None
        assert operator["status"]["availableReplicas"] == 1
        daemonsets = local_cluster.list_objects("daemonsets", namespace)
        workers = [ds for ds in daemonsets if ds["metadata"]["name"].endswith("worker")]
        assert workers, [ds["metadata"]["name"] for ds in daemonsets]
        assert workers[0]["status"]["numberReady"] == len(demo_fleet)
    finally:
        # Uninstall through Flux, as the operator will: delete the HelmRelease
        # and wait until helm-controller has removed the release (its
        # post-delete hook Job needs the nodes, so before the fleet goes).
        local_cluster.kubectl(
            "delete", "helmrelease", "gpu-operator", "-n", namespace, "--wait=false", check=False
        )
        wait_for(
            lambda: local_cluster.get_object("helmrelease", "gpu-operator", namespace) is None,
            180,
            "HelmRelease gpu-operator uninstalled",
            interval=1.0,
        )
        # Helm never deletes CRDs; remove the chart's so later tests in the
        # session start from a cluster without them, and wait for the
        # namespace so it can be created again.
        crds = {crd["metadata"]["name"] for crd in local_cluster.list_objects("crds")}
        if crds - crds_before:
            local_cluster.kubectl("delete", "crd", *sorted(crds - crds_before), "--timeout=60s")
        local_cluster.kubectl("delete", "namespace", namespace, "--timeout=90s")
