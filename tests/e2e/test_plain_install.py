"""The install docs/operations.md gives to a cluster without KLM, run from the doc itself on a real
node: `make image`, the image in containerd, the overlay over config/install, `hack/apply.sh`, the
sample Gpu Ready, and the uninstall.

The section "Installing without KLM" of docs/operations.md marks the blocks this test runs with
`<!-- install-<part>: used by tests/e2e/test_plain_install.py -->`: the archive for the nodes,
the overlay's kustomization.yaml, the apply, the two waits and the uninstall. They run as written
(bash, in a checkout whose top-level entries are links to this repository's, so that the overlay
directory the doc names can be written without writing into the repository), and the test fails
with a message naming the block when one is missing or has changed its shape. The doc's image
name and tag are not placeholders: they must be what `make image` builds (pyproject.toml's
version), or the test says the doc is stale.

On a cluster of its own: the demo fleet (kwok), Flux with the local Helm repository and the
real NVIDIA controller, and a real node (tests/harness/realnode.py: the real kubelet on
containerd, as on every Gardener node) on which the manager's pods run from the image that
`make image` built. The manager must start there (containerd writes no passwd entry for the
image's user, which crashed it before), pass its real startup, liveness and readiness probes,
and bring the Gpu to Ready. The one step not taken from the doc is the Gpu: the doc's default
Gpu uses NVIDIA's repository, which this machine cannot reach, so the test names its local chart
mirror in spec.source.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.klm import MANAGER_LABELS, MANAGER_PODS, SKR_NAMESPACE, manager_pods
from tests.harness.module import ROOT, condition, gpu_ready, wait_until
from tests.harness.nodes import DEMO_FLEET
from tests.harness.realnode import RealNode

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
log = logging.getLogger(__name__)

RELEASED_IMAGE = "europe-docker.pkg.dev/kyma-project/prod/gpu-manager"
LOCAL_IMAGE = "localhost/gpu-manager"
DOC = ROOT / "docs" / "operations.md"
SECTION = "Installing without KLM (kind, k3d, Gardener or any cluster)"
MARKER = "<!-- install-{part}: used by tests/e2e/test_plain_install.py -->"


# -- the doc's blocks ------------------------------------------------------------------------


class DocChanged(AssertionError):
    """A marked block of the doc is gone or no longer has the shape this test runs."""


def _doc_block(text: str, part: str, language: str) -> str:
    """The fenced block right after the part's marker, without its fences."""
    marker = MARKER.format(part=part)
    where = f'docs/operations.md, section "{SECTION}"'
    if text.count(marker) != 1:
        raise DocChanged(f"{where}: the marker {marker} appears {text.count(marker)} times; this "
                         f"test runs the ```{language} block right after it, once")  # fmt: skip
    lines = text.split(marker, 1)[1].lstrip("\n").splitlines()
    if not lines or lines[0].strip() != f"```{language}":
        raise DocChanged(f"{where}: the line after {marker} must open a ```{language} block")
    if "```" not in lines[1:]:
        raise DocChanged(f"{where}: the ```{language} block after {marker} is never closed")
    return "\n".join(lines[1 : lines.index("```", 1)]) + "\n"


def _commands(block: str) -> list[str]:
    """A shell block's commands: one a line, comments and blank lines dropped."""
    stripped = (re.sub(r"(^|\s+)#.*$", "", line).strip() for line in block.splitlines())
    return [line for line in stripped if line]


@dataclass(frozen=True)
class InstallDoc:
    """The marked blocks of the section, checked for the shape this test runs."""

    archive: str
    archive_file: str
    overlay: str
    overlay_dir: str
    apply: str
    rollout: str
    ready: str
    uninstall: str

    @classmethod
    def read(cls, version: str) -> InstallDoc:
        text = DOC.read_text(encoding="utf-8")
        where = f'docs/operations.md, section "{SECTION}"'
        image = f"{LOCAL_IMAGE}:{version}"

        archive = _doc_block(text, "archive", "sh")
        push = r"STORAGE_DRIVER=vfs buildah push (\S+) docker-archive:([^:\s]+):(\S+)"
        pushes = [re.fullmatch(push, line) for line in _commands(archive)]
        if len(pushes) != 1 or pushes[0] is None:
            raise DocChanged(f"{where}: the archive block must be the one command `STORAGE_DRIVER="
                             f"vfs buildah push {image} docker-archive:FILE:{image}`, "
                             f"got {_commands(archive)}")  # fmt: skip
        if {pushes[0].group(1), pushes[0].group(3)} != {image}:
            raise DocChanged(f"{where}: the archive block names {pushes[0].group(1)} and "
                             f"{pushes[0].group(3)}, but `make image` builds {image} "
                             "(pyproject.toml's version): update the section")  # fmt: skip

        apply = _doc_block(text, "apply", "sh")
        applies = [re.fullmatch(r"hack/apply\.sh (\S+)", line) for line in _commands(apply)]
        if len(applies) != 1 or applies[0] is None:
            raise DocChanged(f"{where}: the apply block must be the one command "
                             f"`hack/apply.sh DIR`, got {_commands(apply)}")  # fmt: skip
        overlay_dir = applies[0].group(1).rstrip("/")

        overlay = _doc_block(text, "overlay", "yaml")
        _check_overlay(yaml.safe_load(overlay), version, where)

        blocks = {part: _doc_block(text, part, "sh") for part in ("rollout", "ready", "uninstall")}
        for part, block in blocks.items():
            if not _commands(block) or not all(c.startswith("kubectl ") for c in _commands(block)):
                raise DocChanged(f"{where}: the {part} block must hold kubectl commands only, "
                                 f"got {_commands(block)}")  # fmt: skip
        return cls(archive, pushes[0].group(2), overlay, overlay_dir, apply, **blocks)


def _check_overlay(kustomization: Any, version: str, where: str) -> None:
    image = {"name": RELEASED_IMAGE, "newName": LOCAL_IMAGE, "newTag": version}
    wanted = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
              "resources": ["<the path to config/install>"], "images": [image]}  # fmt: skip
    shape = f"the overlay block must be this kustomization.yaml:\n{yaml.safe_dump(wanted)}"
    if not isinstance(kustomization, dict) or set(kustomization) != set(wanted):
        raise DocChanged(f"{where}: {shape}got {kustomization!r}")
    for key in ("apiVersion", "kind", "images"):
        if kustomization[key] != wanted[key]:
            raise DocChanged(f"{where}: {shape}got {key}: {kustomization[key]!r} (is the tag "
                             "pyproject.toml's version, what `make image` builds?)")  # fmt: skip
    resources = kustomization["resources"]
    if not (isinstance(resources, list) and len(resources) == 1 and isinstance(resources[0], str)):
        raise DocChanged(f"{where}: {shape}got resources: {resources!r}")


def _checkout(directory: Path, overlay_dir: str) -> Path:
    """A checkout as the doc's reader has one: the repository's top-level entries as links, and
    a real directory where the doc writes its overlay."""
    top = Path(overlay_dir).parts[0]
    directory.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name != top:
            (directory / entry.name).symlink_to(entry)
    return directory


def _run_block(block: str, what: str, cwd: Path, env: dict[str, str], timeout: float) -> str:
    """The doc's block as written, with bash -euo pipefail; its output."""
    try:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=env,
                                capture_output=True, text=True, timeout=timeout,
                                check=False)  # fmt: skip
    except subprocess.TimeoutExpired as error:
        output = "".join(o.decode() if isinstance(o, bytes) else o or ""
                         for o in (error.stdout, error.stderr))  # fmt: skip
        raise AssertionError(f"the doc's {what} block did not finish in {timeout:.0f}s:\n{block}"
                             f"{output[-4000:]}") from error  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(f"the doc's {what} block failed (exit {result.returncode}):\n{block}"
                             f"{result.stdout[-4000:]}{result.stderr[-4000:]}")  # fmt: skip
    log.info("the doc's %s block:\n%s%s", what, block, result.stdout)
    return result.stdout


# -- the cluster -----------------------------------------------------------------------------


@dataclass
class Plain:
    cluster: LocalCluster
    flux: FluxStack
    node: RealNode
    version: str
    doc: InstallDoc
    checkout: Path
    env: dict[str, str]


def _version() -> str:
    for line in (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


def _build_image(version: str) -> None:
    """`make image` without `make setup` and the Dockerfile lint: hack/image.sh build, into vfs
    storage (its default, which the doc's archive block names)."""
    argv = ["bash", str(ROOT / "hack" / "image.sh"), "build", version]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False,
                            env={**os.environ, "STORAGE_DRIVER": "vfs"})  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed:\n{result.stderr[-4000:]}")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plain]:
    work = tmp_path_factory.mktemp("plain-install")
    version = _version()
    doc = InstallDoc.read(version)  # before anything starts: a stale doc fails at once
    checkout = _checkout(work / "checkout", doc.overlay_dir)
    cluster = LocalCluster(node_files=[DEMO_FLEET], progress=log.info).start()
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "KUBECTL": str(ROOT / "tools" / "bin" / "kubectl"),
           "PATH": f"{ROOT / 'tools' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    started: list[Any] = []
    try:
        started.append(FluxStack(cluster).start())
        started.append(RealNode(cluster, MANAGER_LABELS, SKR_NAMESPACE).start())
        _build_image(version)
        _run_block(doc.archive, "archive", checkout, env, 600)
        started[1].load_image(checkout / doc.archive_file)
        yield Plain(cluster, started[0], started[1], version, doc, checkout, env)
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


@dataclass(frozen=True)
class Running:
    """The doc's apply and rollout done: both manager pods Ready on the real node."""

    pods: list[dict[str, Any]]


@pytest.fixture(scope="module")
def running(plain: Plain) -> Running:
    cluster, doc = plain.cluster, plain.doc
    overlay = plain.checkout / doc.overlay_dir
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(doc.overlay, encoding="utf-8")
    (resource,) = yaml.safe_load(doc.overlay)["resources"]
    assert (overlay / resource).resolve() == (ROOT / "config" / "install").resolve(), (
        f"docs/operations.md: the overlay's resources entry {resource!r}, from "
        f"{doc.overlay_dir}/, is not config/install"
    )
    _run_block(doc.apply, "apply", plain.checkout, plain.env, 300)
    _run_block(doc.rollout, "rollout", plain.checkout, plain.env, 360)
    pods = wait_until(lambda: _both_ready(cluster), 120,
                      "both manager pods Ready on the real node (their real probes)")  # fmt: skip
    return Running(pods)


@dataclass(frozen=True)
class Reconciled:
    """The sample Gpu applied and the doc's ready block run."""

    shown: str
    gpu: dict[str, Any]


@pytest.fixture(scope="module")
def reconciled(plain: Plain, running: Running) -> Reconciled:
    cluster = plain.cluster
    mirror = {"chartRepository": plain.flux.helm_repo_url, "insecure": True}
    sample = yaml.safe_load((ROOT / "config" / "samples" / "gpu.yaml").read_text())
    sample["spec"] = {"source": mirror}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(sample))
    shown = _run_block(plain.doc.ready, "ready", plain.checkout, plain.env, 480)
    ready = wait_until(lambda: gpu_ready(cluster), 120, "the Gpu Ready, reconciled by the pod")
    return Reconciled(shown, ready)


def _statuses(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {}
    for pod in pods:
        (status,) = pod["status"]["containerStatuses"]
        found[pod["metadata"]["name"]] = status
    return found


@pytest.mark.timeout(900)
def test_the_manager_runs_on_the_real_node(plain: Plain, running: Running) -> None:
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in running.pods}
    assert set(nodes.values()) == {plain.node.name}, nodes


@pytest.mark.timeout(900)
def test_the_manager_runs_the_image_make_image_built(plain: Plain, running: Running) -> None:
    for name, status in _statuses(running.pods).items():
        assert status["image"].endswith(f"{LOCAL_IMAGE}:{plain.version}"), (name, status["image"])


@pytest.mark.timeout(900)
def test_containerd_runs_the_manager(running: Running) -> None:
    for name, status in _statuses(running.pods).items():
        assert status["containerID"].startswith("containerd://"), (name, status)


@pytest.mark.timeout(900)
def test_the_manager_starts_without_a_restart(running: Running) -> None:
    for name, status in _statuses(running.pods).items():
        assert status["restartCount"] == 0, f"the manager {name} restarted: {status}"


@pytest.mark.timeout(900)
def test_the_docs_ready_block_shows_the_gpu_ready(reconciled: Reconciled) -> None:
    assert "condition met" in reconciled.shown, reconciled.shown
    assert re.search(r"^gpu\s+Ready\s", reconciled.shown, re.MULTILINE), (
        f"kubectl get gpu:\n{reconciled.shown}"
    )


@pytest.mark.timeout(900)
def test_the_release_is_ready(reconciled: Reconciled) -> None:
    assert (condition(reconciled.gpu, "ReleaseReady") or {}).get("status") == "True", (
        reconciled.gpu.get("status")
    )


@pytest.mark.timeout(900)
def test_one_of_the_pods_holds_the_lease(
    plain: Plain, running: Running, reconciled: Reconciled
) -> None:
    lease = plain.cluster.get_object("lease", "kyma-gpu-manager", SKR_NAMESPACE) or {}
    names = {p["metadata"]["name"] for p in running.pods}
    assert lease["spec"]["holderIdentity"] in names, lease.get("spec")


@pytest.mark.timeout(900)
def test_the_manager_reconciles_without_a_restart(plain: Plain, reconciled: Reconciled) -> None:
    for name, status in _statuses(manager_pods(plain.cluster)).items():
        assert status["restartCount"] == 0, (
            f"the manager {name} restarted while reconciling: {status}"
        )


@pytest.fixture(scope="module")
def uninstalled(plain: Plain, reconciled: Reconciled) -> LocalCluster:
    """The doc's uninstall, after the install reconciled (a failed install fails this too)."""
    _run_block(plain.doc.uninstall, "uninstall", plain.checkout, plain.env, 840)
    return plain.cluster


@pytest.mark.timeout(900)
def test_the_uninstall_removes_the_crd(uninstalled: LocalCluster) -> None:
    assert uninstalled.get_object("crd", "gpus.gpu.kyma-project.io") is None


@pytest.mark.timeout(900)
def test_the_uninstall_removes_the_release(uninstalled: LocalCluster) -> None:
    assert uninstalled.list_objects("helmreleases.helm.toolkit.fluxcd.io", SKR_NAMESPACE) == []


@pytest.mark.timeout(900)
def test_the_uninstall_removes_the_manager(uninstalled: LocalCluster) -> None:
    assert uninstalled.get_object("deployment", "gpu-manager", SKR_NAMESPACE) is None
    wait_until(lambda: not uninstalled.list_objects("pods", SKR_NAMESPACE, MANAGER_PODS) or None,
               120, "the manager's pods gone from the real node")  # fmt: skip


@pytest.mark.timeout(900)
def test_the_uninstall_removes_the_operands_namespace(uninstalled: LocalCluster) -> None:
    assert uninstalled.get_object("namespace", "gpu-operator") is None


@pytest.mark.timeout(900)
def test_the_uninstall_keeps_kyma_system(uninstalled: LocalCluster) -> None:
    assert uninstalled.get_object("namespace", SKR_NAMESPACE) is not None, "kyma-system stays"
