"""Driver modes end to end, beyond Garden Linux precompiled (tests/e2e/test_flux.py): what the
real NVIDIA GPU Operator controller creates from the module's values on a preinstalled fleet,
an Ubuntu fleet and a mixed fleet (one NVIDIADriver per OS pool). The fleets are the golden
scenarios' node files; each test installs through Flux, checks, and uninstalls again.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
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
    module_on,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SCENARIOS = ROOT / "tests" / "golden" / "scenarios"
Fleet = Callable[[Path | str], list[str]]


@pytest.fixture(scope="module")
def stack(local_cluster: LocalCluster, flux_stack: FluxStack) -> Iterator[OperatorProcess]:
    with module_on(local_cluster, name="operator-modes", fleet=None) as process:
        yield process


def _nodes_file(path: Path, nodes: Sequence[dict[str, Any]]) -> Path:
    """A node file of Nodes as they join, before NFD (nfd.before_nfd); the hosts of GPU
    pools declare their NVIDIA PCI device (what NFD would find on them; see harness/nfd.py)."""
    items = [nfd.before_nfd(node) for node in nodes]
    for node in items:
        if "gpu" in node["metadata"]["labels"].get("worker.gardener.cloud/pool", ""):
            node["metadata"].setdefault("annotations", {})[nfd.PCI_ANNOTATION] = nfd.NVIDIA_VENDOR
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def _scenario_nodes(scenario: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load((SCENARIOS / scenario / "nodes.yaml").read_text())["items"])


def _fleet_file(tmp_path: Path, scenario: str, extra: Sequence[dict[str, Any]] = ()) -> Path:
    """The scenario's nodes plus ``extra`` nodes."""
    return _nodes_file(tmp_path / f"{scenario}.yaml", [*_scenario_nodes(scenario), *extra])


def _install(cluster: LocalCluster, flux: FluxStack, timeout: float = 240) -> dict[str, Any]:
    source = {"chartRepository": flux.helm_repo_url, "insecure": True}
    cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                   "metadata": {"name": "gpu"}, "spec": {"source": source}})  # fmt: skip

    def ready() -> dict[str, Any] | None:
        flux.check_alive()
        obj = gpu(cluster)
        return obj if ((obj or {}).get("status") or {}).get("state") == "Ready" else None

    try:
        return wait_until(ready, timeout, "Gpu Ready", interval=0.5)
    except AssertionError as error:
        status = (gpu(cluster) or {}).get("status") or {}
        conditions = [(c["type"], c["status"], c.get("reason"), c.get("message"))
                      for c in status.get("conditions") or []]  # fmt: skip
        raise AssertionError(f"{error}; Gpu {status.get('state')}: {conditions}") from None


def _uninstall(cluster: LocalCluster) -> None:
    cluster.kubectl(
        "delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false", "--ignore-not-found"
    )
    wait_until(lambda: gpu(cluster) is None, 240, "the Gpu gone after Flux uninstalled")
    wait_until(lambda: cluster.list_objects("daemonsets", TARGET_NAMESPACE) == [], 60,
               "the operand DaemonSets gone")  # fmt: skip


@pytest.fixture
def installed(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> Iterator[Callable[[], dict[str, Any]]]:
    """``installed()`` applies the Gpu and waits for Ready; the test's end uninstalls it."""
    yield lambda: _install(local_cluster, flux_stack)
    _uninstall(local_cluster)


def _daemonsets(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in cluster.list_objects("daemonsets", TARGET_NAMESPACE)}


def _driver_sets(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in _daemonsets(cluster).items() if "driver" in k and "nvidia" in k}


def _image(ds: dict[str, Any]) -> str:
    return str(ds["spec"]["template"]["spec"]["containers"][0]["image"])


def _driver_pods_on(cluster: LocalCluster, node: str) -> list[str]:
    pods = cluster.list_objects("pods", TARGET_NAMESPACE)
    return [p["metadata"]["name"] for p in pods
            if p["spec"].get("nodeName") == node and "driver" in p["metadata"]["name"]]  # fmt: skip


def test_preinstalled_fleet_gets_no_driver(
    local_cluster: LocalCluster, fleet: Fleet, installed: Callable[[], dict[str, Any]],
    tmp_path: Path,
) -> None:  # fmt: skip
    fleet(_fleet_file(tmp_path, "preinstalled-driver"))
    ready = installed()
    policy = local_cluster.get_object("clusterpolicies.nvidia.com", "cluster-policy") or {}
    assert policy["spec"]["driver"]["enabled"] is False
    sets = _daemonsets(local_cluster)
    assert _driver_sets(local_cluster) == {}, sorted(sets)
    assert "nvidia-container-toolkit-daemonset" in sets
    assert "nvidia-device-plugin-daemonset" in sets
    driver = condition(ready, "DriverReady") or {}
    assert driver.get("reason") == "DriverPreinstalled"


def test_ubuntu_fleet_gets_nvidias_driver_container(
    local_cluster: LocalCluster, fleet: Fleet, installed: Callable[[], dict[str, Any]],
    tmp_path: Path,
) -> None:  # fmt: skip
    fleet(_fleet_file(tmp_path, "azure-ubuntu-t4"))
    installed()
    policy = local_cluster.get_object("clusterpolicies.nvidia.com", "cluster-policy") or {}
    spec = policy["spec"]["driver"]
    assert spec["usePrecompiled"] is False
    (ds,) = _driver_sets(local_cluster).values()
    # NVIDIA's naming: <repository>/<image>:<version>-<os ID><VERSION_ID> from the NFD labels.
    assert _image(ds) == f"{spec['repository']}/{spec['image']}:{spec['version']}-ubuntu22.04"
    assert _image(ds).startswith("nvcr.io/nvidia/driver:")


def _selected(selector: dict[str, str], node: dict[str, Any]) -> bool:
    labels = node["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in selector.items())


def _preinstalled_gardenlinux_node() -> dict[str, Any]:
    """One more Garden Linux GPU node of the mixed scenario, with its own driver."""
    nodes = _scenario_nodes("mixed-gardenlinux-ubuntu")
    node = copy.deepcopy(next(n for n in nodes if "gpu-gl" in n["metadata"]["name"]))
    name = "shoot--kyma--c4-gpu-gl-own-driver"
    node["metadata"]["name"] = name
    # The worker pool labels the docs ask for: with the first two alone, the NVIDIA operator
    # may see the node before NFD labels it, remove its deploy label and later deploy a
    # driver there (it did, in a CI run); the PCI label makes it a GPU node from the start.
    node["metadata"]["labels"].update({
        "kubernetes.io/hostname": name,
        "gpu.kyma-project.io/driver-preinstalled": "true",
        "nvidia.com/gpu.deploy.driver": "false",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    })  # fmt: skip
    return dict(node)


def test_mixed_fleet_one_nvidiadriver_per_pool(
    local_cluster: LocalCluster, fleet: Fleet, installed: Callable[[], dict[str, Any]],
    tmp_path: Path,
) -> None:  # fmt: skip
    own = _preinstalled_gardenlinux_node()
    fleet(_fleet_file(tmp_path, "mixed-gardenlinux-ubuntu", [own]))
    ready = installed()
    assert ready["status"]["driverMode"] == "PerPool"
    preflight = condition(ready, "Preflight") or {}
    assert preflight.get("reason") == "PreflightPassed", preflight

    drivers = local_cluster.list_objects("nvidiadrivers.nvidia.com")
    assert sorted(d["metadata"]["name"] for d in drivers) == ["gpu-gardenlinux", "gpu-ubuntu"]
    for driver in drivers:  # accepted by the real controller
        assert (driver.get("status") or {}).get("state") == "ready", driver.get("status")
    # No node is selected by two NVIDIADrivers.
    nodes = [n for n in local_cluster.list_objects("nodes")
             if n["metadata"]["labels"].get("nvidia.com/gpu.present") == "true"]  # fmt: skip
    for node in nodes:
        owners = [d["metadata"]["name"] for d in drivers
                  if _selected(d["spec"].get("nodeSelector") or {}, node)]  # fmt: skip
        assert len(owners) <= 1, (node["metadata"]["name"], owners)

    # The preinstalled Garden Linux node: selected by the Garden Linux NVIDIADriver (it
    # selects by OS ID), but the NVIDIA operator's own switch keeps the driver off it.
    name = own["metadata"]["name"]
    mine = local_cluster.get_object("node", name) or {}
    assert mine["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] == "false"
    assert _driver_pods_on(local_cluster, name) == []
    images = sorted(_image(ds) for ds in _driver_sets(local_cluster).values())
    assert len(images) == 2, images
    assert images[0].startswith("ghcr.io/gardenlinux/gardenlinux-nvidia-installer/"), images
    assert images[0].endswith("-gardenlinux0"), images
    assert images[1].startswith("nvcr.io/nvidia/driver:"), images
    assert images[1].endswith("-ubuntu22.04"), images
    # The other Garden Linux nodes do get it.
    gl = [n["metadata"]["name"] for n in nodes
          if "gpu-gl" in n["metadata"]["name"] and n["metadata"]["name"] != name]  # fmt: skip
    assert gl
    assert all(_driver_pods_on(local_cluster, n) for n in gl)


def test_missing_nfd_labels_are_named(
    local_cluster: LocalCluster, fleet: Fleet, installed: Callable[[], dict[str, Any]],
    flux_stack: FluxStack, tmp_path: Path,
) -> None:  # fmt: skip
    """A GPU node whose NFD worker cannot run (a taint it does not tolerate) has no OS and
    kernel labels; the NVIDIA operator skips it, and the Gpu says which node and why."""
    fleet(_fleet_file(tmp_path, "aws-gardenlinux-g6"))
    installed()
    pool = "worker.gardener.cloud/pool"
    nodes = _scenario_nodes("aws-gardenlinux-g6")
    gpu_node = next(n for n in nodes if "gpu" in n["metadata"]["labels"].get(pool, ""))
    tainted = copy.deepcopy(gpu_node)
    name = "shoot--kyma--c1-gpu-dedicated"
    tainted["metadata"]["name"] = name
    tainted["metadata"]["labels"]["kubernetes.io/hostname"] = name
    tainted["spec"]["taints"] = [{"key": "example.com/dedicated", "value": "ml",
                                  "effect": "NoSchedule"}]  # fmt: skip
    fleet(_nodes_file(tmp_path / "tainted.yaml", [tainted]))

    def named() -> dict[str, Any] | None:
        cond = condition(gpu(local_cluster), "ComponentsReady") or {}
        return cond if cond.get("reason") == "NodeFeaturesMissing" else None

    cond = wait_until(named, 60, "ComponentsReady NodeFeaturesMissing")
    assert name in cond["message"]
    assert "node-feature-discovery" in cond["message"]
    state = ((gpu(local_cluster) or {}).get("status") or {}).get("state")
    assert state == "Processing"

    local_cluster.kubectl("taint", "node", name, "example.com/dedicated-")
    wait_until(lambda: ((gpu(local_cluster) or {}).get("status") or {}).get("state") == "Ready",
               120, "Ready once NFD labelled the node")  # fmt: skip
