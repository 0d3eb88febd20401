"""Flux end to end: the real source-controller and helm-controller install, upgrade,
drift-correct and uninstall the NVIDIA GPU Operator chart (served from a local Helm
repository) as the operator asks. Tests run in file order and build on each other.

The NVIDIA GPU operator controller itself cannot be built here (its Go module at the chart's
versions is not served by the module proxy), so the operand DaemonSets it would create are
created by the test with the upstream names and labels, and the ClusterPolicy status it would
write is written by the test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.module import (
    MODULE_NAMESPACE,
    TARGET_NAMESPACE,
    OperatorProcess,
    condition,
    gpu,
    helm_release,
    module_on,
    operator_writes,
    remove_stand_in,
    stand_in_for_the_gpu_operator,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

TIMINGS: dict[str, float] = {}
WRITES: dict[str, int] = {}


@pytest.fixture(scope="module")
def stack(local_cluster: LocalCluster, flux_stack: FluxStack) -> Iterator[OperatorProcess]:
    with module_on(local_cluster, name="operator-e2e") as process:
        yield process
    print(f"\nFlux e2e timings (s): {json.dumps(TIMINGS)}\noperator writes: {WRITES}")


def _gpu_manifest(flux: FluxStack, **spec: Any) -> dict[str, Any]:
    source = {"chartRepository": flux.helm_repo_url, "insecure": True}
    return {
        "apiVersion": "gpu.kyma-project.io/v1beta1",
        "kind": "Gpu",
        "metadata": {"name": "gpu"},
        "spec": {"source": source, **spec},
    }


def _patch_spec(cluster: LocalCluster, spec: dict[str, Any]) -> None:
    cluster.kubectl(
        "patch", "gpus.gpu.kyma-project.io", "gpu", "--type=merge", "-p", json.dumps({"spec": spec})
    )


def _release_ready(cluster: LocalCluster, chart_version: str | None = None) -> dict[str, Any]:
    hr = helm_release(cluster)
    if not hr:
        return {}
    ready = condition(hr, "Ready")
    generation = hr["metadata"]["generation"]
    if not ready or ready["status"] != "True" or ready.get("observedGeneration") != generation:
        return {}
    history = (hr.get("status") or {}).get("history") or [{}]
    if chart_version and history[0].get("chartVersion") != chart_version:
        return {}
    return hr


def _cluster_policy(cluster: LocalCluster) -> dict[str, Any]:
    return cluster.get_object("clusterpolicies.nvidia.com", "cluster-policy") or {}


def _state(cluster: LocalCluster) -> str:
    return str(((gpu(cluster) or {}).get("status") or {}).get("state", ""))


def _watch_states(cluster: LocalCluster, until: str, timeout: float, what: str) -> list[str]:
    """Poll the Gpu state until `until`; return the distinct states seen, in order."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _state(cluster)
        if state and (not seen or seen[-1] != state):
            seen.append(state)
        if state == until:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; states seen: {seen}")


def test_install(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    began = time.monotonic()
    writes_before = len(operator_writes(local_cluster))
    local_cluster.apply(_gpu_manifest(flux_stack, operatorVersion="v26.3.3"))
    wait_until(lambda: _release_ready(local_cluster, "v26.3.3"), 300, "HelmRelease Ready")
    TIMINGS["apply_to_release_ready"] = round(time.monotonic() - began, 1)

    policy = wait_until(lambda: _cluster_policy(local_cluster), 30, "ClusterPolicy")
    driver = policy["spec"]["driver"]
    assert driver["usePrecompiled"] is True
    assert str(driver["version"]) == "590"
    assert driver["repository"] == "ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0"
    assert policy["spec"]["toolkit"]["installDir"] == "/opt/nvidia"

    nfd = wait_until(
        lambda: next(
            (
                d
                for d in local_cluster.list_objects("daemonsets", TARGET_NAMESPACE)
                if "node-feature-discovery-worker" in d["metadata"]["name"]
                and d.get("status", {}).get("numberAvailable") == 3
            ),
            None,
        ),
        60,
        "the NFD worker DaemonSet ready on the three kwok nodes",
    )
    assert nfd["status"]["desiredNumberScheduled"] == 3

    def release_ready() -> dict[str, Any] | None:
        cond = condition(gpu(local_cluster), "ReleaseReady")
        return cond if cond and cond["status"] == "True" else None

    release = wait_until(release_ready, 30, "ReleaseReady=True mirrored from the HelmRelease")
    assert "HelmRelease kyma-system/gpu-operator" in release["message"]

    stand_in_for_the_gpu_operator(local_cluster)
    wait_until(lambda: _state(local_cluster) == "Ready", 180, "Gpu Ready")
    TIMINGS["apply_to_gpu_ready"] = round(time.monotonic() - began, 1)
    status = (gpu(local_cluster) or {})["status"]
    assert status["installedChartVersion"] == "v26.3.3"
    WRITES["install"] = len(operator_writes(local_cluster)) - writes_before


def test_upgrade_on_values_change(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    writes_before = len(operator_writes(local_cluster))
    began = time.monotonic()
    _patch_spec(local_cluster, {"driver": {"version": "580"}})
    states = _watch_states(local_cluster, "Processing", 30, "Processing after the spec change")
    wait_until(
        lambda: (
            str(_cluster_policy(local_cluster).get("spec", {}).get("driver", {}).get("version"))
            == "580"
        ),
        300,
        "ClusterPolicy driver.version 580",
    )
    states += _watch_states(local_cluster, "Ready", 120, "Ready after the upgrade")
    assert "Processing" in states, states
    assert states[-1] == "Ready", states
    TIMINGS["values_upgrade_to_ready"] = round(time.monotonic() - began, 1)
    hr = helm_release(local_cluster) or {}
    assert (hr.get("status") or {}).get("history", [{}])[0].get("version", 0) >= 2
    WRITES["upgrade"] = len(operator_writes(local_cluster)) - writes_before


def test_upgrade_on_chart_bump_replaces_crds(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    assert local_cluster.get_object("crd", "gpuclusters.nvidia.com") is None  # new in v26.7.0
    began = time.monotonic()
    _patch_spec(local_cluster, {"operatorVersion": "v26.7.0"})
    wait_until(lambda: _release_ready(local_cluster, "v26.7.0"), 300, "release at v26.7.0")
    assert local_cluster.get_object("crd", "gpuclusters.nvidia.com") is not None
    wait_until(
        lambda: (
            ((gpu(local_cluster) or {}).get("status") or {}).get("installedChartVersion")
            == "v26.7.0"
        ),
        60,
        "status installedChartVersion",
    )
    stand_in_for_the_gpu_operator(local_cluster)  # the upgrade re-rendered the ClusterPolicy
    wait_until(lambda: _state(local_cluster) == "Ready", 120, "Ready on v26.7.0")
    TIMINGS["chart_bump_to_ready"] = round(time.monotonic() - began, 1)


def _request_reconcile(cluster: LocalCluster) -> None:
    cluster.kubectl(
        "annotate",
        "helmreleases.helm.toolkit.fluxcd.io",
        "gpu-operator",
        "-n",
        MODULE_NAMESPACE,
        "--overwrite",
        f"reconcile.fluxcd.io/requestedAt={time.time()}",
    )


def test_drift_is_corrected(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    deployment = "gpu-operator"
    assert local_cluster.get_object("deployment", deployment, TARGET_NAMESPACE) is not None
    local_cluster.kubectl("delete", "deployment", deployment, "-n", TARGET_NAMESPACE)
    local_cluster.kubectl("delete", "clusterpolicies.nvidia.com", "cluster-policy", "--wait=true")
    _request_reconcile(local_cluster)
    wait_until(
        lambda: local_cluster.get_object("deployment", deployment, TARGET_NAMESPACE),
        120,
        "Flux restoring the deleted Deployment",
    )
    wait_until(lambda: _cluster_policy(local_cluster), 60, "Flux restoring the ClusterPolicy")
    stand_in_for_the_gpu_operator(local_cluster)
    wait_until(lambda: _state(local_cluster) == "Ready", 120, "Ready after drift correction")


def _error_message(cluster: LocalCluster) -> str:
    g = gpu(cluster) or {}
    status = g.get("status") or {}
    return str(status.get("message", "")) if status.get("state") in ("Error", "Warning") else ""


@pytest.mark.parametrize(
    ("case", "spec", "expect"),
    [
        ("missing chart version", {"operatorVersion": "v99.0.0"}, "v99.0.0"),
        (
            "unreachable repository",
            {"source": {"chartRepository": "http://127.0.0.1:9", "insecure": True}},
            "127.0.0.1:9",
        ),
    ],
)
def test_failures_are_mirrored_and_recover(
    local_cluster: LocalCluster,
    flux_stack: FluxStack,
    stack: OperatorProcess,
    case: str,
    spec: dict[str, Any],
    expect: str,
) -> None:
    good = _gpu_manifest(flux_stack, operatorVersion="v26.7.0", driver={"version": "580"})["spec"]
    _patch_spec(local_cluster, spec)
    message = wait_until(lambda: _error_message(local_cluster), 180, f"{case}: Error/Warning")
    assert expect in message, message
    _patch_spec(local_cluster, good)
    _request_reconcile(local_cluster)
    wait_until(lambda: _state(local_cluster) == "Ready", 240, f"{case}: recovered")


def test_uninstall(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    writes_before = len(operator_writes(local_cluster))
    remove_stand_in(local_cluster)  # not part of the release: the NVIDIA operator's own
    began = time.monotonic()
    local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    wait_until(lambda: gpu(local_cluster) is None, 300, "the Gpu gone after Flux uninstalled")
    TIMINGS["delete_to_gone"] = round(time.monotonic() - began, 1)
    assert helm_release(local_cluster) is None
    assert (
        local_cluster.list_objects("helmrepositories.source.toolkit.fluxcd.io", MODULE_NAMESPACE)
        == []
    )
    assert local_cluster.list_objects("deployments", TARGET_NAMESPACE) == []
    assert local_cluster.list_objects("daemonsets", TARGET_NAMESPACE) == []
    secrets = local_cluster.list_objects("secrets", TARGET_NAMESPACE, selector="owner=helm")
    assert secrets == [], "Helm release records left behind"
    assert _cluster_policy(local_cluster) == {}
    # What the docs say stays: the chart's CRDs.
    assert local_cluster.get_object("crd", "clusterpolicies.nvidia.com") is not None
    WRITES["uninstall"] = len(operator_writes(local_cluster)) - writes_before
