"""The scale fleet: Nodes shaped like Gardener AWS workers, ordinary pods, and their creation."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from benchmarks.scale.common import (
    GPU_PATH,
    METADATA,
    MODULE_NAMESPACE,
    ROOT,
    SCALE_LABEL,
    TABLE,
    ApiError,
    Metric,
    Obj,
    Progress,
    Rest,
)
from kyma_gpu.api.resources import FLUX_KINDS
from tests.harness.cluster import LocalCluster
from tests.harness.flux import flux_crd_files
from tests.harness.nodes import prepare_node

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


@dataclass(frozen=True)
class NodeOs:
    """A worker pool's name and the OS image its nodes run."""

    pool: str
    image: str
    """Gardener's image name (worker.gardener.cloud/image-name): gardenlinux, ubuntu."""
    version: str
    os_image: str
    """status.nodeInfo.osImage."""
    kernel: str


GARDEN_LINUX = (
    ("1877.21", "6.12.47-cloud-amd64"),
    ("1877.22", "6.12.50-cloud-amd64"),
    ("1877.23", "6.12.53-cloud-amd64"),
)
"""Garden Linux versions of the GPU pools, all in installer 1.17.0's build matrix (a version
outside it gives an error plan, which writes no HelmRelease)."""
CPU_OS = NodeOs("worker", "gardenlinux", "1877.21", "Garden Linux 1877.21", "6.12.47-cloud-amd64")
UBUNTU = NodeOs("gpu-ubuntu", "ubuntu", "24.04", "Ubuntu 24.04.3 LTS", "6.8.0-1040-aws")


def gpu_pool(pool: int, pools: int) -> NodeOs:
    """GPU pool ``pool`` of ``pools``: Garden Linux versions in turn; with more than one pool
    the last one runs Ubuntu (NVIDIA's driver container instead of the installer)."""
    if pools > 1 and pool == pools - 1:
        return UBUNTU
    version, kernel = GARDEN_LINUX[pool % len(GARDEN_LINUX)]
    name = "gpu-l4" if pools == 1 else f"gpu-l4-{pool:03d}"
    return NodeOs(name, "gardenlinux", version, f"Garden Linux {version}", kernel)


def _labels(
    name: str, index: int, gpu: bool, machine: str, zone: str, os: NodeOs
) -> dict[str, str]:
    pool = os.pool if gpu else ("system" if index % 50 == 0 else "worker")
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
        "worker.gardener.cloud/image-name": os.image,
        "worker.gardener.cloud/image-version": os.version,
        "node.gardener.cloud/machine-name": f"shoot--kyma--prod-{pool}-z1-5d8f7-{_hex(name, 5)}",
        "feature.node.kubernetes.io/system-os_release.ID": os.image,
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": os.version,
        "feature.node.kubernetes.io/kernel-version.full": os.kernel,
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
        SCALE_LABEL: "true",
    }
    if pool == "system":
        labels["worker.gardener.cloud/system-components"] = "true"
    if gpu:
        labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
    return labels


def _status(name: str, gpu: bool, cpus: int, gib: int, ip: str, os: NodeOs) -> Obj:
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
            "kernelVersion": os.kernel,
            "kubeProxyVersion": "",
            "kubeletVersion": "v1.36.1",
            "machineID": machine_id,
            "operatingSystem": "linux",
            "osImage": os.os_image,
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


def scale_node(index: int, gpu: bool, octet: int = 180, os: NodeOs | None = None) -> Obj:
    """A kwok-managed Node shaped like a Gardener AWS worker (about 12 kB of JSON); a GPU
    node in the pool ``os`` (default: one Garden Linux pool, gpu-l4)."""
    os = os or (gpu_pool(0, 1) if gpu else CPU_OS)
    name = node_name(index, octet)
    machine, cpus, gib = GPU_MACHINE if gpu else CPU_MACHINES[index % len(CPU_MACHINES)]
    zone = ZONES[index % len(ZONES)]
    instance = f"i-0{_hex(f'instance/{name}', 16)}"
    ip = f"10.{octet}.{index // 250}.{index % 250 + 2}"
    pool = {"worker.gardener.cloud/pool": os.pool if gpu else "worker"}
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
            "labels": _labels(name, index, gpu, machine, zone, os),
            "annotations": annotations,
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": f"aws:///{zone}/{instance}"},
        "status": _status(name, gpu, cpus, gib, ip, os),
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
    gpu_per_pool: int = 10
    """GPU nodes per worker pool: 20,000 nodes (2,000 GPU) make 200 pools."""
    rollout: bool = True
    """Measure a driver rollout's label churn (every GPU node's upgrade label changes once)."""
    flux: bool = False
    """Flux and the real NVIDIA controller run (``FluxStack``): their footprint is measured,
    and the time from the Gpu's creation to the HelmRelease and the Gpu Ready."""
    install: bool = False
    """With Flux: at the end delete the Gpu and create it again, timing the install."""
    install_timeout: float = 600.0
    """With Flux: how long the chart install (HelmRelease Ready, Gpu Ready) may take."""
    controller_qps: int | None = None
    """kube-controller-manager's --kube-api-qps; None: Kubernetes' default (20/s)."""
    nfd: str = "GpuNodes"
    """With Flux: spec.components.nodeFeatureDiscovery of the Gpu (GpuNodes, the default, or
    AllNodes, NFD's worker on every node as NVIDIA's chart has it)."""
    spec_value: str = "operands"
    """What a spec change changes (measure.spec_body): ``operands`` or ``inert``."""
    baseline: bool = False
    """Before the heartbeat window, one of the same length without heartbeats: what the
    manager writes and spends anyway (the NVIDIA controller, an install still running)."""

    @property
    def gpu_nodes(self) -> int:
        return sum(self.gpu_node(i) for i in range(self.nodes))

    @property
    def gpu_pools(self) -> int:
        return max(1, -(-round(self.nodes * self.gpu_fraction) // self.gpu_per_pool))

    def gpu_names(self) -> list[str]:
        return [node_name(i, self.octet) for i in range(self.nodes) if self.gpu_node(i)]

    @property
    def namespace_names(self) -> list[str]:
        return [f"scale-{k}" for k in range(self.namespaces)]

    @property
    def pods(self) -> int:
        return round(self.nodes * self.pods_per_node)

    def gpu_node(self, index: int) -> bool:
        return is_gpu_index(index, self.gpu_fraction)

    def node(self, index: int) -> Obj:
        if not self.gpu_node(index):
            return scale_node(index, False, self.octet)
        ordinal = int((index + 1) * self.gpu_fraction + 1e-9) - 1
        pools = self.gpu_pools
        return scale_node(index, True, self.octet, gpu_pool(ordinal % pools, pools))


@dataclass
class Fleet:
    nodes: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    setup: dict[str, Metric] = field(default_factory=dict)
    gpu: Obj | None = None
    """The Gpu applied (None: config/samples/gpu.yaml)."""


def build_fleet(
    cluster: LocalCluster, rest: Rest, cfg: ScaleConfig, progress: Progress, gpu: Obj | None = None
) -> Fleet:
    """CRDs, the Nodes (Ready), the pods (Running, bounded wait) and the Gpu ``gpu`` (this
    body, else config/samples/gpu.yaml)."""
    fleet = Fleet(nodes=[node_name(i, cfg.octet) for i in range(cfg.nodes)], gpu=gpu)
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
    if gpu is not None:
        rest.call("POST", GPU_PATH, gpu)
        return fleet
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
