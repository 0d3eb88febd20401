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
NFD_NAMESPACE = "node-feature-discovery"
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


def _worker_config(work: Path) -> dict[str, Any]:
    """nfd-worker.conf as the chart renders it with the module's values for the demo fleet."""
    argv = [
        sys.executable,
        "-m",
        "kyma_gpu_tools.cli",
        "plan",
        "--nodes",
        str(DEMO_FLEET),
        "-o",
        "yaml",
    ]
    plan = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    values = work / "values.yaml"
    values.write_text(yaml.safe_dump(yaml.safe_load(plan.stdout)["values"]), encoding="utf-8")
    rendered = subprocess.run(
        [str(require("helm")["helm"]), "template", "gpu-operator", str(CHART), "-n",
         "gpu-operator", "-f", str(values), "--show-only",
         "charts/node-feature-discovery/templates/nfd-worker-conf.yaml"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return nfd.worker_config(yaml.safe_load(rendered.stdout)["data"])


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
        cluster.create_namespace(NFD_NAMESPACE)
        before = cluster.get_object("node", node.name) or {}
        bins = require("nfd-master", "nfd-worker")
        env = {"KUBECONFIG": str(cluster.kubeconfig), "NODE_NAME": node.name,
               "KUBERNETES_NAMESPACE": NFD_NAMESPACE}  # fmt: skip
        master = _nfd(cluster, "nfd-master", [
            str(bins["nfd-master"]), f"-port={free_port()}", f"-kubeconfig={cluster.kubeconfig}",
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
