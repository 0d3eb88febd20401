"""The install the docs give to a cluster without KLM, on a real node: `make image`, the image in
containerd, `hack/apply.sh` of config/install with that image, and the sample Gpu.

On a cluster of its own: the demo fleet (kwok), Flux with the local Helm repository and the
real NVIDIA controller, and a real node (tests/harness/realnode.py: the real kubelet on
containerd, as on every Gardener node) on which the manager's pods run from the image that
`make image` built. The manager must start there (containerd writes no passwd entry for the
image's user, which crashed it before), pass its real startup, liveness and readiness probes,
and bring the Gpu to Ready.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.klm import MANAGER_LABELS, SKR_NAMESPACE, manager_pods
from tests.harness.module import ROOT, condition, gpu_ready, wait_until
from tests.harness.nodes import DEMO_FLEET
from tests.harness.realnode import RealNode

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
log = logging.getLogger(__name__)

RELEASED_IMAGE = "europe-docker.pkg.dev/kyma-project/prod/gpu-manager"
LOCAL_IMAGE = "localhost/gpu-manager"


@dataclass
class Plain:
    cluster: LocalCluster
    flux: FluxStack
    node: RealNode
    version: str


def _version() -> str:
    for line in (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


def _build_image(version: str, archive: Path) -> None:
    """`make image` (hack/image.sh build), then the image as an archive for containerd."""
    env = {**os.environ, "STORAGE_DRIVER": os.environ.get("STORAGE_DRIVER", "vfs")}
    for argv in (
        ["bash", str(ROOT / "hack" / "image.sh"), "build", version],
        ["buildah", "push", "--quiet", f"{LOCAL_IMAGE}:{version}",
         f"docker-archive:{archive}:{LOCAL_IMAGE}:{version}"],
    ):  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800,
                                check=False)  # fmt: skip
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed:\n{result.stderr[-4000:]}")


def _overlay(directory: Path, version: str) -> Path:
    """What a user writes to install their own build: config/install with the image set."""
    directory.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "config" / "install", directory)],
        "images": [{"name": RELEASED_IMAGE, "newName": LOCAL_IMAGE, "newTag": version}],
    }  # fmt: skip
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plain]:
    work = tmp_path_factory.mktemp("plain-install")
    version = _version()
    cluster = LocalCluster(node_files=[DEMO_FLEET], progress=log.info).start()
    started: list[Any] = []
    try:
        started.append(FluxStack(cluster).start())
        started.append(RealNode(cluster, MANAGER_LABELS, SKR_NAMESPACE).start())
        archive = work / "gpu-manager.tar"
        _build_image(version, archive)
        started[1].load_image(archive)
        yield Plain(cluster, started[0], started[1], version)
    finally:
        for part in reversed(started):
            part.stop()
        cluster.stop()


def _both_ready(cluster: LocalCluster) -> list[dict[str, Any]] | None:
    pods = manager_pods(cluster)
    return pods if len(pods) == 2 and all(map(_ready, pods)) else None


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.mark.timeout(900)
def test_the_documented_install_runs_the_manager_on_a_real_node(plain: Plain) -> None:
    cluster = plain.cluster
    overlay = _overlay(cluster.workdir / "install", plain.version)
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "KUBECTL": str(ROOT / "tools" / "bin" / "kubectl")}  # fmt: skip
    applied = subprocess.run(["bash", str(ROOT / "hack" / "apply.sh"), str(overlay)], env=env,
                             capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    pods = wait_until(lambda: _both_ready(cluster), 300,
                      "both manager pods Ready on the real node (their real probes)")  # fmt: skip
    for pod in pods:
        assert pod["spec"]["nodeName"] == plain.node.name
        (status,) = pod["status"]["containerStatuses"]
        assert status["image"].endswith(f"{LOCAL_IMAGE}:{plain.version}"), status["image"]
        assert status["restartCount"] == 0, f"the manager restarted: {status}"
        assert status["containerID"].startswith("containerd://")
    mirror = {"chartRepository": plain.flux.helm_repo_url, "insecure": True}
    sample = yaml.safe_load((ROOT / "config" / "samples" / "gpu.yaml").read_text())
    sample["spec"] = {"source": mirror}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(sample))
    ready = wait_until(lambda: gpu_ready(cluster), 420, "the Gpu Ready, reconciled by the pod")
    assert (condition(ready, "ReleaseReady") or {}).get("status") == "True"
    lease = cluster.get_object("lease", "kyma-gpu-manager", SKR_NAMESPACE) or {}
    assert lease["spec"]["holderIdentity"] in {p["metadata"]["name"] for p in pods}
    for pod in manager_pods(cluster):
        (status,) = pod["status"]["containerStatuses"]
        assert status["restartCount"] == 0, f"the manager restarted while reconciling: {status}"
