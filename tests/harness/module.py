"""The module on the local cluster: the operator as a real process (`python -m kyma_gpu`), its
CRDs, and what the operator tests and the demo share: waiting on conditions and counting the
operator's API writes (from the API server's audit log). The NVIDIA GPU Operator controller
runs for real while Flux has the chart installed (tests/harness/nvidia.py, started by
FluxStack).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kyma_gpu.api.resources import FLUX_KINDS, HELM_RELEASE
from tests.harness.cluster import LocalCluster
from tests.harness.flux import HELM_CRDS, HELM_GROUP, SOURCE_CRDS, SOURCE_GROUP, flux_crd_files
from tests.harness.nodes import DEMO_FLEET

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "config" / "crd" / "bases" / "gpu.kyma-project.io_gpus.yaml"
CHART_SOURCES_POLICY = ROOT / "config" / "admission" / "chart_sources_policy.yaml"
IMAGES_POLICY = ROOT / "config" / "admission" / "gpu_images_policy.yaml"
"""The admission policy on image registries (the module manifest has it next to the CRD)."""
NAMESPACE_MANIFEST = ROOT / "config" / "namespace" / "namespace.yaml"
RELEASE_RBAC = ROOT / "config" / "rbac" / "release_rbac.yaml"
FLUX_CRDS = (
    *(f"{n}.{HELM_GROUP}" for n in HELM_CRDS),
    *(f"{n}.{SOURCE_GROUP}" for n in SOURCE_CRDS),
)
"""Every Flux CRD the harness or the manager's own Flux installs (flux/crds/)."""
WRITTEN_FLUX_CRDS = tuple(k.crd_name for k in FLUX_KINDS)
"""The CRDs of the Flux kinds the manager writes."""
MODULE_NAMESPACE = "kyma-system"
TARGET_NAMESPACE = "gpu-operator"
T = TypeVar("T")


def wait_until(
    probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25
) -> T:
    """Poll a probe (test side only) until it returns something truthy.

    Fails at once, with the process and its log tail, when a process of a live cluster (the
    control plane, Flux, the NVIDIA controller, a registry, KLM) exited on its own or logged
    a fatal error: nothing can succeed after that, and the timeout would only hide why.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        for cluster in LocalCluster.live():
            cluster.check_alive()
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def install_crds(cluster: LocalCluster, flux: bool = True) -> None:
    """The Gpu CRD (spec.values held by its schema), the images and chart sources' policies
    and (unless flux=False: the manager installs its own Flux) the Flux CRDs the operator
    writes objects of."""
    policies = [CRD, IMAGES_POLICY, CHART_SOURCES_POLICY]
    files = [*policies, *flux_crd_files()] if flux else policies
    args = ["apply", "--server-side", "--field-manager=kyma-gpu-tests"]
    for path in files:
        args += ["-f", str(path)]
    cluster.kubectl(*args)
    cluster.wait_crds_established("gpus.gpu.kyma-project.io",
                                  *(WRITTEN_FLUX_CRDS if flux else ()))  # fmt: skip
    if cluster.get_object("namespace", MODULE_NAMESPACE) is None:
        cluster.create_namespace(MODULE_NAMESPACE)
    # The module manifest brings the target namespace and the ServiceAccount helm-controller
    # installs the chart as; so does the harness.
    cluster.kubectl("apply", "--server-side", "--field-manager=kyma-gpu-tests",
                    "-f", str(NAMESPACE_MANIFEST), "-f", str(RELEASE_RBAC))  # fmt: skip


def stop_gracefully(process: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGINT (kopf's graceful stop), SIGKILL after ``timeout`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


class OperatorProcess:
    """`python -m kyma_gpu --standalone` (kyma-gpu-manager) with the cluster's admin kubeconfig."""

    def __init__(
        self,
        cluster: LocalCluster,
        name: str = "operator",
        kubeconfig: Path | None = None,
        args: tuple[str, ...] = ("--standalone",),
        env: dict[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.env = env or {}
        self.log_path = cluster.log_dir / f"{name}.log"
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        self.args = args
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1",
               **self.env}  # fmt: skip
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kyma_gpu", *self.args],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        log.close()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        stop_gracefully(self.process, timeout)

    def kill(self) -> None:
        """A crash, not a shutdown: no cleanup runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


_FORBIDDEN = re.compile(r"\b403 Forbidden\b|\bforbidden\b|ForbiddenError", re.IGNORECASE)
"""A refused API call as the operator, the kubernetes client or kopf write it ("403 Forbidden:
...", '... is forbidden: User ...', APIForbiddenError). Not a bare "403", which a log's
millisecond timestamp also contains."""


def forbidden_lines(log: str) -> list[str]:
    """The lines of an operator log that tell of an API call its RBAC did not allow."""
    return [line for line in log.splitlines() if _FORBIDDEN.search(line)]


@contextlib.contextmanager
def module_on(
    cluster: LocalCluster,
    name: str = "operator",
    kubeconfig: Path | None = None,
    args: tuple[str, ...] = ("--standalone",),
    fleet: Path | None = DEMO_FLEET,
    env: dict[str, str] | None = None,
    flux_crds: bool = True,
) -> Iterator[OperatorProcess]:
    """The CRDs, a fleet (the demo's unless told; None: no nodes) and a running operator;
    afterwards the Gpu and the nodes go."""
    install_crds(cluster, flux=flux_crds)
    nodes = cluster.add_nodes(fleet) if fleet is not None else []
    process = OperatorProcess(cluster, name=name, kubeconfig=kubeconfig, args=args, env=env)
    process.start()
    try:
        yield process
    finally:
        remove_gpus(cluster, process)
        process.stop()
        for node in nodes:
            cluster.delete_node(node)


GPU_REMOVAL_SECONDS = 180.0
"""How long a teardown lets the operator uninstall a Gpu that a test left behind."""


def remove_gpus(cluster: LocalCluster, process: OperatorProcess) -> None:
    """Delete every Gpu while the operator still runs, so that it uninstalls and releases its
    finalizer; what is not gone after GPU_REMOVAL_SECONDS loses its finalizers (the Flux
    objects then go with their owner). A test that failed half-way must not hand the next
    test module a Gpu that is still being deleted."""
    cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "--all", "--wait=false", check=False)
    deadline = time.monotonic() + (GPU_REMOVAL_SECONDS if process.alive() else 0.0)
    while _gpu_names(cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    for name in _gpu_names(cluster):
        status = (gpu(cluster, name) or {}).get("status") or {}
        print(f"teardown: Gpu {name} not gone after {GPU_REMOVAL_SECONDS:.0f}s "
              f"({status.get('state')}: {status.get('message')}); "
              "removing its finalizers")  # fmt: skip
        cluster.kubectl("patch", "gpus.gpu.kyma-project.io", name, "--type=merge",
                        "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    wait_until(lambda: not _gpu_names(cluster), 30, "every Gpu gone after the teardown")


def _gpu_names(cluster: LocalCluster) -> list[str]:
    listed = cluster.kubectl("get", "gpus.gpu.kyma-project.io", "-o", "name", check=False)
    return [line.split("/", 1)[-1] for line in listed.stdout.split()]


def gpu(cluster: LocalCluster, name: str = "gpu") -> dict[str, Any] | None:
    return cluster.get_object("gpus.gpu.kyma-project.io", name)


def gpu_ready(cluster: LocalCluster, name: str = "gpu") -> dict[str, Any] | None:
    """The Gpu once its status is Ready for its current generation, else None."""
    obj = gpu(cluster, name)
    status = (obj or {}).get("status") or {}
    fresh = status.get("observedGeneration") == (obj or {}).get("metadata", {}).get("generation")
    return obj if obj and fresh and status.get("state") == "Ready" else None


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def helm_release(cluster: LocalCluster) -> dict[str, Any] | None:
    return cluster.get_object(HELM_RELEASE.crd_name, "gpu-operator", MODULE_NAMESPACE)


def operator_writes(cluster: LocalCluster) -> list[dict[str, Any]]:
    """Write requests (create/update/patch/delete) by the operator, from the audit log."""
    path = cluster.log_dir / "audit.log"
    writes = []
    if not path.exists():
        raise AssertionError(f"no audit log at {path}: the harness must enable auditing")
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        agent = str(event.get("userAgent", ""))
        if event.get("stage") != "ResponseComplete":
            continue
        if event.get("verb") not in ("create", "update", "patch", "delete"):
            continue
        if agent.startswith(("kyma-gpu", "kopf")):
            ref = event.get("objectRef") or {}
            writes.append({
                "verb": event["verb"], "resource": ref.get("resource"),
                "subresource": ref.get("subresource"), "name": ref.get("name"),
                "agent": agent, "code": (event.get("responseStatus") or {}).get("code"),
            })  # fmt: skip
    return writes


def install_module_rbac(cluster: LocalCluster) -> None:
    """config/default as KLM would apply it (CRDs first), minus the manager Deployment: the
    operator runs as a local process with the Deployment's ServiceAccount."""
    rendered = cluster.kubectl("kustomize", str(ROOT / "config" / "default")).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    rest = [o for o in objects if o["kind"] not in ("CustomResourceDefinition", "Deployment")]
    cluster.apply(*crds)
    for crd in crds:
        cluster.wait_crds_established(crd["metadata"]["name"])
    cluster.apply(*rest)


def service_account_kubeconfig(cluster: LocalCluster, name: str = "gpu-manager") -> Path:
    """A kubeconfig with a token of the ServiceAccount kyma-system/name (2 hours)."""
    token = cluster.kubectl("create", "token", name, "-n", MODULE_NAMESPACE,
                            "--duration=2h").stdout.strip()  # fmt: skip
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": name, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = name
    path = cluster.workdir / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def remove_flux_crds(cluster: LocalCluster) -> None:
    """No Flux at all: earlier tests' Flux objects lose their finalizers (their controllers
    are gone), then the CRDs go."""
    for name in FLUX_CRDS:
        if cluster.get_object("crd", name) is None:
            continue
        listed = cluster.kubectl("get", name, "-A", "-o", "name", check=False).stdout.split()
        namespaced = cluster.kubectl("get", name, "-A", "-o",
                                     "jsonpath={range .items[*]}{.metadata.namespace} {end}",
                                     check=False).stdout.split()  # fmt: skip
        for obj, namespace in zip(listed, namespaced, strict=False):
            cluster.kubectl("patch", obj, "-n", namespace, "--type=merge",
                            "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        cluster.kubectl("delete", "crd", name, "--wait=true", "--timeout=60s")
