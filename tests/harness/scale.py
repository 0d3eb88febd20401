"""Scale fleets and load for the local cluster, and the measurements of the operator at scale.

Shared by ``benchmarks/bench_scale.py`` (``make bench-scale``: 1,000 and 5,000 nodes) and
``tests/e2e/test_scale_smoke.py`` (300 nodes, generous bounds), so both measure the same way.

Fleet: Nodes shaped like Gardener AWS worker nodes (``scale_node``): realistic labels,
annotations, providerID, nodeInfo, capacity and 40 ``status.images`` entries, about 12 kB of
JSON each; a fraction are g6.xlarge GPU nodes (``nvidia.com/gpu: 1``, NFD's pci-10de label).
Pods: ordinary bare pods (``scale_pod``, no GPU) in a few namespaces, placed by the scheduler,
made Running by kwok. Heartbeats: ``Heartbeats`` patches ``status.conditions[].lastHeartbeatTime``
of the Nodes round robin at a fixed rate, as kubelets do every 5 minutes (5,000 nodes / 300 s is
about 17/s).

Everything bulk goes through ``Rest``: plain HTTPS with one keep-alive connection per thread and
JSON bodies, not the kubernetes client's models, so that creating 5,000 Nodes costs the API
server rather than this process. Its user agent (``scale-bench``) is never counted as an
operator write.

Measurements (``measure_operator``): the operator runs as a process (``Operator``) with
``PYTHONPATH=<operator_root>/operator``, so an older source tree (a ``git worktree``) can be
measured the same way. Its writes come from the API server's audit log (user agent ``kopf`` or
``kyma-gpu``), its first reconcile from its log line ``reconciled: phase=`` or its first write,
whichever comes first; CPU and memory from ``/proc/<pid>``.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import http.client
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, urlencode

from kyma_gpu.api.resources import FLUX_KINDS, HELM_RELEASE

from .cluster import LocalCluster
from .flux import flux_crd_files
from .module import stop_gracefully
from .nodes import prepare_node

ROOT = Path(__file__).resolve().parents[2]
USER_AGENT = "scale-bench/1"
SCALE_LABEL = "harness.kyma-gpu.test/scale"
OPERATOR_AGENTS = ('"userAgent":"kopf', '"userAgent":"kyma-gpu')
RECONCILED = "reconciled: phase="
GPU_PATH = "/apis/gpu.kyma-project.io/v1beta1/gpus"
HELMRELEASES = HELM_RELEASE.path("kyma-system")
HELMRELEASE_NAME = "gpu-operator"
MODULE_NAMESPACE = "kyma-system"
TIMEOUT = "timeout"

Obj = dict[str, Any]
Progress = Callable[[str], None]
Metric = float | int | str | None
"""A number, ``"timeout"``, or None (not measured)."""


def _quiet(_: str) -> None:
    return None


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: bytes) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]!r}")
        self.status = status


# -- plain HTTPS to the API server ----------------------------------------------------------


class Rest:
    """JSON over HTTPS to the API server as the admin user; one connection per thread."""

    def __init__(self, cluster: LocalCluster, timeout: float = 60.0) -> None:
        pki = cluster.pki
        self.context = ssl.create_default_context(cafile=str(pki.ca_cert))
        self.context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        self.port = cluster.api_port
        self.timeout = timeout
        self._local = threading.local()

    def connect(self, timeout: float | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context, timeout=timeout or self.timeout
        )

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, bytes]:
        """One request, retried on a dropped connection, 429 and 5xx; (status, body)."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"User-Agent": USER_AGENT, "Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        status, payload = 0, b""
        for attempt in range(6):
            try:
                conn = self._connection()
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                status, payload = response.status, response.read()
            except (http.client.HTTPException, OSError):
                self._drop()
                if attempt == 5:
                    raise
            else:
                if status != 429 and status < 500:
                    return status, payload
            time.sleep(0.2 * (attempt + 1))
        return status, payload

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        ok: Sequence[int] = (200, 201),
    ) -> Any:
        status, payload = self.raw(method, path, body, content_type)
        if status not in ok:
            raise ApiError(method, path, status, payload)
        return json.loads(payload) if payload else None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def merge_patch(self, path: str, body: Obj) -> Any:
        return self.call("PATCH", path, body, content_type="application/merge-patch+json")

    def list_pages(self, path: str, params: dict[str, str], accept: str) -> Iterator[Obj]:
        """Every item of a (paged) list, in the given representation (Table, metadata)."""
        token = ""
        while True:
            query = {**params, "limit": "500", **({"continue": token} if token else {})}
            status, payload = self.raw("GET", f"{path}?{urlencode(query)}", accept=accept)
            if status != 200:
                raise ApiError("GET", path, status, payload)
            page = json.loads(payload)
            yield from page.get("rows") or page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
METADATA = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"


# -- the fleet ------------------------------------------------------------------------------

REGION = "eu-central-1"
ZONES = ("eu-central-1a", "eu-central-1b", "eu-central-1c")
CPU_MACHINES = (("m5.large", 2, 8), ("m5.xlarge", 4, 16), ("m6i.2xlarge", 8, 32))
GPU_MACHINE = ("g6.xlarge", 4, 16)
IMAGES = (
    ("europe-docker.pkg.dev/gardener-project/releases/gardener/node-problem-detector",
     "v0.8.21-gardener.2", 41), ("registry.k8s.io/kube-proxy", "v1.36.1", 31),
    ("quay.io/calico/node", "v3.29.3", 154), ("quay.io/calico/cni", "v3.29.3", 96),
    ("quay.io/calico/typha", "v3.29.3", 33), ("quay.io/calico/kube-controllers", "v3.29.3", 35),
    ("europe-docker.pkg.dev/gardener-project/releases/gardener/apiserver-proxy", "v0.19.0", 9),
    ("europe-docker.pkg.dev/gardener-project/releases/gardener/network-problem-detector",
     "v0.27.0", 38), ("registry.k8s.io/dns/k8s-dns-node-cache", "1.26.4", 37),
    ("registry.k8s.io/coredns/coredns", "v1.12.2", 22),
    ("public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver", "v1.46.0", 89),
    ("registry.k8s.io/sig-storage/csi-node-driver-registrar", "v2.14.0", 13),
    ("registry.k8s.io/sig-storage/livenessprobe", "v2.16.0", 12),
    ("europe-docker.pkg.dev/gardener-project/releases/gardener/egress-filter-refresher",
     "v0.12.0", 21), ("registry.k8s.io/metrics-server/metrics-server", "v0.8.0", 20),
    ("europe-docker.pkg.dev/gardener-project/releases/gardener/vpn-client", "0.39.0", 16),
    ("europe-docker.pkg.dev/gardener-project/releases/3rd/prometheus/node-exporter", "v1.9.1", 12),
    ("europe-docker.pkg.dev/gardener-project/releases/3rd/envoyproxy/envoy-distroless",
     "v1.34.2", 58), ("registry.k8s.io/pause", "3.10", 1),
    ("europe-docker.pkg.dev/kyma-project/prod/external/istio/proxyv2", "1.26.2-distroless", 65),
    ("europe-docker.pkg.dev/kyma-project/prod/external/istio/pilot", "1.26.2-distroless", 76),
    ("europe-docker.pkg.dev/kyma-project/prod/telemetry-manager", "1.47.0", 24),
    ("europe-docker.pkg.dev/kyma-project/prod/external/fluent/fluent-bit", "4.0.3", 43),
    ("europe-docker.pkg.dev/kyma-project/prod/kyma-otel-collector", "0.128.0-1.47.0", 83),
    ("europe-docker.pkg.dev/kyma-project/prod/api-gateway/main/api-gateway-manager", "3.1.2", 27),
    ("europe-docker.pkg.dev/kyma-project/prod/serverless-operator", "1.7.1", 31),
    ("europe-docker.pkg.dev/kyma-project/prod/eventing-manager", "1.5.0", 26),
    ("europe-docker.pkg.dev/kyma-project/prod/btp-manager", "1.2.7", 22),
    ("europe-docker.pkg.dev/kyma-project/prod/warden/admission", "0.12.1", 19),
    ("docker.io/bitnami/postgresql", "17.5.0-debian-12-r12", 281),
    ("docker.io/library/redis", "8.0.2-alpine", 17), ("docker.io/library/nginx", "1.29.0", 72),
    ("quay.io/prometheus-operator/prometheus-config-reloader", "v0.83.0", 14),
    ("quay.io/prometheus/prometheus", "v3.4.2", 126), ("docker.io/grafana/grafana", "12.0.2", 187),
    ("ghcr.io/external-secrets/external-secrets", "v0.18.2", 39),
    ("quay.io/jetstack/cert-manager-controller", "v1.18.2", 20),
    ("docker.io/library/python", "3.13.5-slim-bookworm", 46),
    ("eu.gcr.io/acme-shop-prod/orders-service", "2026.11.28-4f3a9c1", 212),
    ("eu.gcr.io/acme-shop-prod/payments-api", "2026.11.27-b81d02e", 198),
)  # fmt: skip


def _hex(seed: str, length: int) -> str:
    out = ""
    while len(out) < length:
        out += hashlib.sha256(f"{seed}/{len(out)}".encode()).hexdigest()
    return out[:length]


def _images() -> list[Obj]:
    entries = [
        {
            "names": [f"{repo}@sha256:{_hex(repo + tag, 64)}", f"{repo}:{tag}"],
            "sizeBytes": mib * 1048576 + int(_hex(repo, 5), 16),
        }
        for repo, tag, mib in IMAGES
    ]
    return sorted(entries, key=lambda entry: -int(entry["sizeBytes"]))


_IMAGE_LIST = _images()


def is_gpu_index(index: int, fraction: float) -> bool:
    """Spread GPU nodes evenly: exactly round(N * fraction) of the first N are GPU nodes."""
    return int((index + 1) * fraction + 1e-9) > int(index * fraction + 1e-9)


def node_name(index: int, octet: int = 180) -> str:
    return f"ip-10-{octet}-{index // 250}-{index % 250 + 2}.{REGION}.compute.internal"


def _labels(name: str, index: int, gpu: bool, machine: str, zone: str) -> dict[str, str]:
    pool = "gpu-l4" if gpu else ("system" if index % 50 == 0 else "worker")
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": machine,
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": REGION,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "networking.gardener.cloud/node-local-dns-enabled": "true",
        "node.kubernetes.io/instance-type": machine,
        "node.kubernetes.io/role": "node",
        "topology.ebs.csi.aws.com/zone": zone,
        "topology.kubernetes.io/region": REGION,
        "topology.kubernetes.io/zone": zone,
        "worker.garden.sapcloud.io/group": pool,
        "worker.gardener.cloud/pool": pool,
        "worker.gardener.cloud/cri-name": "containerd",
        "worker.gardener.cloud/kubernetes-version": "1.36.1",
        "worker.gardener.cloud/image-name": "gardenlinux",
        "worker.gardener.cloud/image-version": "1877.21",
        "node.gardener.cloud/machine-name": f"shoot--kyma--prod-{pool}-z1-5d8f7-{_hex(name, 5)}",
        "feature.node.kubernetes.io/system-os_release.ID": "gardenlinux",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "1877.21",
        "feature.node.kubernetes.io/kernel-version.full": "6.12.47-cloud-amd64",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
        SCALE_LABEL: "true",
    }
    if pool == "system":
        labels["worker.gardener.cloud/system-components"] = "true"
    if gpu:
        labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
    return labels


def _status(name: str, index: int, gpu: bool, cpus: int, gib: int, ip: str) -> Obj:
    capacity = {
        "cpu": str(cpus),
        "ephemeral-storage": "50620216Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{gib * 1024 * 1024 - 354000}Ki",
        "pods": "110",
    }
    allocatable = {
        **capacity,
        "cpu": f"{cpus * 1000 - 80}m",
        "ephemeral-storage": "48055510133",
        "memory": f"{(gib - 1) * 1024 * 1024}Ki",
    }
    if gpu:
        capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = "1"
    machine_id = _hex(f"machine/{name}", 32)
    return {
        "addresses": [
            {"type": "InternalIP", "address": ip},
            {"type": "InternalDNS", "address": name},
            {"type": "Hostname", "address": name},
        ],
        "capacity": capacity,
        "allocatable": allocatable,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": _hex(f"boot/{name}", 32),
            "containerRuntimeVersion": "containerd://2.0.5",
            "kernelVersion": "6.12.47-cloud-amd64",
            "kubeProxyVersion": "",
            "kubeletVersion": "v1.36.1",
            "machineID": machine_id,
            "operatingSystem": "linux",
            "osImage": "Garden Linux 1877.21",
            "systemUUID": f"ec2{machine_id[3:8]}-{machine_id[8:12]}-{machine_id[12:16]}-"
            f"{machine_id[16:20]}-{machine_id[20:32]}",
        },
        "images": _IMAGE_LIST,
        "runtimeHandlers": [
            {"name": "runc", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}},
            {"name": "", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}},
        ],
        "features": {"supplementalGroupsPolicy": True},
    }


def scale_node(index: int, gpu: bool, octet: int = 180) -> Obj:
    """A kwok-managed Node shaped like a Gardener AWS worker (about 12 kB of JSON)."""
    name = node_name(index, octet)
    machine, cpus, gib = GPU_MACHINE if gpu else CPU_MACHINES[index % len(CPU_MACHINES)]
    zone = ZONES[index % len(ZONES)]
    instance = f"i-0{_hex(f'instance/{name}', 16)}"
    ip = f"10.{octet}.{index // 250}.{index % 250 + 2}"
    pool = {"worker.gardener.cloud/pool": "gpu-l4" if gpu else "worker"}
    applied = {"metadata": {"labels": pool}, "spec": {"taints": None}}
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "checksum/cloud-config-data": _hex(f"cc/{machine}", 64),
        "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": instance}),
        "node.machine.sapcloud.io/last-applied-anno-labels-taints": json.dumps(applied),
        "node.gardener.cloud/kubelet-config-checksum": _hex(f"kubelet/{machine}", 64),
    }
    cidr = f"100.{64 + index // 256}.{index % 256}.0/24"
    node: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": _labels(name, index, gpu, machine, zone),
            "annotations": annotations,
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": f"aws:///{zone}/{instance}"},
        "status": _status(name, index, gpu, cpus, gib, ip),
    }
    return prepare_node(node)


APPS = ("orders", "payments", "catalog", "cart", "checkout", "search", "users", "reviews")


def scale_pod(index: int, namespace: str) -> Obj:
    """An ordinary pod (no GPU), like a Deployment's: probes, env, requests, a volume."""
    app = APPS[index % len(APPS)]
    image = f"eu.gcr.io/acme-shop-prod/{app}-service:2026.11.28-4f3a9c1"
    env = [
        {"name": "APP_NAME", "value": app},
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {
            "name": "OTEL_EXPORTER_OTLP_ENDPOINT",
            "value": "http://telemetry-otlp-traces.kyma-system:4317",
        },
    ]
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}
    container = {
        "name": app,
        "image": image,
        "ports": [{"containerPort": 8080, "name": "http"}],
        "env": env,
        "readinessProbe": probe,
        "livenessProbe": probe,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    labels = {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/part-of": "acme-shop",
        "pod-template-hash": _hex(app, 10),
        SCALE_LABEL: "true",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-{_hex(app, 10)}-{index:05d}",
            "namespace": namespace,
            "labels": labels,
            "annotations": {"kubectl.kubernetes.io/default-container": app},
        },
        "spec": {
            "containers": [container],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
            "terminationGracePeriodSeconds": 30,
        },
    }


# -- creating the fleet ---------------------------------------------------------------------


def run_parallel(
    count: int, work: Callable[[int], None], *, workers: int, what: str, progress: Progress
) -> float:
    """work(0..count-1) on a thread pool; progress about every 10 %; seconds taken."""
    began = time.monotonic()
    step = max(1, count // 10)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for done, _ in enumerate(pool.map(work, range(count)), start=1):
            if done % step == 0 or done == count:
                took = time.monotonic() - began
                progress(f"{what} {done}/{count} ({done / max(took, 1e-6):.0f}/s)")
    return time.monotonic() - began


def create_or_keep(rest: Rest, path: str, body: Obj) -> bool:
    """POST; an existing object of that name counts as created. True if it was new."""
    status, payload = rest.raw("POST", path, body)
    if status == 409:
        return False
    if status not in (200, 201):
        raise ApiError("POST", path, status, payload)
    return True


def create_nodes(
    rest: Rest, bodies: Callable[[int], Obj], count: int, *, workers: int, progress: Progress
) -> float:
    """Create ``count`` Nodes. The status goes in with the create, as a kubelet registers;
    if the API server dropped it (checked on the first node), it is patched in afterwards."""
    first = bodies(0)
    create_or_keep(rest, "/api/v1/nodes", first)
    stored = rest.get(f"/api/v1/nodes/{first['metadata']['name']}")
    patch_status = not (stored.get("status") or {}).get("images")

    def create(index: int) -> None:
        body = first if index == 0 else bodies(index)
        if index:
            create_or_keep(rest, "/api/v1/nodes", body)
        if patch_status:
            path = f"/api/v1/nodes/{body['metadata']['name']}/status"
            rest.merge_patch(path, {"status": body["status"]})

    return run_parallel(count, create, workers=workers, what="nodes created", progress=progress)


def count_ready_nodes(rest: Rest, selector: str = f"{SCALE_LABEL}=true") -> int:
    rows = rest.list_pages("/api/v1/nodes", {"labelSelector": selector}, TABLE)
    return sum(1 for row in rows if str(row["cells"][1]).split(",")[0] == "Ready")


def count_running_pods(rest: Rest, selector: str = f"{SCALE_LABEL}=true") -> int:
    params = {"labelSelector": selector, "fieldSelector": "status.phase=Running"}
    return sum(1 for _ in rest.list_pages("/api/v1/pods", params, METADATA))


def wait_count(
    probe: Callable[[], int],
    wanted: int,
    timeout: float,
    what: str,
    progress: Progress,
    interval: float = 5.0,
) -> tuple[int, float]:
    """Poll a count until it reaches ``wanted`` or the time is up; (last count, seconds)."""
    began = time.monotonic()
    last_report = 0.0
    while True:
        got = probe()
        took = time.monotonic() - began
        if got >= wanted or took > timeout:
            progress(f"{what}: {got}/{wanted} after {took:.0f}s")
            return got, took
        if took - last_report >= 30:
            progress(f"{what}: {got}/{wanted} ({took:.0f}s)")
            last_report = took
        time.sleep(interval)


def ensure_namespace(rest: Rest, name: str, timeout: float = 60.0) -> None:
    """Create a namespace (if missing) and wait for its default ServiceAccount."""
    create_or_keep(rest, "/api/v1/namespaces", {"metadata": {"name": name}})
    deadline = time.monotonic() + timeout
    while rest.raw("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] != 200:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {name} after {timeout:.0f}s")
        time.sleep(0.25)


def install_crds(cluster: LocalCluster, gpu_crd: Path) -> None:
    """The Gpu CRD of the source tree under test and the Flux CRDs (as module.install_crds)."""
    args = ["apply", "--server-side", "--field-manager=kyma-gpu-tests", "-f", str(gpu_crd)]
    for path in flux_crd_files():
        args += ["-f", str(path)]
    cluster.kubectl(*args)
    cluster.wait_crds_established(
        "gpus.gpu.kyma-project.io", *(kind.crd_name for kind in FLUX_KINDS)
    )


# -- what the operator does -----------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """One write request by the operator, from the audit log."""

    at: float
    verb: str
    resource: str
    subresource: str
    name: str
    agent: str = ""

    @property
    def kind(self) -> str:
        """``patch gpus/status (kyma-gpu)``: verb, resource, and the client (kopf, kyma-gpu)."""
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.verb} {self.resource}{sub} ({self.agent.split('/')[0]})"


class LineTail:
    """The complete lines appended to a file since the last call.

    Keeps the file open, so a rotation (the file renamed, a new one at the path) loses
    nothing: the old file is read to its end before the new one is followed."""

    def __init__(self, path: Path, from_end: bool = True) -> None:
        self.path = path
        self._handle: BinaryIO | None = self._open()
        if self._handle is not None and from_end:
            self._handle.seek(0, os.SEEK_END)
        self._pending = b""

    def _open(self) -> BinaryIO | None:
        try:
            return self.path.open("rb")
        except FileNotFoundError:
            return None

    def _rotated(self, handle: BinaryIO) -> bool:
        try:
            return os.fstat(handle.fileno()).st_ino != self.path.stat().st_ino
        except FileNotFoundError:
            return False

    def lines(self) -> list[str]:
        if self._handle is None:
            self._handle = self._open()
            if self._handle is None:
                return []
        data = self._pending + self._handle.read()
        if self._rotated(self._handle):
            data += self._handle.read()
            self._handle.close()
            self._handle = self._open()
            data += self._handle.read() if self._handle is not None else b""
        end = data.rfind(b"\n") + 1
        self._pending = data[end:]
        return data[:end].decode("utf-8", errors="replace").splitlines()


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class AuditTail:
    """The operator's writes (user agent kopf/ or kyma-gpu/) appended to the audit log."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.tail = LineTail(cluster.audit_log)
        self.seen: list[Write] = []

    def poll(self) -> list[Write]:
        new = []
        for line in self.tail.lines():
            if not any(agent in line for agent in OPERATOR_AGENTS):
                continue
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete" or event.get("verb") not in (
                "create",
                "update",
                "patch",
                "delete",
            ):
                continue
            ref = event.get("objectRef") or {}
            new.append(
                Write(
                    _epoch(event["stageTimestamp"]),
                    event["verb"],
                    ref.get("resource", ""),
                    ref.get("subresource", ""),
                    ref.get("name", ""),
                    str(event.get("userAgent", "")),
                )
            )
        self.seen.extend(new)
        return new

    def between(self, start: float, end: float) -> list[Write]:
        self.poll()
        return [write for write in self.seen if start <= write.at <= end]


def _proc_status(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(rest.split()[0])
    return fields


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """A benchmark killed hard must not leave its operator running (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Operator:
    """``python -m kyma_gpu.cli run --standalone`` from a source tree, KUBECONFIG = the cluster."""

    def __init__(
        self,
        cluster: LocalCluster,
        root: Path = ROOT,
        name: str = "operator-scale",
        entry: Sequence[str] = ("-m", "kyma_gpu.cli"),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster, self.root, self.entry = cluster, root, tuple(entry)
        self.env = dict(env or {})
        self.log_path = cluster.log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> float:
        """Start; the wall-clock time just before the process was spawned."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(self.root / "operator"),
            **self.env,
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.started_at = time.time()
            self.process = subprocess.Popen(
                [sys.executable, *self.entry, "run", "--standalone"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only calls prctl
            )
        return self.started_at

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the operator has not been started")
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"the operator exited with {self.process.returncode}; log {self.log_path}"
            )

    def cpu_seconds(self) -> float:
        """utime + stime of the process so far."""
        stat = Path(f"/proc/{self.pid}/stat").read_text(encoding="ascii")
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def memory_mib(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MiB: resident now and the peak so far."""
        fields = _proc_status(self.pid)
        return fields.get("VmRSS", 0) / 1024, fields.get("VmHWM", 0) / 1024

    def send_signal(self, signum: int) -> None:
        if self.alive() and self.process is not None:
            self.process.send_signal(signum)

    def stop(self, timeout: float = 30.0) -> None:
        stop_gracefully(self.process, timeout)


class ObjectWatch:
    """Watches one object of a collection; keeps the last body and its arrival time."""

    def __init__(self, rest: Rest, collection: str, name: str) -> None:
        self.rest, self.collection, self.name = rest, collection, name
        self.obj: Obj | None = None
        self.arrived = 0.0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)

    def start(self) -> ObjectWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _set(self, obj: Obj | None) -> None:
        with self._cond:
            self.obj, self.arrived = obj, time.time()
            self._cond.notify_all()

    def _run(self) -> None:
        selector = quote(f"metadata.name={self.name}")
        while not self._stop.is_set():
            try:
                listed = self.rest.get(f"{self.collection}?fieldSelector={selector}")
                items = listed.get("items") or []
                self._set(items[0] if items else None)
                self._stream(selector, listed["metadata"]["resourceVersion"])
            except (ApiError, OSError, http.client.HTTPException, ValueError):
                time.sleep(0.5)

    def _stream(self, selector: str, version: str) -> None:
        conn = self.rest.connect(timeout=90)
        query = f"watch=1&fieldSelector={selector}&resourceVersion={version}&timeoutSeconds=60"
        try:
            conn.request("GET", f"{self.collection}?{query}", headers={"User-Agent": USER_AGENT})
            response = conn.getresponse()
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    return
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    return  # e.g. 410 Gone: list again
                self._set(None if event.get("type") == "DELETED" else event.get("object"))
        finally:
            conn.close()

    def wait(self, predicate: Callable[[Obj | None], bool], timeout: float) -> float | None:
        """Wait until the body satisfies ``predicate``; its arrival time, None on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.obj):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(min(remaining, 1.0))
            return self.arrived

    def generation(self) -> int:
        with self._cond:
            return int(((self.obj or {}).get("metadata") or {}).get("generation") or 0)

    def current(self) -> Obj | None:
        with self._cond:
            return self.obj


class Heartbeats:
    """Node status heartbeats at a fixed rate, round robin, as kubelets send them."""

    TYPES = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")

    def __init__(self, rest: Rest, names: Sequence[str], rate: float, workers: int = 4) -> None:
        self.rest, self.names, self.rate, self.workers = rest, list(names), rate, workers
        self.sent = 0
        self.errors = 0
        self._lock = threading.Lock()

    def _beat(self, name: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "status": {"conditions": [{"type": t, "lastHeartbeatTime": now} for t in self.TYPES]}
        }
        path = f"/api/v1/nodes/{name}/status"
        status, _ = self.rest.raw("PATCH", path, body, "application/strategic-merge-patch+json")
        with self._lock:
            self.sent += 1
            self.errors += status != 200

    def run(self, seconds: float) -> float:
        """Send for ``seconds``; the rate achieved (heartbeats completed per second)."""
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            for k in range(int(seconds * self.rate)):
                due = began + k / self.rate
                time.sleep(max(0.0, due - time.monotonic()))
                pool.submit(self._beat, self.names[k % len(self.names)])
        return self.sent / max(time.monotonic() - began, 1e-6)


# -- the measurements -----------------------------------------------------------------------


@dataclass
class ScaleConfig:
    """One benchmark run: the fleet and how long each measurement goes."""

    nodes: int
    gpu_fraction: float = 0.1
    pods_per_node: float = 1.0
    heartbeat_seconds: float = 60.0
    heartbeat_rate: float = 17.0
    spec_changes: int = 20
    restart_spec_changes: int = 5
    restart: bool = True
    start_timeout: float = 1200.0
    step_timeout: float = 120.0
    settle_quiet: float = 10.0
    operator_root: Path = ROOT
    octet: int = 180
    namespaces: int = 10
    workers: int = 8
    ready_timeout: float = 600.0

    @property
    def namespace_names(self) -> list[str]:
        return [f"scale-{k}" for k in range(self.namespaces)]

    @property
    def pods(self) -> int:
        return round(self.nodes * self.pods_per_node)

    def gpu_node(self, index: int) -> bool:
        return is_gpu_index(index, self.gpu_fraction)

    def node(self, index: int) -> Obj:
        return scale_node(index, self.gpu_node(index), self.octet)


@dataclass
class Fleet:
    nodes: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    setup: dict[str, Metric] = field(default_factory=dict)


def build_fleet(cluster: LocalCluster, rest: Rest, cfg: ScaleConfig, progress: Progress) -> Fleet:
    """CRDs, the Nodes (Ready), the pods (Running, bounded wait) and the Gpu ``gpu``."""
    fleet = Fleet(nodes=[node_name(i, cfg.octet) for i in range(cfg.nodes)])
    install_crds(cluster, _tree_file(cfg, "config/crd/bases/gpu.kyma-project.io_gpus.yaml"))
    ensure_namespace(rest, MODULE_NAMESPACE)
    size = len(json.dumps(cfg.node(0), separators=(",", ":")))
    progress(
        f"creating {cfg.nodes} nodes ({round(cfg.nodes * cfg.gpu_fraction)} GPU), "
        f"{size / 1000:.1f} kB of JSON each"
    )
    fleet.setup["node_json_kb"] = round(size / 1000, 1)
    fleet.setup["nodes_create_s"] = create_nodes(
        rest, cfg.node, cfg.nodes, workers=cfg.workers, progress=progress
    )
    ready, took = wait_count(
        lambda: count_ready_nodes(rest), cfg.nodes, cfg.ready_timeout, "nodes Ready", progress
    )
    fleet.setup["nodes_ready"], fleet.setup["nodes_ready_wait_s"] = ready, round(took, 1)
    fleet.namespaces = cfg.namespace_names
    for namespace in fleet.namespaces:
        ensure_namespace(rest, namespace)

    def create_pod(index: int) -> None:
        namespace = fleet.namespaces[index % len(fleet.namespaces)]
        create_or_keep(rest, f"/api/v1/namespaces/{namespace}/pods", scale_pod(index, namespace))

    progress(f"creating {cfg.pods} pods in {cfg.namespaces} namespaces")
    fleet.setup["pods_create_s"] = round(
        run_parallel(
            cfg.pods, create_pod, workers=cfg.workers, what="pods created", progress=progress
        ),
        1,
    )
    running, took = wait_count(
        lambda: count_running_pods(rest), cfg.pods, cfg.ready_timeout, "pods Running", progress
    )
    fleet.setup["pods_running"], fleet.setup["pods_running_wait_s"] = running, round(took, 1)
    cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager=scale-bench",
        "-f",
        str(_tree_file(cfg, "config/samples/gpu.yaml")),
    )
    return fleet


def _tree_file(cfg: ScaleConfig, relative: str) -> Path:
    """A file of the source tree under test, else of this checkout."""
    path = cfg.operator_root / relative
    return path if path.exists() else ROOT / relative


def _delete_gpu(cluster: LocalCluster, rest: Rest, progress: Progress) -> None:
    """Delete the Gpu; if its finalizer is not released within 60 s, remove it."""
    began = time.monotonic()
    deleted = cluster.kubectl(
        "delete", "gpus.gpu.kyma-project.io", "gpu", "--ignore-not-found", "--timeout=60s",
        check=False, timeout=90,
    )  # fmt: skip
    if deleted.returncode == 0:
        progress(f"Gpu deleted in {time.monotonic() - began:.1f}s")
        return
    progress(f"Gpu not deleted after {time.monotonic() - began:.0f}s; removing its finalizer")
    with contextlib.suppress(ApiError):
        rest.merge_patch(f"{GPU_PATH}/gpu", {"metadata": {"finalizers": None}})


def teardown_fleet(
    cluster: LocalCluster, rest: Rest, namespaces: Sequence[str], progress: Progress
) -> None:
    """Remove what build_fleet made (for a shared cluster): Gpu, pods, namespaces, Nodes.

    Call while the operator still runs, so that it releases its finalizer on the Gpu."""
    _delete_gpu(cluster, rest, progress)
    began = time.monotonic()
    for namespace in namespaces:  # pods first and at once: no kubelet to wait for
        rest.raw("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")
        rest.raw("DELETE", f"/api/v1/namespaces/{namespace}")
    rest.raw("DELETE", f"/api/v1/nodes?labelSelector={quote(SCALE_LABEL + '=true')}")
    selector = {"labelSelector": f"{SCALE_LABEL}=true"}
    while time.monotonic() - began < 180:
        nodes = sum(1 for _ in rest.list_pages("/api/v1/nodes", selector, METADATA))
        spaces = [n for n in namespaces if rest.raw("GET", f"/api/v1/namespaces/{n}")[0] == 200]
        if not nodes and not spaces:
            progress(f"scale Nodes and namespaces removed in {time.monotonic() - began:.1f}s")
            return
        time.sleep(2)
    progress(f"scale fleet: {nodes} Nodes and namespaces {spaces} left after 180s")


@dataclass
class Session:
    """What one measurement run holds: the operator, its log, the audit log, the watches."""

    cluster: LocalCluster
    rest: Rest
    cfg: ScaleConfig
    progress: Progress
    operator: Operator
    audit: AuditTail
    release: ObjectWatch
    gpu: ObjectWatch
    metrics: dict[str, Metric] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    breakdown: Counter[str] = field(default_factory=Counter)
    round: int = 0


def wait_first_reconcile(s: Session, log: LineTail, started: float, prefix: str) -> None:
    """Start (or restart) to the first reconcile (log line or first write, the earlier) and
    to the first HelmRelease write; a ``timeout`` after cfg.start_timeout (for the HelmRelease:
    cfg.step_timeout after the first reconcile; an error plan writes none)."""
    first_log = first_write = first_release = None
    last_report = time.monotonic()
    deadline = time.monotonic() + s.cfg.start_timeout
    while time.monotonic() < deadline:
        if (first_log or first_write) and deadline - time.monotonic() > s.cfg.step_timeout:
            deadline = time.monotonic() + s.cfg.step_timeout
        s.operator.check_alive()
        if first_log is None and any(RECONCILED in line for line in log.lines()):
            first_log = time.time()
        for write in s.audit.poll():
            first_write = first_write or write.at
            if write.resource == "helmreleases" and first_release is None:
                first_release = write.at
        if (first_log or first_write) and first_release:
            break
        if time.monotonic() - last_report >= 30:
            rss, _ = s.operator.memory_mib()
            s.progress(
                f"{prefix}: waiting for the first reconcile, {time.time() - started:.0f}s,"
                f" RSS {rss:.0f} MiB, CPU {s.operator.cpu_seconds():.0f}s"
            )
            last_report = time.monotonic()
        time.sleep(0.1)
    first = min((t for t in (first_log, first_write) if t is not None), default=None)
    s.metrics[f"{prefix}_first_reconcile_s"] = _since(first, started)
    s.metrics[f"{prefix}_first_reconcile_by"] = (
        None if first is None else "log" if first == first_log else "write"
    )
    s.metrics[f"{prefix}_helmrelease_s"] = _since(first_release, started)
    s.metrics[f"{prefix}_cpu_s"] = round(s.operator.cpu_seconds(), 1)
    s.progress(
        f"{prefix}: first reconcile {_show(s.metrics[f'{prefix}_first_reconcile_s'])} s "
        f"(by {s.metrics[f'{prefix}_first_reconcile_by']}), HelmRelease written "
        f"{_show(s.metrics[f'{prefix}_helmrelease_s'])} s"
    )


def _since(at: float | None, started: float) -> Metric:
    return TIMEOUT if at is None else round(at - started, 2)


def _show(value: Metric) -> str:
    return "-" if value is None else str(value)


def settle(s: Session, prefix: str) -> None:
    """Wait until the operator has been idle (< 2 % of a core) for cfg.settle_quiet seconds;
    record peak RSS (VmHWM) and then the settled RSS (VmRSS)."""
    samples: deque[tuple[float, float]] = deque()
    began = time.monotonic()
    while time.monotonic() - began < s.cfg.step_timeout:
        s.operator.check_alive()
        now, cpu = time.monotonic(), s.operator.cpu_seconds()
        samples.append((now, cpu))
        while samples and now - samples[0][0] > s.cfg.settle_quiet:
            samples.popleft()
        span = now - samples[0][0]
        if span >= s.cfg.settle_quiet - 1 and (cpu - samples[0][1]) / span < 0.02:
            break
        time.sleep(1.0)
    rss, hwm = s.operator.memory_mib()
    s.metrics[f"{prefix}_peak_rss_mib"] = round(hwm, 1)
    s.metrics[f"{prefix}_settled_rss_mib"] = round(rss, 1)
    s.metrics[f"{prefix}_settle_s"] = round(time.monotonic() - began, 1)
    s.progress(
        f"{prefix}: settled after {time.monotonic() - began:.0f}s: RSS {rss:.0f} MiB, "
        f"peak {hwm:.0f} MiB"
    )


def heartbeats(s: Session) -> None:
    """CPU of the operator (% of one core) and its writes while Nodes send heartbeats."""
    beats = Heartbeats(s.rest, s.nodes, s.cfg.heartbeat_rate)
    s.progress(f"heartbeats: {s.cfg.heartbeat_rate:g}/s for {s.cfg.heartbeat_seconds:g}s")
    s.audit.poll()
    start_wall, start_cpu, began = time.time(), s.operator.cpu_seconds(), time.monotonic()
    rate = beats.run(s.cfg.heartbeat_seconds)
    took = time.monotonic() - began
    cpu = s.operator.cpu_seconds() - start_cpu
    writes = s.audit.between(start_wall, time.time())
    s.metrics["heartbeat_rate"] = round(rate, 1)
    s.metrics["heartbeat_cpu_pct"] = round(100 * cpu / took, 2)
    s.metrics["heartbeat_writes"] = len(writes)
    s.metrics["heartbeat_errors"] = beats.errors
    s.progress(
        f"heartbeats: {rate:.1f}/s, operator CPU {100 * cpu / took:.2f} % of a core, "
        f"{len(writes)} writes"
    )


def spec_change(s: Session, timeout: float) -> tuple[float | None, list[Write]]:
    """Patch a chart value in Gpu.spec.values; latency until the watch delivers a new
    HelmRelease generation, and the operator's writes from the patch until 3 s after (or
    2 s after the update, if later)."""
    s.round += 1
    generation = s.release.generation()
    body = {
        "spec": {
            "values": {"daemonsets": {"annotations": {"bench.kyma-project.io/round": str(s.round)}}}
        }
    }
    began = time.time()
    s.rest.merge_patch(f"{GPU_PATH}/gpu", body)
    arrived = s.release.wait(lambda _: s.release.generation() > generation, timeout)
    latency = None if arrived is None else arrived - began
    window_end = began + max(3.0, (latency or 0.0) + 2.0)
    time.sleep(max(0.0, window_end - time.time()))
    return latency, s.audit.between(began - 0.05, window_end)


def spec_changes(s: Session, count: int, prefix: str) -> None:
    """p50/p99 spec change -> HelmRelease update, writes per change (mean, max, breakdown)."""
    latencies: list[float] = []
    writes: list[int] = []
    for k in range(count):
        latency, done = spec_change(s, s.cfg.step_timeout)
        writes.append(len(done))
        s.breakdown.update(write.kind for write in done)
        if latency is None:
            s.progress(
                f"{prefix}: change {k + 1}/{count}: no HelmRelease update "
                f"within {s.cfg.step_timeout:.0f}s"
            )
            break
        latencies.append(latency * 1000)
        if (k + 1) % 5 == 0 or k + 1 == count:
            s.progress(
                f"{prefix}: {k + 1}/{count} changes, last {latency * 1000:.0f} ms, "
                f"{len(done)} writes"
            )
    failed = len(latencies) < count
    s.metrics[f"{prefix}_p50_ms"] = TIMEOUT if failed else round(_percentile(latencies, 50))
    s.metrics[f"{prefix}_p99_ms"] = TIMEOUT if failed else round(_percentile(latencies, 99))
    s.metrics[f"{prefix}_max_ms"] = TIMEOUT if failed else round(max(latencies))
    if writes:
        s.metrics[f"{prefix}_writes_mean"] = round(statistics.fmean(writes), 2)
        s.metrics[f"{prefix}_writes_max"] = max(writes)


def _percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (p99 of 20 samples is the largest)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def node_join(s: Session) -> None:
    """A new GPU node joins: seconds from its create until Gpu.status counts it (gpuNodeCount;
    status.nodes lists only the first 100 by name, which the new one need not be among)."""
    index = s.cfg.nodes
    body = scale_node(index, True, s.cfg.octet)
    name = body["metadata"]["name"]
    before = int(((s.gpu.current() or {}).get("status") or {}).get("gpuNodeCount") or 0)

    def listed(gpu: Obj | None) -> bool:
        status = (gpu or {}).get("status") or {}
        nodes = status.get("nodes") or []
        named = any(isinstance(n, dict) and n.get("name") == name for n in nodes)
        return named or int(status.get("gpuNodeCount") or 0) > before

    began = time.time()
    create_or_keep(s.rest, "/api/v1/nodes", body)
    arrived = s.gpu.wait(listed, s.cfg.step_timeout)
    s.metrics["node_join_s"] = TIMEOUT if arrived is None else round(arrived - began, 3)
    s.progress(f"GPU node join to Gpu.status: {_show(s.metrics['node_join_s'])} s")


def restart(s: Session) -> None:
    """Stop the operator (SIGINT), change the spec while it is down, start it again: restart
    to first reconcile and to the HelmRelease update; RSS; then spec changes again."""
    s.progress("restart: stopping the operator (SIGINT)")
    s.operator.stop()
    s.round += 1000
    s.rest.merge_patch(
        f"{GPU_PATH}/gpu",
        {
            "spec": {
                "values": {
                    "daemonsets": {"annotations": {"bench.kyma-project.io/round": str(s.round)}}
                }
            }
        },
    )
    log = LineTail(s.operator.log_path)
    s.audit.poll()
    started = s.operator.start()
    s.progress(f"restart: operator started again (pid {s.operator.pid})")
    wait_first_reconcile(s, log, started, "restart")
    if s.metrics["restart_first_reconcile_s"] == TIMEOUT:
        return
    settle(s, "restart")
    spec_changes(s, s.cfg.restart_spec_changes, "restart_spec")


def measure_operator(
    cluster: LocalCluster,
    rest: Rest,
    cfg: ScaleConfig,
    fleet: Fleet,
    progress: Progress,
    *,
    keep_running: bool = False,
) -> tuple[dict[str, Metric], Counter[str], Operator]:
    """Start the operator against the fleet and run every measurement; stops it at the end
    unless ``keep_running`` (a shared cluster needs it to release the Gpu's finalizer)."""
    release = ObjectWatch(rest, HELMRELEASES, HELMRELEASE_NAME).start()
    gpu = ObjectWatch(rest, GPU_PATH, "gpu").start()
    operator = Operator(cluster, cfg.operator_root)
    s = Session(
        cluster, rest, cfg, progress, operator, AuditTail(cluster), release, gpu, nodes=fleet.nodes
    )
    s.metrics.update(fleet.setup)
    try:
        started = operator.start()
        progress(f"operator started (pid {operator.pid}, {cfg.operator_root}/operator)")
        wait_first_reconcile(s, LineTail(operator.log_path, from_end=False), started, "start")
        if s.metrics["start_first_reconcile_s"] != TIMEOUT:
            _steady_state(s)
    except Exception as error:  # keep what was measured; the caller reports the error
        s.metrics["error"] = f"{error!r}; operator log {operator.log_path}"
        progress(f"measurement failed: {error!r}")
    finally:
        release.stop()
        gpu.stop()
        if not keep_running:
            operator.stop()
    return s.metrics, s.breakdown, operator


def _steady_state(s: Session) -> None:
    settle(s, "start")
    if s.cfg.heartbeat_seconds > 0:
        heartbeats(s)
    s.release.wait(lambda obj: obj is not None, s.cfg.step_timeout)
    spec_changes(s, s.cfg.spec_changes, "spec")
    node_join(s)
    if s.cfg.restart:
        restart(s)
