"""The typed GPU operations on the local cluster, with the real Flux and the real NVIDIA GPU
Operator controller (tests/harness/nvidia.py): what the controller creates from
spec.driver.upgradePolicy, spec.sharing, a switch (the MIG manager with its strategy) and
spec.stack DRA. Tests run in file order and build on each other.

What is not shown here, said plainly: kwok nodes have no GPUs, so no device plugin runs; the
nodes' nvidia.com/gpu capacity is what the fleet file says and does not change with sharing.
The DRA kubelet plugin publishes no ResourceSlices, so the DRA validator pods cannot be
scheduled and the GPUCluster stays notReady; what is checked is what the controller renders.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.module import (
    TARGET_NAMESPACE,
    OperatorProcess,
    condition,
    gpu,
    module_on,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"
"""The node label the NVIDIA operator's upgrade controller walks through per node."""
DONE = "upgrade-done"
RESTING = {DONE, "upgrade-required", ""}
"""States of a node that is not being upgraded right now."""
BEFORE_RESTART = {"cordon-required", "wait-for-jobs-required", "pod-deletion-required",
                  "drain-required"}  # fmt: skip
"""States of a node being upgraded whose old driver pod still runs. The upgrade controller
counts the nodes in progress by their driver pods: while a restarted node's new driver pod is
not yet bound to it, that node is not counted and the next node may start. So with
maxParallelUpgrades 1 a second node can begin while the first restarts its driver, never while
the first is still being cordoned or emptied."""
POLICY = {
    "maxParallelUpgrades": 1,
    "maxUnavailable": "1",
    "gpuPodDeletion": {"timeoutSeconds": 120, "deleteEmptyDir": True},
    "drain": {"enable": False, "timeoutSeconds": 240},
}


@pytest.fixture(scope="module")
def stack(local_cluster: LocalCluster, flux_stack: FluxStack) -> Iterator[OperatorProcess]:
    with module_on(local_cluster, name="operator-operations") as process:
        yield process


def _patch(cluster: LocalCluster, spec: dict[str, Any]) -> None:
    cluster.kubectl("patch", "gpus.gpu.kyma-project.io", "gpu", "--type=merge",
                    "-p", json.dumps({"spec": spec}))  # fmt: skip


def _status(cluster: LocalCluster) -> dict[str, Any]:
    return dict((gpu(cluster) or {}).get("status") or {})


def _ready(cluster: LocalCluster) -> bool:
    obj = gpu(cluster) or {}
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    return status.get("state") == "Ready" and status.get("observedGeneration") == generation


def _policy(cluster: LocalCluster) -> dict[str, Any]:
    return cluster.get_object("clusterpolicies.nvidia.com", "cluster-policy") or {}


def _gpu_nodes(cluster: LocalCluster) -> list[str]:
    return [n["name"] for n in _status(cluster).get("nodes") or []]


def _upgrade_states(cluster: LocalCluster) -> dict[str, str]:
    states = {}
    for name in _gpu_nodes(cluster):
        labels = ((cluster.get_object("node", name) or {}).get("metadata") or {}).get("labels")
        states[name] = str((labels or {}).get(UPGRADE_STATE, ""))
    return states


def _daemonsets(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in cluster.list_objects("daemonsets", TARGET_NAMESPACE)}


def _container_env(ds: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    pod = ds["spec"]["template"]["spec"]
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        env.update({e["name"]: str(e.get("value", "")) for e in container.get("env") or []})
    return env


def test_upgrade_policy_reaches_the_controller(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    source = {"chartRepository": flux_stack.helm_repo_url, "insecure": True}
    local_cluster.apply({
        "apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu", "metadata": {"name": "gpu"},
        "spec": {"source": source, "driver": {"upgradePolicy": POLICY}},
    })  # fmt: skip
    wait_until(lambda: _ready(local_cluster), 300, "Ready with the upgrade policy")
    rendered = _policy(local_cluster)["spec"]["driver"]["upgradePolicy"]
    assert rendered["autoUpgrade"] is True
    assert rendered["maxParallelUpgrades"] == 1
    assert rendered["maxUnavailable"] == 1
    assert rendered["podDeletion"] == {"force": False, "timeoutSeconds": 120,
                                       "deleteEmptyDir": True}  # fmt: skip
    assert rendered["drain"]["enable"] is False
    assert rendered["drain"]["timeoutSeconds"] == 240


@pytest.mark.timeout(900)  # at least 2 minutes per node, the loop below bounds it at 600 s
def test_a_branch_change_rolls_node_by_node(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    """590 -> 580: the driver DaemonSet changes, then the upgrade controller takes one node at
    a time (maxParallelUpgrades 1) through its states, labelling each node as it goes."""
    _patch(local_cluster, {"driver": {"version": "580"}})
    seen: dict[str, list[str]] = {}
    overlaps: list[dict[str, str]] = []
    progress: list[str] = []
    reasons: Counter[str] = Counter()
    early: list[str] = []
    began = time.monotonic()
    while time.monotonic() - began < 600:
        states = _upgrade_states(local_cluster)
        driver = condition(gpu(local_cluster), "DriverReady") or {}
        message = str(driver.get("message", ""))
        # The rollout's progress; before it, DriverVersionPending, then DriverUpgrading "has
        # not yet begun" (the new template's pods wait for the controller).
        rolling = driver.get("reason") == "DriverUpgrading" and "replaces the driver" in message
        if rolling and message not in progress:
            progress.append(message)
        for name, state in states.items():
            if not seen.get(name) or seen[name][-1] != state:
                seen.setdefault(name, []).append(state)
        if sum(1 for s in states.values() if s not in RESTING) > 1:
            overlaps.append(states)
        # Both nodes through the rollout: a node's first label can be upgrade-done, put there
        # before the new driver template exists.
        moved = len(seen) == 2 and all(set(v) - RESTING for v in seen.values())
        ready = _ready(local_cluster)
        reasons[str(driver.get("reason"))] += 1
        if ready and not moved:
            early.append(str(driver.get("message")))
        if moved and all(s == DONE for s in states.values()) and ready:
            break
        time.sleep(0.5)
    print(f"\nupgrade states per node in {time.monotonic() - began:.0f}s: {seen}")
    print(f"DriverReady reasons (samples): {reasons}")
    # Ready only once both nodes run the new driver: not while the old DaemonSet still reads
    # ready before the NVIDIA operator renders the new one (DriverVersionPending).
    assert not early, f"Ready before the rollout: {early[:3]}"
    assert len(seen) == 2, seen
    for history in seen.values():
        assert history[-1] == DONE, seen
        assert any(state not in RESTING for state in history), f"a node never upgraded: {seen}"
    print(f"samples with two nodes in progress: {overlaps}")
    for states in overlaps:
        early = [n for n, s in states.items() if s in BEFORE_RESTART]
        assert len(early) < 2, f"maxParallelUpgrades 1, yet two nodes upgrading: {states}; {seen}"
    assert _status(local_cluster)["driverVersion"] == "580"
    # The Gpu said where the rollout was, from the same labels.
    print(f"DriverReady while upgrading: {progress}")
    assert any("pod-restart-required: " in m for m in progress), progress
    assert all(re.search(r"\([01]/2 nodes upgrade-done; ", m) for m in progress), progress


def test_auto_upgrade_off_hands_the_nodes_back(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    _patch(local_cluster, {"driver": {"upgradePolicy": {"autoUpgrade": False}}})
    wait_until(lambda: not any(_upgrade_states(local_cluster).values()), 180,
               "the upgrade state labels removed")  # fmt: skip
    preflight = condition(gpu(local_cluster), "Preflight") or {}
    assert "autoUpgrade is off" in preflight.get("message", "")
    wait_until(lambda: _ready(local_cluster), 120, "Ready without automatic upgrades")


def _plugin(cluster: LocalCluster) -> dict[str, Any]:
    return _daemonsets(cluster).get("nvidia-device-plugin-daemonset") or {}


def _config_volume(ds: dict[str, Any]) -> str | None:
    volumes = ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes") or []
    names = [v["configMap"]["name"] for v in volumes if "configMap" in v]
    return next((n for n in names if n.startswith("kyma-gpu-device-plugin-config")), None)


def _config_manager_env(ds: dict[str, Any]) -> dict[str, str]:
    containers = ds["spec"]["template"]["spec"]["containers"]
    manager = next(c for c in containers if c["name"] == "config-manager")
    return {e["name"]: str(e.get("value", "")) for e in manager.get("env") or []}


SHARING = {"mode": "TimeSlicing", "replicas": 4, "profiles": [{"name": "mps-2", "mode": "MPS",
                                                             "replicas": 2}]}  # fmt: skip


def test_sharing_configures_the_device_plugin(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    _patch(local_cluster, {"sharing": SHARING})
    wait_until(lambda: (_status(local_cluster).get("sharing") or {}).get("active"), 240,
               "status.sharing active")  # fmt: skip
    shown = _status(local_cluster)["sharing"]
    assert (shown["mode"], shown["replicas"], shown["profiles"]) == ("TimeSlicing", 4, ["mps-2"])
    config_map = shown["configMap"]
    data = (local_cluster.get_object("configmap", config_map, TARGET_NAMESPACE) or {})["data"]
    assert sorted(data) == ["default", "mps-2"]
    assert "timeSlicing:" in data["default"]
    assert "replicas: 4" in data["default"]
    assert "mps:" in data["mps-2"]
    assert _policy(local_cluster)["spec"]["devicePlugin"]["config"] == {
        "name": config_map, "default": "default"}  # fmt: skip
    # What the real controller makes of it: the files mounted into the device plugin, and its
    # config manager told the default (it reads nvidia.com/device-plugin.config per node).
    plugin = _plugin(local_cluster)
    assert _config_volume(plugin) == config_map
    assert _config_manager_env(plugin)["DEFAULT_CONFIG"] == "default"
    mps = _daemonsets(local_cluster)["nvidia-device-plugin-mps-control-daemon"]
    assert _config_volume(mps) == config_map
    # Not shown locally: the kwok nodes' capacity stays what the fleet says (no device plugin
    # runs to advertise replicas).
    for name in _gpu_nodes(local_cluster):
        node = local_cluster.get_object("node", name) or {}
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"


def test_a_sharing_change_rolls_the_device_plugin(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    """The NVIDIA operator does not watch the ConfigMap's data: a new name (its hash) is what
    changes the device plugin's template, so the new replicas reach the nodes."""
    before = _status(local_cluster)["sharing"]["configMap"]
    generation = _plugin(local_cluster)["metadata"]["generation"]
    _patch(local_cluster, {"sharing": {**SHARING, "replicas": 8}})
    wait_until(lambda: _config_volume(_plugin(local_cluster)) not in (None, before), 180,
               "the device plugin on the new ConfigMap")  # fmt: skip
    assert _plugin(local_cluster)["metadata"]["generation"] > generation
    wait_until(lambda: (_status(local_cluster).get("sharing") or {}).get("active"), 180,
               "the new configuration active")  # fmt: skip
    assert _status(local_cluster)["sharing"]["replicas"] == 8
    wait_until(lambda: local_cluster.get_object("configmap", before, TARGET_NAMESPACE) is None,
               60, "the old ConfigMap gone (Helm)")  # fmt: skip
    _patch(local_cluster, {"sharing": {"mode": "None", "replicas": None, "profiles": None}})
    wait_until(lambda: _config_volume(_plugin(local_cluster)) is None, 180,
               "the device plugin without a sharing configuration")  # fmt: skip
    assert "sharing" not in _status(local_cluster)


def _counted(ds: dict[str, Any] | None) -> dict[str, Any] | None:
    status = (ds or {}).get("status") or {}
    observed = status.get("observedGeneration")
    current = ds is not None and observed is not None and observed >= ds["metadata"]["generation"]
    return ds if current else None


def test_the_mig_manager_and_strategy(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    _patch(local_cluster, {"components": {"migManager": True, "migStrategy": "Mixed"}})
    mig = wait_until(lambda: _daemonsets(local_cluster).get("nvidia-mig-manager"), 180,
                     "the MIG manager DaemonSet")  # fmt: skip
    selector = mig["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {"nvidia.com/gpu.deploy.mig-manager": "true"}
    assert _policy(local_cluster)["spec"]["mig"]["strategy"] == "mixed"
    wait_until(lambda: _container_env(_plugin(local_cluster)).get("MIG_STRATEGY") == "mixed", 120,
               "the device plugin told the MIG strategy")  # fmt: skip
    # The L4 nodes have no MIG: the preflight says so, and no node takes the MIG manager (the
    # NVIDIA operator labels only nodes whose GPUs report MIG for it).
    preflight = condition(gpu(local_cluster), "Preflight") or {}
    assert preflight.get("reason") == "NoMigCapableGpus"
    # A DaemonSet's status reads 0 until its controller has looked at it: wait for that first.
    seen = wait_until(lambda: _counted(_daemonsets(local_cluster).get("nvidia-mig-manager")), 60,
                      "the MIG manager DaemonSet counted by its controller")  # fmt: skip
    assert seen["status"]["desiredNumberScheduled"] == 0
    _patch(local_cluster, {"components": {"migManager": False, "migStrategy": "Single"}})
    wait_until(lambda: "nvidia-mig-manager" not in _daemonsets(local_cluster), 180,
               "the MIG manager gone")  # fmt: skip


DRA_OPERANDS = ("nvidia-dra-driver-kubelet-plugin", "nvidia-dra-validator")


def _device_classes(cluster: LocalCluster) -> set[str]:
    return {c["metadata"]["name"] for c in cluster.list_objects("deviceclasses.resource.k8s.io")}


def _follows_gpu_cluster(cluster: LocalCluster) -> bool:
    components = condition(gpu(cluster), "ComponentsReady") or {}
    return _status(cluster).get("stack") == "DRA" and "GPUCluster gpu-cluster" in str(
        components.get("message", ""))  # fmt: skip


DRA_POLICY = "resourceslices-policy-nvidia-dra-driver"
POLICY_KINDS = ("validatingadmissionpolicies", "validatingadmissionpolicybindings")


def _the_controller_manages_its_policy_with_the_narrowed_rule(cluster: LocalCluster) -> None:
    """Door 8 (issue 20): the HelmRelease's post-renderer narrows the chart's unnamed
    admission-policy writes to the operator's own policy; the real controller still creates
    that policy and its binding with the narrowed ClusterRole, and nothing in the role may
    change or delete another admission policy (kyma-gpu-release among them)."""
    for kind in POLICY_KINDS:
        resource = f"{kind}.admissionregistration.k8s.io"
        wait_until(partial(cluster.get_object, resource, DRA_POLICY), 180,
                   f"the NVIDIA controller's {kind} {DRA_POLICY}")  # fmt: skip
    role = cluster.get_object("clusterrole", "gpu-operator")
    assert role is not None
    policy_rules = [r for r in role["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": list(POLICY_KINDS),
        "verbs": ["update", "delete"],
        "resourceNames": [DRA_POLICY],
    } in policy_rules
    for rule in policy_rules:
        assert rule.get("resourceNames") or not {"update", "patch", "delete"} & set(rule["verbs"])
    for kind in POLICY_KINDS:
        answer = cluster.kubectl("auth", "can-i", "delete", f"{kind}/kyma-gpu-release",
                                 "--as=system:serviceaccount:gpu-operator:gpu-operator",
                                 check=False)  # fmt: skip
        assert answer.stdout.strip() == "no", (kind, answer.stdout)


def test_the_dra_stack(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    """spec.stack DRA: the GPUCluster replaces the ClusterPolicy, drivers come from per-pool
    NVIDIADrivers, and the real controller renders the DRA driver and its DeviceClasses."""
    _patch(local_cluster, {"stack": "DRA", "operatorVersion": "v26.7.0"})
    cluster = wait_until(lambda: local_cluster.get_object("gpuclusters.nvidia.com", "gpu-cluster"),
                         240, "the GPUCluster")  # fmt: skip
    assert cluster["spec"]["draDriver"]["image"] == "dra-driver-nvidia-gpu"
    wait_until(lambda: not _policy(local_cluster), 120, "the ClusterPolicy gone")
    drivers = local_cluster.list_objects("nvidiadrivers.nvidia.com")
    assert [d["metadata"]["name"] for d in drivers] == ["gpu-gardenlinux"]
    assert drivers[0]["spec"]["upgradePolicy"]["maxParallelUpgrades"] == 1
    wait_until(lambda: "gpu.nvidia.com" in _device_classes(local_cluster), 180,
               "the DeviceClass gpu.nvidia.com")  # fmt: skip
    plugin = wait_until(lambda: _daemonsets(local_cluster).get(DRA_OPERANDS[0]), 180,
                        "the DRA kubelet plugin DaemonSet")  # fmt: skip
    assert plugin["metadata"]["labels"]["app"] == DRA_OPERANDS[0]
    _the_controller_manages_its_policy_with_the_narrowed_rule(local_cluster)
    wait_until(lambda: _follows_gpu_cluster(local_cluster), 180,
               "the Gpu status following the GPUCluster")  # fmt: skip
    status = _status(local_cluster)
    print(f"\nGPUCluster: {cluster.get('status')}; Gpu: {status['state']}: {status['message']}")
    preflight = condition(gpu(local_cluster), "Preflight") or {}
    assert "DraExperimental" not in preflight.get("reason", "")  # information, not a warning


def test_back_to_the_device_plugin(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    """The chart keeps the GPUCluster when spec.stack goes back (resource policy keep): the Gpu
    says so, with the command that ends it; once it is gone, the ClusterPolicy serves again."""
    _patch(local_cluster, {"stack": "DevicePlugin"})
    wait_until(lambda: (condition(gpu(local_cluster), "ComponentsReady") or {}).get("reason")
               == "StackConflict", 180, "StackConflict")  # fmt: skip
    assert _status(local_cluster)["state"] == "Error"
    assert "kubectl delete gpuclusters.nvidia.com gpu-cluster" in _status(local_cluster)["message"]
    local_cluster.kubectl("delete", "gpuclusters.nvidia.com", "gpu-cluster", "--timeout=120s")
    wait_until(lambda: _policy(local_cluster), 180, "the ClusterPolicy back")
    wait_until(lambda: _ready(local_cluster), 300, "Ready on the device plugin again")
