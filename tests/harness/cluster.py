"""A real Kubernetes control plane from locally built binaries, with kwok nodes.

``LocalCluster`` starts, as local processes on 127.0.0.1:

- etcd (``--unsafe-no-fsync``: test data, speed over durability);
- kube-apiserver with its own CA, RBAC authorization and an admin client cert;
- kube-controller-manager with the controllers that make workloads behave
  (DaemonSet, Deployment, ReplicaSet, StatefulSet, Job, namespace deletion,
  garbage collection, service accounts, pod GC, kube-root-ca.crt, PDBs);
- kube-scheduler;
- kwok, which plays the kubelet of every node labelled ``kwok.x-k8s.io/node=fake``
  with the Stage files in ``tests/harness/kwok/`` (node Ready; pods Running and
  Ready; Job pods Succeeded; deleted pods gone; see the README there).

Use it as a context manager or call start()/stop(). The admin kubeconfig is
``<workdir>/kubeconfig``; each process logs to ``<workdir>/logs/<name>.log``;
the API server's audit log of write requests is ``<workdir>/logs/audit.log``
(tests use it to check that a client wrote nothing).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import yaml

from . import nodes as nodes_module
from .binaries import CLUSTER_BINARIES, MissingBinaryError, require
from .pki import ClusterPKI, create_pki
from .procs import (
    ManagedProcess,
    free_port,
    http_ok,
    insecure_tls,
    log_tails,
    stop_all,
    wait_for,
)
from .rest import RestReader

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

KWOK_STAGES_DIR = Path(__file__).resolve().parent / "kwok"
OPERAND_LABEL = "app.kubernetes.io/managed-by"
OPERAND_MANAGER = "gpu-operator"
OPERAND_READY_DELAY_MS = 3000
"""How long the NVIDIA operand pods (label app.kubernetes.io/managed-by=gpu-operator)
take to become Ready: long enough that the ClusterPolicy is seen notReady first, as
on a real node where the driver takes minutes."""


def kwok_stage_files(out_dir: Path) -> list[Path]:
    """The Stage files of tests/harness/kwok, plus one written to ``out_dir``: the
    pod-ready stage for the NVIDIA operand pods, delayed by OPERAND_READY_DELAY_MS.
    The stock pod-ready stage excludes those pods, so exactly one stage matches.
    (kwok touches only the pods on its own nodes: a real node's pods are the kubelet's,
    tests/harness/realnode.py.)
    """
    files = sorted(KWOK_STAGES_DIR.glob("*.yaml"))
    stage = yaml.safe_load((KWOK_STAGES_DIR / "pod-ready.yaml").read_text(encoding="utf-8"))
    stage["metadata"]["name"] = "kyma-gpu-operand-pod-ready"
    key = f'.metadata.labels["{OPERAND_LABEL}"]'
    expressions = stage["spec"]["selector"]["matchExpressions"]
    stock = [e for e in expressions if e["key"] == key and e["operator"] == "NotIn"]
    if stock != [{"key": key, "operator": "NotIn", "values": [OPERAND_MANAGER]}]:
        raise ValueError(f"pod-ready.yaml must exclude the operand pods with {key} NotIn")
    expressions.remove(stock[0])
    expressions.append({"key": key, "operator": "In", "values": [OPERAND_MANAGER]})
    stage["spec"]["delay"] = {"durationMilliseconds": OPERAND_READY_DELAY_MS}
    out_dir.mkdir(parents=True, exist_ok=True)
    generated = out_dir / "operand-pod-ready.yaml"
    generated.write_text(yaml.safe_dump(stage, sort_keys=False), encoding="utf-8")
    return [*files, generated]


_LIVE: list[LocalCluster] = []
"""Every cluster of this process that has started and not stopped (for failure reports)."""

CLUSTER_NAME = "kyma-gpu-local"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
POD_CIDR = "10.244.0.0/16"

CONTROLLERS = (
    "daemonset-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "job-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "pod-garbage-collector-controller",
    "root-ca-certificate-publisher-controller",
    "disruption-controller",
)
"""kube-controller-manager controllers that run.

Left out on purpose: node-lifecycle-controller. It would taint and evict
nodes whose heartbeats stop, which kwok only sends if told to; without it the
fake nodes stay Ready for the whole session at no CPU cost. Services,
endpoints, volumes, CSRs and cloud controllers are not needed by the tests.
"""

Progress = Callable[[str], None]

RESTART_CONTROLLERS_AFTER = 30.0
"""An API server outage at least this long (s) restarts the other controllers when it ends
(LocalCluster._restart_controllers says why). After a short one (test_faults: 3 s) client-go's
reflectors are back within a second or two, and the controllers keep running through it, as
they would on a real cluster."""


def _quiet(_: str) -> None:
    return None


def close_client(api: ApiClient) -> None:
    """Close an ApiClient (kubernetes 37 leaves close() unannotated)."""
    api.close()  # type: ignore[no-untyped-call]


_SUMMARY_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Gpus",
        (
            "gpus.gpu.kyma-project.io",
            "-o",
            "custom-columns=NAME:.metadata.name,"
            "STATE:.status.state,GEN:.metadata.generation,OBSERVED:.status.observedGeneration,"
            "MESSAGE:.status.message",
        ),
    ),
    (
        "Gpu conditions",
        (
            "gpus.gpu.kyma-project.io",
            "-o",
            "jsonpath={range .items[*].status"
            '.conditions[*]}{.type}={.status} {.reason}: {.message}{"\\n"}{end}',
        ),
    ),
    (
        "HelmReleases (conditions, last history entry)",
        (
            "helmreleases.helm.toolkit.fluxcd.io",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} generation "
            "{.metadata.generation}: {range .status.conditions[*]}{.type}={.status} {.reason} "
            '(gen {.observedGeneration}): {.message}{"\\n  "}{end}'
            "history[0]: {.status.history[0].chartVersion} {.status.history[0].status}"
            '{"\\n"}{end}',
        ),
    ),
    (
        "ClusterPolicies",
        (
            "clusterpolicies.nvidia.com",
            "-o",
            "custom-columns=NAME:.metadata.name,STATE:.status.state",
        ),
    ),
    ("nodes", ("nodes", "-L", "nvidia.com/gpu-driver-upgrade-state")),
    ("DaemonSets", ("daemonsets", "-A")),
)
"""The tables of objects_summary: kubectl get arguments (the CRDs may not be installed)."""


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok.

    ``workdir``: where PKI, etcd data, logs and the kubeconfig go; a new temp
    dir by default, removed on stop() unless ``keep_workdir`` (or the
    environment variable KYMA_GPU_HARNESS_KEEP=1). A given workdir is never
    removed. ``node_files``: YAML files of Nodes (see nodes.py) created at
    start, which then waits until they are Ready.
    """

    def __init__(
        self,
        workdir: Path | str | None = None,
        *,
        keep_workdir: bool = False,
        node_files: Sequence[Path | str] = (),
        progress: Progress | None = None,
        start_timeout: float = 120.0,
        controller_qps: int | None = None,
    ) -> None:
        self._own_workdir = workdir is None
        self.controller_qps = controller_qps
        """kube-controller-manager's --kube-api-qps (burst twice that); None: its default, 20/s,
        which paces the DaemonSet controller's pod creation on a large fleet."""
        self.workdir = (
            Path(tempfile.mkdtemp(prefix="kyma-gpu-cluster-"))
            if workdir is None
            else Path(workdir).resolve()
        )
        self.keep_workdir = keep_workdir or os.environ.get("KYMA_GPU_HARNESS_KEEP") == "1"
        self.node_files = [Path(path) for path in node_files]
        self.progress: Progress = progress or _quiet
        self.start_timeout = start_timeout
        self.log_dir = self.workdir / "logs"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.audit_log = self.log_dir / "audit.log"
        """API write requests (create/update/patch/delete) as JSON lines."""
        self.processes: dict[str, ManagedProcess] = {}
        self._supervised: set[str] = set()
        self.timings: dict[str, float] = {}
        self.node_names: list[str] = []
        self.api_port = 0
        self._pki: ClusterPKI | None = None
        self._bins: dict[str, Path] = {}
        self._started = False
        self._rest: RestReader | None = None
        self._controller_probes: dict[str, Callable[[], bool]] = {}

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def server(self) -> str:
        """The API server URL, https://127.0.0.1:<port>."""
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def pki(self) -> ClusterPKI:
        if self._pki is None:
            raise RuntimeError("the cluster has not been started")
        return self._pki

    def start(self) -> LocalCluster:
        """Start every process and wait until it is healthy (and the nodes Ready)."""
        if self._started:
            return self
        self._started = True
        began = time.monotonic()
        try:
            self._start(began)
        except BaseException as error:
            self.progress("start failed; stopping what was started")
            if self._removes_workdir() and self.log_dir.is_dir():
                # The logs go with the workdir: keep what they say in the error.
                error.add_note(f"local cluster at the failed start:\n{self.diagnostics()}")
            self.stop()
            raise
        return self

    @staticmethod
    def live() -> list[LocalCluster]:
        """The clusters of this process that started and have not stopped: the session's and
        any a test module runs of its own (tests/e2e/test_klm.py)."""
        return list(_LIVE)

    def _start(self, began: float) -> None:
        _LIVE.append(self)
        self._bins = require(*CLUSTER_BINARIES)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._pki = create_pki(self.workdir / "pki")
        self.api_port = free_port()
        self._write_kubeconfig()
        etcd_url = self._start_etcd()
        self._start_apiserver(etcd_url)
        self._start_controllers()
        self.timings["control plane"] = time.monotonic() - began
        if self.node_files:
            self.progress(f"creating nodes from {', '.join(map(str, self.node_files))}")
            for path in self.node_files:
                self.add_nodes(path, wait=False)
            self.timings["nodes ready"] = self.wait_nodes_ready(self.node_names)
        self.timings["total"] = time.monotonic() - began
        self.progress(f"cluster ready in {self.timings['total']:.1f}s")

    def _start_etcd(self) -> str:
        etcd_url = f"http://127.0.0.1:{free_port()}"
        peer_url = f"http://127.0.0.1:{free_port()}"
        etcd = self._process(
            "etcd",
            [
                str(self._bins["etcd"]),
                "--name=kyma-gpu",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=kyma-gpu={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self.progress("starting etcd")
        etcd.start()
        self._healthy(etcd, lambda: http_ok(f"{etcd_url}/health", expect=b'"health":"true"'))
        return etcd_url

    def _audit_policy(self) -> Path:
        """Log every write request (metadata only): tests count what a client wrote.

        The events go to ``self.audit_log`` (JSON lines, one audit.k8s.io/v1
        Event each, written before the response: --audit-log-mode=blocking).
        """
        path = self.workdir / "audit-policy.yaml"
        path.write_text(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
            "rules:\n"
            "- level: Metadata\n"
            "  verbs: [create, update, patch, delete, deletecollection]\n"
            "- level: None\n",
            encoding="utf-8",
        )
        return path

    def _start_apiserver(self, etcd_url: str) -> None:
        pki = self.pki
        apiserver = self._process(
            "kube-apiserver",
            [
                str(self._bins["kube-apiserver"]),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                # Endpoints for the `kubernetes` Service would need a
                # non-loopback address; nothing in the tests dials it.
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                # A real node's Hostname (its name) resolves nowhere; its InternalIP is a
                # local address (tests/harness/realnode.py): logs, exec, port-forward.
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                f"--kubelet-client-key={pki.kubelet_client_key}",
                f"--cert-dir={self.workdir / 'kube-apiserver'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--service-account-issuer=https://127.0.0.1:{self.api_port}/",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                # The ServiceAccount admission plugin stays on, as in a real
                # cluster: pods wait for their ServiceAccount, which the
                # serviceaccount controller creates (`default`) or the chart
                # does. TaintNodesByCondition is off: it puts a not-ready
                # NoSchedule taint on every new Node that only the
                # node-lifecycle controller (not run, see CONTROLLERS) removes.
                "--disable-admission-plugins=TaintNodesByCondition",
                "--profiling=false",
                f"--audit-policy-file={self._audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
            ],
        )
        self.progress("starting kube-apiserver")
        apiserver.start()
        api_tls = self._api_tls()
        self._healthy(apiserver, lambda: http_ok(f"{self.server}/readyz", context=api_tls))
        apiserver.wait_healthy(lambda: http_ok(f"{self.server}/livez", context=api_tls), 10)

    def restart_apiserver(self, down_seconds: float) -> float:
        """An outage: stop kube-apiserver, wait, start it again (same port, same etcd).
        Returns the seconds from the restart until it was ready."""
        apiserver = self.processes["kube-apiserver"]
        self.progress(f"stopping kube-apiserver for {down_seconds:.0f}s")
        apiserver.stop()
        time.sleep(down_seconds)
        apiserver.restart()
        api_tls = self._api_tls()
        ready = apiserver.wait_healthy(
            lambda: http_ok(f"{self.server}/readyz", context=api_tls), self.start_timeout
        )
        if down_seconds >= RESTART_CONTROLLERS_AFTER:
            self._restart_controllers()
        return ready

    def _restart_controllers(self) -> None:
        """Restart kube-controller-manager, kube-scheduler and kwok after an API server outage.

        They would reconnect by themselves, but not soon enough for the tests after the
        outage: client-go's reflectors back off for up to 30 s, and a Node deleted before a
        reflector is back stays in the DaemonSet controller's count for good (it has no delete
        handler for Nodes, k8s v1.36.3 pkg/controller/daemon/daemon_controller.go:272). A new
        DaemonSet then makes pods for Nodes that are gone, which stay Pending, and a Helm install
        that waits for it never ends. Seen in CI: after test_outage's 120 s outage the next
        module's NFD worker DaemonSet wanted 2 pods on a cluster of one CPU-only Node.
        The manager under test is not restarted: surviving the outage is what is tested."""
        for name, probe in self._controller_probes.items():
            process = self.processes[name]
            process.restart()
            self._healthy(process, probe)

    def _start_controllers(self) -> None:
        pki = self.pki
        kcm_port, scheduler_port, kwok_port = free_port(), free_port(), free_port()
        kcm = self._process(
            "kube-controller-manager",
            [
                str(self._bins["kube-controller-manager"]),
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(CONTROLLERS)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.workdir / 'kube-controller-manager'}",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--profiling=false",
                *self._controller_rate(),
            ],
        )
        scheduler = self._process(
            "kube-scheduler",
            [
                str(self._bins["kube-scheduler"]),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={scheduler_port}",
                "--profiling=false",
            ],
        )
        kwok = self._process(
            "kwok",
            [
                str(self._bins["kwok"]),
                f"--kubeconfig={self.kubeconfig}",
                *(f"--config={stage}" for stage in kwok_stage_files(self.workdir / "kwok")),
                f"--manage-nodes-with-label-selector={nodes_module.KWOK_SELECTOR}",
                f"--cidr={POD_CIDR}",
                f"--server-address=127.0.0.1:{kwok_port}",
            ],
        )
        self.progress("starting kube-controller-manager, kube-scheduler, kwok")
        for process in (kcm, scheduler, kwok):
            process.start()
        insecure = insecure_tls()
        self._controller_probes = {
            kcm.name: lambda: http_ok(f"https://127.0.0.1:{kcm_port}/healthz", context=insecure),
            scheduler.name: lambda: http_ok(
                f"https://127.0.0.1:{scheduler_port}/healthz", context=insecure
            ),
            kwok.name: lambda: http_ok(f"http://127.0.0.1:{kwok_port}/healthz"),
        }
        for name, probe in self._controller_probes.items():
            self._healthy(self.processes[name], probe)

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL); remove a temp workdir. Idempotent."""
        if self in _LIVE:
            _LIVE.remove(self)
        clients = [
            process
            for name, process in reversed(self._process_list())
            if name not in ("kube-apiserver", "etcd")
        ]
        stop_all(clients)
        stop_all([p for n, p in self._process_list() if n == "kube-apiserver"])
        stop_all([p for n, p in self._process_list() if n == "etcd"])
        if self._removes_workdir() and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _removes_workdir(self) -> bool:
        return self._own_workdir and not self.keep_workdir

    # -- helpers -----------------------------------------------------------

    def _process(self, name: str, argv: Sequence[str], **env: str) -> ManagedProcess:
        process = ManagedProcess(
            name, argv, self.log_dir / f"{name}.log", env=env or None, cwd=self.workdir
        )
        self.processes[name] = process
        return process

    def _controller_rate(self) -> list[str]:
        if self.controller_qps is None:
            return []
        return [
            f"--kube-api-qps={self.controller_qps}",
            f"--kube-api-burst={2 * self.controller_qps}",
        ]

    def _process_list(self) -> list[tuple[str, ManagedProcess]]:
        """A snapshot of the processes: another thread (the NVIDIA controller's runner) may
        register one while this one iterates."""
        return list(self.processes.items())

    def register(self, process: ManagedProcess, *, supervised: bool = False) -> None:
        """Add a process started by someone else (Flux) so stop() and logs cover it.

        ``supervised``: its starter decides whether an exit is a failure (the NVIDIA
        controller may end with the chart it belongs to), so check_alive() leaves it out."""
        self.processes[process.name] = process
        if supervised:
            self._supervised.add(process.name)
        else:
            self._supervised.discard(process.name)

    def _healthy(self, process: ManagedProcess, probe: Callable[[], bool]) -> None:
        took = process.wait_healthy(probe, timeout=self.start_timeout)
        self.timings[process.name] = took

    def admin_tls(self) -> ssl.SSLContext:
        """A TLS context that trusts the cluster CA and presents the admin certificate."""
        return self._api_tls()

    def _api_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def _write_kubeconfig(self) -> None:
        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode("ascii")

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": CLUSTER_NAME,
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(self.pki.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": b64(self.pki.admin_cert),
                        "client-key-data": b64(self.pki.admin_key),
                    },
                }
            ],
            "contexts": [
                {"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": "admin"}}
            ],
            "current-context": CLUSTER_NAME,
            "preferences": {},
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        self.kubeconfig.chmod(0o600)

    # -- using the cluster -------------------------------------------------

    def api_client(self) -> ApiClient:
        """A new kubernetes.client.ApiClient for the admin user (close it when done)."""
        from kubernetes import client

        configuration = client.Configuration(
            host=self.server,
            ssl_ca_cert=str(self.pki.ca_cert),
            cert_file=str(self.pki.admin_cert),
            key_file=str(self.pki.admin_key),
        )
        return client.ApiClient(configuration)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run tools/bin/kubectl against this cluster; raises with stderr if check fails."""
        kubectl = require("kubectl")["kubectl"]
        result = subprocess.run(
            [str(kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    @contextlib.contextmanager
    def kube_client(self) -> Iterator[ApiClient]:
        """``with cluster.kube_client() as api:`` an ApiClient that is closed afterwards."""
        api = self.api_client()
        try:
            yield api
        finally:
            close_client(api)

    def apply(
        self,
        *objects: Mapping[str, Any],
        field_manager: str = "kyma-gpu-tests",
        force_conflicts: bool = True,
    ) -> None:
        """Server-side apply Kubernetes objects (dicts, as in a YAML manifest).

        Conflicts with other field managers (a controller, helm-controller) are
        forced by default: a test that applies a field means it.
        """
        document = {"apiVersion": "v1", "kind": "List", "items": [dict(o) for o in objects]}
        args = ["apply", "--server-side", f"--field-manager={field_manager}", "-f", "-"]
        if force_conflicts:
            args.append("--force-conflicts")
        self.kubectl(*args, input=json.dumps(document))

    def get_object(
        self, resource: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """One object as a dict (what kubectl get -o json prints), None if it does not exist.

        ``resource`` is what kubectl accepts: ``daemonset``, ``helmrelease``,
        ``clusterpolicies.nvidia.com`` ... Read straight from the API (rest.py): tests poll
        these, and a kubectl process per poll cost a tenth of a CPU second each.
        """
        return self.rest.get(resource, name, namespace)

    def list_objects(
        self, resource: str, namespace: str | None = None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects of a kind as dicts; namespace None means all namespaces."""
        return self.rest.list(resource, namespace, selector)

    @property
    def rest(self) -> RestReader:
        """Reads from the API server as the admin, resources resolved like kubectl's."""
        if self._rest is None:
            self._rest = RestReader(self.server, self._api_tls())
        return self._rest

    def wait_crds_established(self, *names: str, timeout: float = 60.0) -> float:
        """Wait until the named CRDs (``helmreleases.helm.toolkit.fluxcd.io``) are Established.

        Polls instead of ``kubectl wait``, which fails outright on a CRD that is
        so new it has no status.conditions yet.
        """

        def established() -> bool:
            items = [self.get_object("customresourcedefinitions", name) for name in names]
            ready = {
                crd["metadata"]["name"]
                for crd in items
                if crd is not None
                for c in (crd.get("status") or {}).get("conditions") or []
                if c.get("type") == "Established" and c.get("status") == "True"
            }
            return ready >= set(names)

        return wait_for(established, timeout, f"CRDs Established: {', '.join(names)}")

    def add_nodes(
        self, source: Path | str, *, wait: bool = True, timeout: float = 60.0
    ) -> list[str]:
        """Create the Nodes in a YAML file (see nodes.load_nodes); wait until Ready."""
        with self.kube_client() as api:
            names = nodes_module.create_nodes(api, nodes_module.load_nodes(Path(source)))
        self.node_names.extend(name for name in names if name not in self.node_names)
        if wait:
            self.wait_nodes_ready(names, timeout=timeout)
        return names

    def wait_nodes_ready(self, names: Sequence[str], timeout: float = 60.0) -> float:
        """Wait until every named Node has Ready=True (kwok); seconds taken."""
        with self.kube_client() as api:
            return nodes_module.wait_nodes_ready(
                api, names, timeout=timeout, alive=[self.processes["kwok"]]
            )

    def delete_node(self, name: str, *, timeout: float = 60.0) -> None:
        """Delete a Node and the pods bound to it (see nodes.delete_node)."""
        with self.kube_client() as api:
            nodes_module.delete_node(api, name, timeout=timeout)
        if name in self.node_names:
            self.node_names.remove(name)

    def create_namespace(self, name: str, timeout: float = 30.0) -> None:
        """Create a namespace and wait for its `default` ServiceAccount.

        Pods can only be created once that account exists (ServiceAccount
        admission); in a fresh namespace the controller needs a moment.
        """
        from kubernetes import client

        with self.kube_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

            def has_default_sa() -> bool:
                accounts = core.list_namespaced_service_account(
                    name, field_selector="metadata.name=default"
                )
                return bool(accounts.items)

            wait_for(has_default_sa, timeout, f"ServiceAccount {name}/default")

    # -- diagnostics -------------------------------------------------------

    def log_tails(self, lines: int = 30) -> str:
        """The last lines of every file in the log dir, for a failed test's report.

        Every process of the harness, the Helm repository, the operator
        processes of the tests (``operator*.log``) and anything else that
        logs there; of the (big) audit log only its size and last lines.
        """
        audit = self.audit_log.stem

        def is_audit(path: Path) -> bool:
            return path.name.startswith(audit)  # also a rotated audit-<time>.log

        return log_tails(self.log_dir, lines, brief=is_audit)

    def process_status(self) -> str:
        """One line per process: running, stopped by the harness, or exited on its own."""
        return "\n".join(f"{name}: {p.status()}" for name, p in self._process_list())

    def diagnostics(self, lines: int = 30) -> str:
        """Process status and log tails: what a failure report needs."""
        if not self.log_dir.is_dir():
            return f"{self.process_status()}\n(log directory {self.log_dir} is gone)"
        return (
            f"process status:\n{self.process_status()}\n"
            f"objects:\n{self.objects_summary()}\n"
            f"logs in {self.log_dir}:\n{self.log_tails(lines)}"
        )

    def objects_summary(self) -> str:
        """What the module shows and what it reads, one table each: the Gpu's state and
        conditions, the ClusterPolicy's state, the nodes' driver upgrade states and the
        operand DaemonSets. Best effort: a table the API cannot give says why."""
        tables = []
        for title, args in _SUMMARY_TABLES:
            try:
                result = self.kubectl("get", *args, check=False, timeout=15)
            except (OSError, subprocess.SubprocessError, MissingBinaryError) as error:
                tables.append(f"-- {title}: {error}")
                continue
            text = (result.stdout or result.stderr).strip() or "(none)"
            tables.append(f"-- {title}:\n{text}")
        return "\n".join(tables)

    def rss_kib(self) -> dict[str, int]:
        """Resident memory of each running process, KiB."""
        result: dict[str, int] = {}
        for name, process in self._process_list():
            rss = process.rss_kib()
            if rss is not None:
                result[name] = rss
        return result

    def check_alive(self) -> None:
        """Raise if any process has exited (with its log tail), but those whose starter
        supervises them (``register(supervised=True)``; it has a check_alive of its own)."""
        for name, process in self._process_list():
            if name not in self._supervised:
                process.check_alive()
