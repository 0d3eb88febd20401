"""Real node-feature-discovery on a real node, against the harness's emulation of it.

The chart's NFD (v0.19.0, built by `make tools` from its Go module) runs as nfd-master and
nfd-worker on this host, with the worker configuration the chart renders from the module's
values (`helm template`), and labels the real node (tests/harness/realnode.py) from the
host's /etc/os-release, kernel and PCI devices. Then:

- the manager's detection reads those real labels (the NFD labels the NVIDIA controller
  needs are there, the kernel is the kubelet's);
- tests/harness/nfd.py, which labels the kwok fleets' nodes in every other test, computes the
  labels for the same Node, and every label it computes must be what the real NFD wrote.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.facts.node import node_facts
from kyma_gpu.rules.catalog import Catalog
from tests.harness import nfd
from tests.harness.binaries import SHARED_DIR, require
from tests.harness.cluster import LocalCluster
from tests.harness.module import ROOT, wait_until
from tests.harness.nodes import DEMO_FLEET
from tests.harness.procs import ManagedProcess, free_port
from tests.harness.realnode import RealNode

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
log = logging.getLogger(__name__)

CHART_VERSION = "v26.7.0"
CHART = SHARED_DIR / "charts" / f"gpu-operator-{CHART_VERSION}.tgz"
NFD_NAMESPACE = "gpu-operator"
"""Where the chart runs NFD (the module's target namespace), and so where its workers and GPU
feature discovery write their NodeFeature objects."""
TENANT_NAMESPACE = "team-a"
EMULATED = tuple(f"{nfd.PREFIX}{family}" for family in ("system-os_release.", "kernel-version.",
                                                         "pci-"))  # fmt: skip
"""The label families the emulation computes (and the module and the NVIDIA controller read)."""
FATAL = ("^F[0-9]{4} ", "^panic: ")


@dataclass
class Labelled:
    cluster: LocalCluster
    node: RealNode
    config: dict[str, Any]
    before: dict[str, Any]
    after: dict[str, Any]


def _rendered(work: Path, template: str) -> dict[str, Any]:
    """A ConfigMap of NFD's as the chart renders it with the module's values for the demo
    fleet."""
    values = work / "values.yaml"
    if not values.exists():
        argv = [sys.executable, "-m", "kyma_gpu_tools.cli", "plan", "--nodes", str(DEMO_FLEET),
                "-o", "yaml"]  # fmt: skip
        plan = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
        values.write_text(yaml.safe_dump(yaml.safe_load(plan.stdout)["values"]), encoding="utf-8")
    rendered = subprocess.run(
        [str(require("helm")["helm"]), "template", "gpu-operator", str(CHART), "-n",
         NFD_NAMESPACE, "-f", str(values), "--show-only",
         f"charts/node-feature-discovery/templates/{template}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    data: dict[str, Any] = yaml.safe_load(rendered.stdout)["data"]
    return data


def _worker_config(work: Path) -> dict[str, Any]:
    """nfd-worker.conf as the chart renders it with the module's values."""
    return nfd.worker_config(_rendered(work, "nfd-worker-conf.yaml"))


def _master_config(work: Path) -> Path:
    """nfd-master.conf as the chart renders it with the module's values."""
    path = work / "nfd-master.conf"
    path.write_text(_rendered(work, "nfd-master-conf.yaml")["nfd-master.conf"], encoding="utf-8")
    return path


def _crds(work: Path) -> Path:
    with tarfile.open(CHART) as chart:
        member = chart.extractfile(
            "gpu-operator/charts/node-feature-discovery/crds/nfd-api-crds.yaml"
        )
        assert member is not None
        path = work / "nfd-api-crds.yaml"
        path.write_bytes(member.read())
    return path


def _nfd(cluster: LocalCluster, name: str, argv: list[str], env: dict[str, str]) -> ManagedProcess:
    process = ManagedProcess(name, argv, cluster.log_dir / f"{name}.log", env=env,
                             cwd=cluster.workdir, fatal_patterns=FATAL)  # fmt: skip
    process.start()
    cluster.register(process)
    return process


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Labelled]:
    work = tmp_path_factory.mktemp("real-nfd")
    cluster = LocalCluster(progress=log.info).start()
    node = RealNode(cluster, {}, "default")
    try:
        node.start()
        config = _worker_config(work)
        (work / "nfd-worker.conf").write_text(yaml.safe_dump(config), encoding="utf-8")
        cluster.kubectl("apply", "--server-side", "-f", str(_crds(work)))
        cluster.wait_crds_established("nodefeatures.nfd.k8s-sigs.io")
        for namespace in (NFD_NAMESPACE, TENANT_NAMESPACE):
            cluster.create_namespace(namespace)
        before = cluster.get_object("node", node.name) or {}
        bins = require("nfd-master", "nfd-worker")
        env = {"KUBECONFIG": str(cluster.kubeconfig), "NODE_NAME": node.name,
               "KUBERNETES_NAMESPACE": NFD_NAMESPACE}  # fmt: skip
        master = _nfd(cluster, "nfd-master", [
            str(bins["nfd-master"]), f"-port={free_port()}", f"-kubeconfig={cluster.kubeconfig}",
            f"-config={_master_config(work)}",
        ], env)  # fmt: skip
        worker = _nfd(cluster, "nfd-worker", [
            str(bins["nfd-worker"]), f"-config={work / 'nfd-worker.conf'}", "-no-owner-refs",
            f"-port={free_port()}", f"-kubeconfig={cluster.kubeconfig}",
        ], env)  # fmt: skip
        after = wait_until(lambda: _nfd_labelled(cluster, node.name), 120,
                           "the real NFD's labels on the real node")  # fmt: skip
        for process in (worker, master):
            process.check_alive()
        yield Labelled(cluster, node, config, before, after)
    finally:
        node.stop()
        cluster.stop()


def _nfd_labelled(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    node = cluster.get_object("node", name) or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return node if f"{nfd.PREFIX}kernel-version.full" in labels else None


def _ours(node: dict[str, Any]) -> dict[str, str]:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {k: v for k, v in labels.items() if k.startswith(EMULATED)}


def test_the_manager_reads_the_real_nfd_labels(labelled: Labelled) -> None:
    registry = Catalog().machine_types
    assert node_facts(labelled.before, registry).nfd_missing, "before NFD ran"
    facts = node_facts(labelled.after, registry)
    assert not facts.nfd_missing, "NFD published what the NVIDIA controller needs"
    info = labelled.after["status"]["nodeInfo"]
    labels = labelled.after["metadata"]["labels"]
    assert labels[f"{nfd.PREFIX}kernel-version.full"] == info["kernelVersion"] == facts.kernel
    lines = Path("/etc/os-release").read_text(encoding="utf-8").splitlines()
    os_release = dict(line.split("=", 1) for line in lines if "=" in line)
    assert labels[f"{nfd.PREFIX}system-os_release.ID"] == os_release["ID"].strip('"')


def test_the_emulation_labels_what_the_real_nfd_labels(labelled: Labelled) -> None:
    real = _ours(labelled.after)
    vendors = sorted({k.removeprefix(f"{nfd.PREFIX}pci-").split(".")[0]
                      for k in real if k.startswith(f"{nfd.PREFIX}pci-")})  # fmt: skip
    node = nfd.before_nfd(labelled.after)
    node["metadata"].setdefault("annotations", {})[nfd.PCI_ANNOTATION] = ",".join(vendors)
    emulated = {k: v for k, v in nfd.node_labels(node, labelled.config).items()
                if k.startswith(EMULATED)}  # fmt: skip
    print(f"real NFD: {real}\nemulation: {emulated}")
    assert emulated == real


def _node_feature(name: str, namespace: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"nfd.node.kubernetes.io/node-name": node}},
            "spec": {"labels": labels}}  # fmt: skip


FORGED = {"nvidia.com/gpu.count": "0", "feature.node.kubernetes.io/pci-10de.present": "true",
          "nvidia.com/gpu-driver-upgrade-state": "upgrade-failed"}  # fmt: skip
"""What a tenant's NodeFeature said of another team's node in the review: no GPUs, an NVIDIA
device, a failed driver upgrade (issue 49, finding 3)."""
CONTROL = "feature.node.kubernetes.io/kyma-gpu-control"


def test_a_tenants_node_feature_labels_no_node(labelled: Labelled) -> None:
    """The module's values restrict NFD's master to NodeFeature objects of the chart's
    namespace: a tenant's in its own namespace labels nothing. NFD merges every NodeFeature of
    a node into one update, so once a control label written afterwards in the chart's
    namespace shows, the tenant's would show too, had the master taken it."""
    cluster, name = labelled.cluster, labelled.node.name
    assert labelled.config, "the chart rendered the worker's configuration"
    cluster.apply(_node_feature("forged", TENANT_NAMESPACE, name, FORGED))
    cluster.apply(_node_feature("control", NFD_NAMESPACE, name, {CONTROL: "true"}))
    node = wait_until(lambda: _with_label(cluster, name, CONTROL), 120,
                      "the control label from the chart's namespace")  # fmt: skip
    labels = node["metadata"]["labels"]
    assert not set(FORGED) & set(labels), {k: labels[k] for k in set(FORGED) & set(labels)}
    assert f"{nfd.PREFIX}kernel-version.full" in labels  # the worker's own still come through


def _with_label(cluster: LocalCluster, name: str, label: str) -> dict[str, Any] | None:
    node = cluster.get_object("node", name) or {}
    return node if label in ((node.get("metadata") or {}).get("labels") or {}) else None
