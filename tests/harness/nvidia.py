"""The real NVIDIA GPU Operator controller on the local cluster, while its chart is installed.

In a cluster the chart's ``gpu-operator`` Deployment runs the controller in a pod. Here that
pod is a kwok pod that does nothing, so ``NvidiaOperator`` plays its kubelet: a thread that
follows the Deployment and runs the controller binary (``make tools`` builds one per chart
version from ../shared/vendor/gpu-operator) as a local process.

- **When.** The process runs while the Deployment exists, and at the version of the chart
  that rendered it (its ``helm.sh/chart`` label): a chart bump restarts it at the new
  version, a deleted Deployment stops it (and a restored one starts it again). If it exits
  on its own it is restarted, as a kubelet would, and the crash is recorded:
  ``check_alive()`` raises for it.
- **As whom.** It reaches the API server with a token of the chart's ServiceAccount
  (TokenRequest), so the chart's RBAC is exercised as in a cluster, and with the
  Deployment's environment (``OPERATOR_NAMESPACE``, ``DRIVER_MANAGER_IMAGE``, ...).
  ``--leader-elect`` is dropped: out of a cluster controller-runtime cannot find a
  namespace for the Lease, and one process needs no election.
- **Its files.** The controller reads its state manifests from the fixed path
  /opt/gpu-operator. It runs in a private mount namespace (``unshare -m``; with
  ``--map-root-user`` when not root) where a tmpfs covers /opt and the cached assets are
  bind-mounted at /opt/gpu-operator. The host's /opt is never touched.
- **NFD.** The chart's NFD worker pods are kwok pods too. A Node on which an NFD worker pod
  runs gets the labels NFD would publish there (nfd.node_labels: built-in sources plus the
  custom rules of the rendered worker ConfigMap); a Node without one (e.g. tainted against
  it) gets none, and when the chart goes the labels go (as NFD's post-delete prune does).
  The labels are server-side applied by their own field manager, so labels the node file
  set stay.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from . import nfd
from .binaries import MissingBinaryError, tools_bin_dir
from .cluster import LocalCluster
from .procs import ManagedProcess

NAMESPACE = "gpu-operator"
DEPLOYMENT = "gpu-operator"
SERVICE_ACCOUNT = "gpu-operator"
NFD_MANAGER = "nfd-emulation"
PROCESS_NAME = "nvidia-gpu-operator"
FATAL_PATTERNS = ("^panic: ", '"level":"error".*"logger":"setup"', "\tERROR\tsetup\t")
_LAUNCH = r"""
set -e
mount -t tmpfs -o mode=0755 kyma-gpu-opt /opt
mkdir /opt/gpu-operator
mount --bind "$1" /opt/gpu-operator
shift
exec "$@"
"""


def controller_dir(version: str) -> Path:
    """The cache directory of the controller at ``version`` (binary + opt/ assets)."""
    path = tools_bin_dir() / f"gpu-operator-{version}"
    if not (path / "gpu-operator").is_file() or not (path / "opt" / "manifests").is_dir():
        raise MissingBinaryError(
            f"NVIDIA GPU Operator controller {version} not found at {path}: run `make tools` "
            "(tools/build.sh builds it from ../shared/vendor/gpu-operator)"
        )
    return path


def chart_version(deployment: dict[str, Any]) -> str:
    """``gpu-operator-v26.3.3`` (the helm.sh/chart label) -> ``v26.3.3``. A chart that Flux
    pulled by digest (an OCIRepository's ref.digest) carries the digest as build metadata and
    loses its "v" (``gpu-operator-26.7.0_1979d0dfbd96``): the same chart, ``v26.7.0``."""
    label = ((deployment.get("metadata") or {}).get("labels") or {}).get("helm.sh/chart", "")
    prefix = "gpu-operator-"
    if not label.startswith(prefix):
        raise ValueError(
            f"Deployment {DEPLOYMENT} has no helm.sh/chart label of the chart: {label!r}"
        )
    version = str(label[len(prefix) :]).split("_", 1)[0]
    return version if version.startswith("v") else f"v{version}"


def container_env(deployment: dict[str, Any]) -> dict[str, str]:
    """The controller container's environment, with fieldRefs resolved as a kubelet would."""
    pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "gpu-operator")
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif (item.get("valueFrom") or {}).get("fieldRef", {}).get(
            "fieldPath"
        ) == "metadata.namespace":
            env[item["name"]] = deployment["metadata"]["namespace"]
    return env


def container_args(deployment: dict[str, Any]) -> list[str]:
    pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "gpu-operator")
    return [a for a in container.get("args") or [] if a != "--leader-elect"]


class NvidiaOperator:
    """Runs the real controller while the chart's Deployment exists; emulates NFD labels."""

    def __init__(
        self, cluster: LocalCluster, interval: float = 1.0, emulate_nfd: bool = True
    ) -> None:
        self.cluster = cluster
        self.interval = interval
        self.emulate_nfd = emulate_nfd
        """False: leave Node labels alone (a fleet that carries NFD's labels already, such as
        the scale benchmark's: following NFD lists every Node each second)."""
        self.workdir = cluster.workdir / "nvidia"
        self.log = cluster.log_dir / "nvidia-harness.log"
        self.version: str | None = None
        """The chart version of the running controller, None when none runs."""
        self.starts: list[str] = []
        self.crashes: list[str] = []
        self._process: ManagedProcess | None = None
        self._labels: dict[str, dict[str, str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._tls = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
        self._tls.load_cert_chain(str(cluster.pki.admin_cert), str(cluster.pki.admin_key))

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> NvidiaOperator:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="nvidia-operator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self._stop_controller()

    def check_alive(self) -> None:
        """Raise if the supervisor failed or the controller ever exited on its own."""
        if self._error is not None:
            raise AssertionError(f"the NVIDIA operator harness failed: {self._error!r}")
        if self.crashes:
            raise AssertionError(f"the NVIDIA controller exited on its own: {self.crashes}")

    def _note(self, message: str) -> None:
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as error:
                self._note(f"error: {error!r}")
                self._error = error
            self._stop.wait(self.interval)

    @property
    def pid(self) -> int | None:
        """The controller's launcher (the controller is its child); None while none runs."""
        return self._process.pid if self._process is not None else None

    def _tick(self) -> None:
        if self.emulate_nfd:
            self._follow_nfd()
        self._follow_deployment()

    # -- API ---------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.cluster.server}{path}", data=data, method=method,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, context=self._tls, timeout=10) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as error:
            if error.code == 404 and method == "GET":
                return None
            raise

    # -- NFD ---------------------------------------------------------------

    def _worker_config(self) -> dict[str, Any] | None:
        found = self._request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps")
        for item in (found or {}).get("items") or []:
            data = item.get("data") or {}
            if nfd.WORKER_CONF_KEY in data:
                return nfd.worker_config(data)
        return None

    def _nfd_worker_nodes(self) -> set[str]:
        """Nodes where a pod of the NFD worker DaemonSet runs."""
        selector = "app.kubernetes.io/name=node-feature-discovery,role=worker"
        found = self._request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={quote(selector)}"
        )  # fmt: skip
        return {
            pod["spec"].get("nodeName", "")
            for pod in (found or {}).get("items") or []
            if (pod.get("status") or {}).get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")
        }

    def _follow_nfd(self) -> None:
        config = self._worker_config()
        workers = self._nfd_worker_nodes() if config is not None else set()
        nodes = (self._request("GET", "/api/v1/nodes") or {}).get("items") or []
        for node in nodes:
            name = node["metadata"]["name"]
            labels = nfd.node_labels(node, config) if config and name in workers else {}
            if self._labels.get(name) == labels:
                continue
            patch = {"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": name, "labels": labels}}  # fmt: skip
            self._request(
                "PATCH", f"/api/v1/nodes/{name}?fieldManager={NFD_MANAGER}&force=true",
                patch, "application/apply-patch+yaml",
            )  # fmt: skip
            self._labels[name] = labels
        present = {n["metadata"]["name"] for n in nodes}
        self._labels = {k: v for k, v in self._labels.items() if k in present}

    # -- the controller ------------------------------------------------------

    def _follow_deployment(self) -> None:
        deployment = self._request(
            "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{DEPLOYMENT}"
        )
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            if self._process is not None:
                self._note("the chart's Deployment is gone: stopping the controller")
                self._stop_controller()
            return
        version = chart_version(deployment)
        if self._process is not None and not self._process.running():
            code = self._process.returncode()
            self.crashes.append(f"{self.version} exited with code {code}")
            self._note(f"the controller {self.version} exited with code {code}: restarting")
            self._stop_controller()
        if version != self.version:
            if self._process is not None:
                self._note(f"chart {self.version} -> {version}: restarting the controller")
                self._stop_controller()
            self._start_controller(version, deployment)

    def _kubeconfig(self, version: str) -> Path:
        answer = self._request(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 86400}},
        )  # fmt: skip
        config = yaml.safe_load(self.cluster.kubeconfig.read_text(encoding="utf-8"))
        config["users"] = [{"name": "admin", "user": {"token": answer["status"]["token"]}}]
        path = self.workdir / f"kubeconfig-{version}"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        path.chmod(0o600)
        return path

    def _start_controller(self, version: str, deployment: dict[str, Any]) -> None:
        home = controller_dir(version)
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            unshare.insert(1, "--map-root-user")
        argv = [
            *unshare, "sh", "-c", _LAUNCH, "launch", str(home / "opt"),
            str(home / "gpu-operator"), *container_args(deployment),
            "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
        ]  # fmt: skip
        env = {**container_env(deployment), "KUBECONFIG": str(self._kubeconfig(version))}
        process = ManagedProcess(
            PROCESS_NAME, argv, self.cluster.log_dir / f"{PROCESS_NAME}.log",
            env=env, cwd=self.workdir, fatal_patterns=FATAL_PATTERNS,
        )  # fmt: skip
        process.start()
        # The chart's uninstall may end it before the Deployment's deletion is seen here;
        # check_alive() above decides what counts as a crash, not the cluster's.
        self.cluster.register(process, supervised=True)
        self._process, self.version = process, version
        self.starts.append(version)
        self._note(f"started the controller {version} (pid {process.pid})")

    def _stop_controller(self) -> None:
        if self._process is not None:
            self._process.stop(timeout=10)
        self._process, self.version = None, None
