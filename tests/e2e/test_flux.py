"""Flux end to end on Garden Linux: the real source-controller and helm-controller install,
upgrade, drift-correct and uninstall the NVIDIA GPU Operator chart (served from a local Helm
repository) as the operator asks, and the real NVIDIA GPU Operator controller (run by the
harness while the chart is installed, at the chart's version, as the chart's ServiceAccount;
see tests/harness/nvidia.py) creates the operands from the module's values. Nothing here
creates an operand DaemonSet or writes a ClusterPolicy status. Tests run in file order and
build on each other.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.chart_sources import allow_chart_sources, local_source
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
    operator_writes,
    wait_until,
)
from tests.harness.nodes import DEMO_FLEET
from tests.harness.nvidia import NAMESPACE as NVIDIA_SA_NAMESPACE
from tests.harness.nvidia import SERVICE_ACCOUNT as NVIDIA_SA

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
    # Watched from the apply on, beside the waits below: the operands can start (and the Gpu
    # become Ready) before those waits end on a fast machine.
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        watch = pool.submit(_watch_components, local_cluster, 480, stop)
        _install_checks(local_cluster)
        seen, policy_states = watch.result()
    finally:
        stop.set()  # a failed check above ends the watch at once
        pool.shutdown(wait=True)
    TIMINGS["apply_to_gpu_ready"] = round(time.monotonic() - began, 1)
    # Never Ready before the components are: every earlier ComponentsReady said what it waited
    # for, the ClusterPolicy's state or the operand DaemonSets. The real controller can report
    # ready while a DaemonSet it just created has no status yet (nothing unavailable counted),
    # so the DaemonSets may be the only thing the Gpu waits for. A notReady the controller held
    # for seconds is mirrored.
    before_ready = [m for status, m in seen if status != "True"]
    assert before_ready, seen
    waits = ("ClusterPolicy cluster-policy is", "not ready: ", "no ClusterPolicy status")
    assert all(any(w in m for w in waits) for m in before_ready), seen
    if _held(policy_states, "notReady", MIRROR_LATENCY):
        assert any("ClusterPolicy cluster-policy is notReady" in m for m in before_ready), (
            seen,
            policy_states,
        )
    assert seen[-1][0] == "True", seen
    # The real controller may report notReady again for a moment after the Gpu saw it ready (a
    # DaemonSet it updates once more; CI 2026-12-04 read notReady right after): it settles ready.
    wait_until(lambda: _cluster_policy(local_cluster)["status"]["state"] == "ready", 120,
               "the ClusterPolicy ready again")  # fmt: skip
    status = (gpu(local_cluster) or {})["status"]
    assert status["installedChartVersion"] == "v26.3.3"
    assert flux_stack.nvidia.starts == ["v26.3.3"]
    WRITES["install"] = len(operator_writes(local_cluster)) - writes_before
    # The controller ran as the chart's ServiceAccount, within the chart's RBAC.
    writers = _daemonset_creators(local_cluster)
    assert writers == {f"system:serviceaccount:{NVIDIA_SA_NAMESPACE}:{NVIDIA_SA}"}, writers


def _demo_nodes() -> tuple[set[str], set[str]]:
    """The demo fleet's GPU nodes (g6.xlarge) and CPU nodes, by name."""
    gpu_nodes: set[str] = set()
    cpu_nodes: set[str] = set()
    for item in yaml.safe_load(DEMO_FLEET.read_text())["items"]:
        labels = item["metadata"].get("labels") or {}
        is_gpu = labels.get("node.kubernetes.io/instance-type") == "g6.xlarge"
        (gpu_nodes if is_gpu else cpu_nodes).add(item["metadata"]["name"])
    return gpu_nodes, cpu_nodes


def _install_checks(local_cluster: LocalCluster) -> None:
    """What the install must show on the way to Ready: the release, the values in the
    ClusterPolicy, NFD on the GPU nodes only, ReleaseReady mirrored."""
    began = time.monotonic()
    wait_until(lambda: _release_ready(local_cluster, "v26.3.3"), 300, "HelmRelease Ready")
    TIMINGS["apply_to_release_ready"] = round(time.monotonic() - began, 1)

    policy = wait_until(lambda: _cluster_policy(local_cluster), 30, "ClusterPolicy")
    driver = policy["spec"]["driver"]
    assert driver["usePrecompiled"] is True
    assert str(driver["version"]) == "590"
    assert driver["repository"] == "ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0"
    assert policy["spec"]["toolkit"]["installDir"] == "/opt/nvidia"

    # NFD's worker only where a GPU can be (spec.components.nodeFeatureDiscovery: GpuNodes,
    # plan/nfd.py): on the two g6.xlarge nodes, not on the m5.large CPU node. The DaemonSet
    # controller and kube-scheduler judge the affinity; the NVIDIA controller still finds both
    # GPU nodes (the Ready below).
    gpu_nodes, cpu_nodes = _demo_nodes()
    nfd = wait_until(
        lambda: next(
            (
                d
                for d in local_cluster.list_objects("daemonsets", TARGET_NAMESPACE)
                if "node-feature-discovery-worker" in d["metadata"]["name"]
                and d.get("status", {}).get("numberAvailable") == len(gpu_nodes)
            ),
            None,
        ),
        60,
        "the NFD worker DaemonSet ready on the GPU nodes",
    )
    assert nfd["status"]["desiredNumberScheduled"] == len(gpu_nodes)
    workers = {
        p["spec"].get("nodeName")
        for p in local_cluster.list_objects("pods", TARGET_NAMESPACE)
        if any(o.get("name") == nfd["metadata"]["name"]
               for o in p["metadata"].get("ownerReferences") or [])
    }  # fmt: skip
    assert workers == gpu_nodes, (workers, gpu_nodes)
    assert not workers & cpu_nodes

    def release_ready() -> dict[str, Any] | None:
        cond = condition(gpu(local_cluster), "ReleaseReady")
        return cond if cond and cond["status"] == "True" else None

    release = wait_until(release_ready, 30, "ReleaseReady=True mirrored from the HelmRelease")
    assert "HelmRelease kyma-system/gpu-operator" in release["message"]


RELEASE_SA = "system:serviceaccount:kyma-system:gpu-operator-release"


def test_the_release_runs_as_its_own_service_account(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    """helm-controller impersonated the release's ServiceAccount for every chart object, and
    that ServiceAccount cannot make anyone cluster-admin (config/rbac/release_rbac.yaml)."""
    assert (helm_release(local_cluster) or {})["spec"][
        "serviceAccountName"
    ] == "gpu-operator-release"
    for resource, namespace in (
        ("deployments", TARGET_NAMESPACE),
        ("clusterroles", None),
        ("clusterpolicies", None),
        ("secrets", TARGET_NAMESPACE),
    ):
        writers = _writers(local_cluster, resource, namespace, ("create", "patch"))
        chart = {n: u for n, u in writers.items() if RELEASE_SA in u}
        assert chart, f"no {resource} written as the release's ServiceAccount: {writers}"
    as_release = ("--as", RELEASE_SA)
    denied = [
        ("create", "clusterrolebinding", "mallory-admin", "--clusterrole=cluster-admin",
         "--user=mallory"),
        ("create", "deployment", "miner", "--image=miner", "-n", "default"),
        ("create", "secret", "generic", "x", "-n", "kube-system"),
    ]  # fmt: skip
    for args in denied:
        result = local_cluster.kubectl(*args, "--dry-run=server", *as_release, check=False)
        assert result.returncode != 0, args
        assert "forbidden" in result.stderr, result.stderr
    for verb, what in (
        ("escalate", "clusterroles/cluster-admin"),
        ("bind", "clusterroles/cluster-admin"),
        ("impersonate", "users"),
    ):
        answer = local_cluster.kubectl("auth", "can-i", verb, what, *as_release, check=False)
        assert answer.stdout.strip() == "no", (verb, what, answer.stdout)


MIRROR_LATENCY = 5.0
"""Seconds a ClusterPolicy state must hold before the Gpu must have shown it."""


def _held(states: list[tuple[float, str]], state: str, seconds: float) -> bool:
    """Whether `state` held for `seconds` in the (time first seen, state) sequence."""
    ends = [*states[1:], (time.monotonic(), "")]
    for (at, value), (until, _) in zip(states, ends, strict=True):
        if value == state and until - at >= seconds:
            return True
    return False


def _watch_components(
    cluster: LocalCluster, timeout: float, stop: threading.Event | None = None
) -> tuple[list[tuple[str, str]], list[tuple[float, str]]]:
    """The distinct (status, message) of ComponentsReady until the Gpu is Ready, and the
    ClusterPolicy states seen meanwhile with the time each was first seen. `stop` ends the
    watch early (the caller failed meanwhile)."""
    seen: list[tuple[str, str]] = []
    states: list[tuple[float, str]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (stop and stop.is_set()):
        state = str((_cluster_policy(cluster).get("status") or {}).get("state", ""))
        if not states or states[-1][1] != state:
            states.append((time.monotonic(), state))
        obj = gpu(cluster)
        cond = condition(obj, "ComponentsReady")
        if cond and (not seen or seen[-1] != (cond["status"], cond["message"])):
            seen.append((cond["status"], cond["message"]))
        if ((obj or {}).get("status") or {}).get("state") == "Ready":
            return seen, states
        time.sleep(0.2)
    raise AssertionError(f"the Gpu did not become Ready; ComponentsReady seen: {seen}; "
                         f"ClusterPolicy states: {states}")  # fmt: skip


def _writers(
    cluster: LocalCluster,
    resource: str,
    namespace: str | None,
    verbs: tuple[str, ...] = ("create",),
) -> dict[str, set[str]]:
    """object name -> who wrote it (from the audit log), for one resource in one namespace."""
    out: dict[str, set[str]] = {}
    for line in (cluster.log_dir / "audit.log").read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            event.get("stage") != "ResponseComplete"
            or event.get("verb") not in verbs
            or (ref.get("resource"), ref.get("namespace")) != (resource, namespace)
            or (event.get("responseStatus") or {}).get("code", 200) >= 400
        ):
            continue
        # helm-controller impersonates the HelmRelease's ServiceAccount: that is the writer.
        who = event.get("impersonatedUser") or event.get("user") or {}
        user = str(who.get("username"))
        out.setdefault(str(ref.get("name") or ""), set()).add(user)
    return out


def _daemonset_creators(cluster: LocalCluster) -> set[str]:
    """Who created DaemonSets in the target namespace, Helm excepted (NFD's is the chart's)."""
    by_name = _writers(cluster, "daemonsets", TARGET_NAMESPACE)
    return {u for name, users in by_name.items() if "node-feature-discovery" not in name
            for u in users}  # fmt: skip


def _daemonsets(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in cluster.list_objects("daemonsets", TARGET_NAMESPACE)}


def _container(ds: dict[str, Any]) -> dict[str, Any]:
    return dict(ds["spec"]["template"]["spec"]["containers"][0])


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env") or []}


def _installer_image(cluster: LocalCluster, node: dict[str, Any], branch: str) -> tuple[str, str]:
    """(DaemonSet name, image) the gardenlinux-nvidia-installer naming gives a node: its kernel,
    and the VERSION_ID that NFD put on it from the module's labelsTemplate (tag
    ``<branch>-<kernel>-gardenlinux<VERSION_ID>``; the installer publishes VERSION_ID 0)."""
    labels = node["metadata"]["labels"]
    kernel = node["status"]["nodeInfo"]["kernelVersion"]
    version_id = labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"]
    policy = _cluster_policy(cluster)["spec"]["driver"]
    suffix = f"{kernel}-gardenlinux{version_id}"
    return (
        f"nvidia-driver-daemonset-{suffix}",
        f"{policy['repository']}/driver:{branch}-{suffix}",
    )


def _gpu_nodes(cluster: LocalCluster) -> list[dict[str, Any]]:
    return [
        n
        for n in cluster.list_objects("nodes")
        if n["metadata"]["labels"].get("nvidia.com/gpu.present") == "true"
    ]


def test_garden_linux_precompiled_driver_per_kernel(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess, tmp_path: Path
) -> None:
    sets = _daemonsets(local_cluster)
    node = _gpu_nodes(local_cluster)[0]  # the demo's GPU nodes share one kernel
    name, image = _installer_image(local_cluster, node, "590")
    assert image.endswith("-gardenlinux0"), image  # the module's NFD rule set VERSION_ID 0
    assert name in sets, sorted(sets)
    assert _container(sets[name])["image"] == image
    assert image.startswith("ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0/driver:")

    # A node with another kernel gets its own driver DaemonSet.
    extra = _node_with_kernel(tmp_path, "6.12.44-cloud-amd64")
    (extra_node,) = local_cluster.add_nodes(extra)
    try:
        new = wait_until(
            lambda: next((n for n in _gpu_nodes(local_cluster)
                          if n["status"]["nodeInfo"]["kernelVersion"] == "6.12.44-cloud-amd64"
                          and "feature.node.kubernetes.io/system-os_release.VERSION_ID"
                          in n["metadata"]["labels"]), None),
            60, "the new node labelled by NFD and the NVIDIA operator",
        )  # fmt: skip
        name2, image2 = _installer_image(local_cluster, new, "590")
        ds = wait_until(lambda: _daemonsets(local_cluster).get(name2), 120, name2)
        assert _container(ds)["image"] == image2
        assert (
            ds["spec"]["template"]["spec"]["nodeSelector"][
                "feature.node.kubernetes.io/kernel-version.full"
            ]
            == "6.12.44-cloud-amd64"
        )
        wait_until(lambda: _state(local_cluster) == "Ready", 120, "Ready with two kernels")
    finally:
        local_cluster.delete_node(extra_node)
    wait_until(lambda: _state(local_cluster) == "Ready", 120, "Ready after the node left")


def _node_with_kernel(tmp_path: Path, kernel: str) -> Path:
    """One more demo GPU node, with another kernel."""
    demo = yaml.safe_load(DEMO_FLEET.read_text())
    node = next(n for n in demo["items"] if "nvidia.com/gpu" in n["status"].get("capacity", {}))
    node = copy.deepcopy(node)
    name = "ip-10-250-0-13.eu-central-1.compute.internal"
    node["metadata"]["name"] = name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["status"]["nodeInfo"]["kernelVersion"] = kernel
    for drop in ("resourceVersion", "uid", "creationTimestamp"):
        node["metadata"].pop(drop, None)
    path = tmp_path / "extra-node.yaml"
    path.write_text(yaml.safe_dump(node))
    return path


def test_toolkit_and_components(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    sets = _daemonsets(local_cluster)
    toolkit = _env(_container(sets["nvidia-container-toolkit-daemonset"]))
    assert toolkit.get("ROOT") == "/opt/nvidia", toolkit
    assert toolkit.get("CDI_ENABLED") == "true", toolkit
    for present in ("nvidia-dcgm-exporter", "gpu-feature-discovery",
                    "nvidia-device-plugin-daemonset", "nvidia-operator-validator"):  # fmt: skip
        assert present in sets, sorted(sets)
    assert "nvidia-mig-manager" not in sets  # off by default

    _patch_spec(local_cluster, {"components": {"dcgmExporter": False}})
    wait_until(lambda: "nvidia-dcgm-exporter" not in _daemonsets(local_cluster), 180,
               "the DCGM exporter DaemonSet removed by the NVIDIA operator")  # fmt: skip
    wait_until(lambda: _state(local_cluster) == "Ready", 120, "Ready without the DCGM exporter")
    _patch_spec(local_cluster, {"components": {"dcgmExporter": None}})
    wait_until(lambda: "nvidia-dcgm-exporter" in _daemonsets(local_cluster), 180,
               "the DCGM exporter DaemonSet back")  # fmt: skip
    wait_until(lambda: _state(local_cluster) == "Ready", 120, "Ready with the DCGM exporter")


EDITOR = "gpu-e2e-editor"
EVIL_VALIDATOR = "evil.example/validator:1"
VALIDATOR_IMAGE_PATCH = {"spec": {"values": {"validator": {
    "cuda": {"env": [{"name": "VALIDATOR_IMAGE", "value": EVIL_VALIDATOR}]},
    "resources": {"requests": {"cpu": "11m"}},
}}}}  # fmt: skip
"""Issue 43's door, with a listed value beside it: the release moves, the door stays shut."""


def _bind_editor(cluster: LocalCluster) -> None:
    """A user bound only to the module's view and edit roles, as the shipped file defines them
    (the stock `edit` role aggregates both)."""
    shipped = yaml.safe_load_all(
        (ROOT / "config" / "rbac" / "aggregate_user_roles.yaml").read_text(encoding="utf-8")
    )
    roles = [
        r for r in shipped if r and r["metadata"]["name"] in ("kyma-gpu-view", "kyma-gpu-edit")
    ]
    assert len(roles) == 2, [r["metadata"]["name"] for r in roles]
    bindings = [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": f"test-{EDITOR}-{role['metadata']['name']}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role["metadata"]["name"]},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": EDITOR}],
    } for role in roles]  # fmt: skip
    cluster.apply(*roles, *bindings)
    for verb in ("get", "patch"):
        wait_until(lambda v=verb: cluster.kubectl(  # type: ignore[misc]
            "auth", "can-i", v, "gpus.gpu.kyma-project.io", f"--as={EDITOR}", check=False,
        ).stdout.strip() == "yes", 30, f"the editor may {verb} the Gpu")  # fmt: skip


def _validator_env(cluster: LocalCluster) -> dict[str, dict[str, str]]:
    """VALIDATOR_IMAGE and the image of each container of the validator DaemonSet, as the
    NVIDIA controller wrote them."""
    template = _daemonsets(cluster)["nvidia-operator-validator"]["spec"]["template"]["spec"]
    containers = [*template.get("initContainers", []), *template["containers"]]
    return {c["name"]: {"image": c["image"], **_env(c)} for c in containers}


def _validator_runs_cpu(cluster: LocalCluster, cpu: str) -> bool:
    template = _daemonsets(cluster)["nvidia-operator-validator"]["spec"]["template"]["spec"]
    containers = [*template.get("initContainers", []), *template["containers"]]
    return any(
        ((c.get("resources") or {}).get("requests") or {}).get("cpu") == cpu for c in containers
    )


def _validator_cpu(cluster: LocalCluster) -> str:
    spec = _cluster_policy(cluster).get("spec", {}).get("validator", {})
    return str(((spec.get("resources") or {}).get("requests") or {}).get("cpu", ""))


def test_an_editor_cannot_pick_the_validators_image(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    """Issue 43 on the real NVIDIA controller: the CUDA validator's env entry VALIDATOR_IMAGE
    once ran the Gpu editor's image, privileged, on every GPU node. Now strict field validation
    refuses it, naming the key; without it (kubectl patch's default) the API server drops it
    and warns. The release still takes
    the listed value of the same patch, and the validator keeps the platform's image."""
    _bind_editor(local_cluster)
    before = _validator_env(local_cluster)
    platform = {c["VALIDATOR_IMAGE"] for c in before.values() if "VALIDATOR_IMAGE" in c}
    assert platform, before  # the controller names the image the CUDA workload runs
    patch = ("patch", "gpus.gpu.kyma-project.io", "gpu", "--type=merge", f"--as={EDITOR}",
             "-p", json.dumps(VALIDATOR_IMAGE_PATCH))  # fmt: skip
    manifest = {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                "metadata": {"name": "gpu"}, **VALIDATOR_IMAGE_PATCH}  # fmt: skip
    strict = local_cluster.kubectl("apply", f"--as={EDITOR}", "-f", "-",
                                   input=json.dumps(manifest), check=False)  # fmt: skip
    assert strict.returncode != 0, strict.stdout
    assert 'unknown field "spec.values.validator.cuda"' in strict.stderr, strict.stderr
    loose = local_cluster.kubectl(*patch, check=False)  # kubectl patch only warns
    assert loose.returncode == 0, loose.stderr
    assert 'Warning: unknown field "spec.values.validator.cuda"' in loose.stderr, loose.stderr
    stored = (gpu(local_cluster) or {})["spec"]["values"]["validator"]
    assert "cuda" not in stored, stored
    wait_until(lambda: _validator_cpu(local_cluster) == "11m", 300,
               "the listed value of the same patch in the ClusterPolicy")  # fmt: skip
    assert "cuda" not in _cluster_policy(local_cluster)["spec"]["validator"]
    released = (helm_release(local_cluster) or {})["spec"]["values"]
    assert "cuda" not in released["validator"], released["validator"]
    assert released["validator"]["resources"] == {"requests": {"cpu": "11m"}}, released
    wait_until(lambda: _validator_runs_cpu(local_cluster, "11m"), 180,
               "the validator DaemonSet rewritten by the NVIDIA controller")  # fmt: skip
    after = _validator_env(local_cluster)
    assert EVIL_VALIDATOR not in json.dumps(after), after
    assert {c["VALIDATOR_IMAGE"] for c in after.values() if "VALIDATOR_IMAGE" in c} == platform
    local_cluster.kubectl("patch", "gpus.gpu.kyma-project.io", "gpu", "--type=json",
                          "-p", json.dumps([{"op": "remove", "path": "/spec/values"}]))  # fmt: skip
    wait_until(lambda: _validator_cpu(local_cluster) == "", 300, "the value gone again")
    wait_until(lambda: _state(local_cluster) == "Ready", 180, "Ready after the values went")


DRIVER_STEP_S = 120
"""The NVIDIA upgrade controller looks again every 2 minutes (plannedRequeueInterval) while a
node waits for its new driver pod, so a driver rollout takes about that long per step
(docs/operations.md)."""


LOOKS_PER_STEP = 2
"""A step can need two of those looks: one while the new driver pod starts, one for the
validator after it (seen once on a loaded machine: 1 of 2 nodes done after 6 minutes)."""


UPGRADE_ALL_AT_ONCE = {"maxParallelUpgrades": 0, "maxUnavailable": "100%"}
"""The driver upgrade policy of this file's two rollouts: every node at once, so a rollout
costs one node's looks, not one per node. The node-by-node order of the default policy is
what tests/e2e/test_operations.py::test_a_branch_change_rolls_node_by_node shows."""


def _rollout_bound(cluster: LocalCluster) -> tuple[int, float]:
    """The GPU nodes a driver rollout walks, and how long it may take with all of them at once
    (UPGRADE_ALL_AT_ONCE): two looks of 2 minutes, + 2 minutes."""
    status = (gpu(cluster) or {}).get("status") or {}
    nodes = int(status.get("gpuNodeCount") or 0)
    assert nodes >= 1, status
    assert status.get("driverMode") != "Preinstalled", status
    return nodes, DRIVER_STEP_S * LOOKS_PER_STEP + 120.0


def _watch_rollout(cluster: LocalCluster, version: str, timeout: float) -> list[str]:
    """Poll until the Gpu is Ready with every driver pod on `version` (the upgrade controller
    done on every node); return the distinct states seen."""
    seen: list[str] = []
    status: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = (gpu(cluster) or {}).get("status") or {}
        state = str(status.get("state", ""))
        if state and (not seen or seen[-1] != state):
            seen.append(state)
        if state == "Ready" and status.get("driverVersion") == version:
            return seen
        time.sleep(0.5)
    raise AssertionError(
        f"timed out after {timeout:.0f}s waiting for Ready on driver {version}; states seen: "
        f"{seen}; driverVersion {status.get('driverVersion')!r}: {status.get('message')}"
    )


@pytest.mark.timeout(1200)  # the driver rollout takes one or two 2-minute looks
def test_upgrade_on_values_change(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    writes_before = len(operator_writes(local_cluster))
    began = time.monotonic()
    _patch_spec(local_cluster, {"driver": {"version": "580", "upgradePolicy": UPGRADE_ALL_AT_ONCE}})
    states = _watch_states(local_cluster, "Processing", 30, "Processing after the spec change")
    wait_until(
        lambda: (
            str(_cluster_policy(local_cluster).get("spec", {}).get("driver", {}).get("version"))
            == "580"
        ),
        300,
        "ClusterPolicy driver.version 580",
    )
    # A new branch is a new driver DaemonSet template (OnDelete): the NVIDIA upgrade controller
    # replaces the driver (here on all nodes at once), and DriverReady holds Ready until the
    # last node is done.
    _, bound = _rollout_bound(local_cluster)
    states += _watch_rollout(local_cluster, "580", bound)
    assert "Processing" in states, states
    assert states[-1] == "Ready", states
    node = _gpu_nodes(local_cluster)[0]  # the demo's GPU nodes share one kernel
    name, image = _installer_image(local_cluster, node, "580")
    assert _container(_daemonsets(local_cluster)[name])["image"] == image
    TIMINGS["values_upgrade_to_ready"] = round(time.monotonic() - began, 1)
    hr = helm_release(local_cluster) or {}
    assert (hr.get("status") or {}).get("history", [{}])[0].get("version", 0) >= 2
    WRITES["upgrade"] = len(operator_writes(local_cluster)) - writes_before


@pytest.mark.timeout(1200)  # the Ready wait below follows one all-nodes driver rollout
def test_upgrade_on_chart_bump_replaces_crds(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    # GPUCluster is new in v26.7.0. An earlier test (the demo) may have installed v26.7.0, and
    # uninstall leaves the chart's CRDs by design (docs/operations.md), so start without it.
    local_cluster.kubectl(
        "delete", "crd", "gpuclusters.nvidia.com", "--ignore-not-found", "--wait=true"
    )
    assert local_cluster.get_object("crd", "gpuclusters.nvidia.com") is None
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
    # The v26.7.0 controller renders a new driver DaemonSet, and its upgrade controller
    # replaces the drivers node by node: Ready follows that rollout, so the bound does too.
    nodes, bound = _rollout_bound(local_cluster)
    wait_until(lambda: _state(local_cluster) == "Ready", bound, f"Ready on v26.7.0, {nodes} nodes")
    policy = _cluster_policy(local_cluster)["spec"]["driver"]["upgradePolicy"]
    assert policy["maxParallelUpgrades"] == 0, policy
    TIMINGS["chart_bump_to_ready"] = round(time.monotonic() - began, 1)
    # The controller followed the chart (the harness polls each second, so wait), and it
    # rolled its operands to v26.7.0.
    wait_until(lambda: flux_stack.nvidia.version == "v26.7.0", 60, "the controller at v26.7.0")
    assert flux_stack.nvidia.starts[-1] == "v26.7.0"
    wait_until(
        lambda: _container(_daemonsets(local_cluster)["nvidia-operator-validator"])["image"]
        .endswith(":v26.7.0"),
        180, "the validator rolled to v26.7.0",
    )  # fmt: skip
    wait_until(lambda: _state(local_cluster) == "Ready", 180, "Ready after the operands rolled")


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
    wait_until(lambda: _state(local_cluster) == "Ready", 180, "Ready after drift correction")


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
    # What Flux makes of a missing version and an unreachable repository: an administrator
    # allows both first, or the plan refuses them before Flux sees them (ChartSourceNotAllowed).
    versions = ["v26.3.3", "v26.7.0", "v99.0.0"]
    allow_chart_sources(local_cluster, local_source(flux_stack.helm_repo_url,
                                                    operatorVersions=versions),
                        local_source("http://127.0.0.1:9"))  # fmt: skip
    try:
        _patch_spec(local_cluster, spec)
        message = wait_until(lambda: _error_message(local_cluster), 180, f"{case}: Error/Warning")
        assert expect in message, message
        assert "ChartSourceNotAllowed" not in json.dumps(gpu(local_cluster)), message
    finally:
        flux_stack.allow_chart_sources()
    _patch_spec(local_cluster, good)
    _request_reconcile(local_cluster)
    wait_until(lambda: _state(local_cluster) == "Ready", 240, f"{case}: recovered")


def test_uninstall(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    writes_before = len(operator_writes(local_cluster))
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
    # The operand DaemonSets go with the ClusterPolicy that owns them (garbage collector).
    wait_until(lambda: local_cluster.list_objects("daemonsets", TARGET_NAMESPACE) == [], 60,
               "the operand DaemonSets gone")  # fmt: skip
    assert flux_stack.nvidia.version is None  # the controller stopped with its Deployment
    secrets = local_cluster.list_objects("secrets", TARGET_NAMESPACE, selector="owner=helm")
    assert secrets == [], "Helm release records left behind"
    assert _cluster_policy(local_cluster) == {}
    # What the docs say stays (docs/operations.md): the chart's CRDs, and the node labels the
    # NVIDIA controller set. NFD's labels go (its post-delete prune).
    assert local_cluster.get_object("crd", "clusterpolicies.nvidia.com") is not None
    os_label = "feature.node.kubernetes.io/system-os_release.ID"
    wait_until(
        lambda: all(os_label not in n["metadata"]["labels"]
                    for n in local_cluster.list_objects("nodes")),
        30, "NFD labels pruned",
    )  # fmt: skip
    gpu_nodes = _gpu_nodes(local_cluster)
    assert len(gpu_nodes) == 2
    assert all(n["metadata"]["labels"].get("nvidia.com/gpu.deploy.driver") == "true"
               for n in gpu_nodes)  # fmt: skip
    flux_stack.nvidia.check_alive()
    WRITES["uninstall"] = len(operator_writes(local_cluster)) - writes_before
