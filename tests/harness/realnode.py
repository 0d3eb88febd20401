"""A real node: the real kubelet on containerd, on this host, joined to a ``LocalCluster``.

kwok plays the kubelet of the fleet's nodes, whose pods run nothing. Where a pod must really
run (the manager from the module's image, as KLM or a plain `kubectl apply` installs it),
``RealNode`` adds one Node that is what every Gardener node is: the kubelet (built by
`make tools` from the same Kubernetes module as the API server) and containerd (Debian's, as
`make setup` installs it), with runc, the CNI bridge plugin and real probes, volumes,
security contexts, logs, exec and port-forward. How it fits this machine (hybrid cgroup v1,
no systemd, no image pulls from outside) is in ../shared/reference/real-node.md.

- **Files:** containerd and the kubelet run in a mount namespace of their own in which
  /var/lib/kubelet, /var/log/containers, /var/lib/cni and /run/containerd are empty tmpfs:
  the paths the kubelet does not let one configure (its device-plugin socket) stay apart
  from a parallel worker's node, and every mount ends with the namespace.
- **Host changes** (bridge, iptables, sysctls, cgroups) are tracked and undone by host.py,
  even after a test run that died.
- **Network:** the pods sit on a bridge of the node's slot. They reach the API server at
  the `kubernetes` Service's address (10.0.0.1:443, a SAN of its certificate) through a DNAT
  to 127.0.0.1; nothing from the bridge is forwarded anywhere else. The Node's InternalIP is
  the bridge's address on the host, where the API server reaches the kubelet (logs, exec).
- **Placement:** the Node carries the taint ``TAINT``, so no pod of the chart or of a test
  lands on it by chance. A MutatingAdmissionPolicy (real API machinery, GA in 1.36) gives the
  pods of ``runs`` (a label selector) a node selector and a toleration for it, so exactly
  those run here, as their Deployment says otherwise.
- **Images:** nothing is pulled from outside. The sandbox image is built here
  (``pause_archive``: tools/pause in a one-layer image); ``load_image`` imports an archive
  (`buildah push ... docker-archive:`); a registry on 127.0.0.1 is pulled from over http.

Logs: ``logs/containerd.log``, ``logs/kubelet.log``, the containers' in ``logs/pods/``.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from . import host
from .binaries import host_tool, require
from .cluster import LocalCluster
from .pki import client_cert
from .procs import ManagedProcess, free_port, http_ok, wait_for

TAINT = {"key": "kyma-gpu.test/real-node", "value": "true", "effect": "NoSchedule"}
ROLE_LABEL = "kyma-gpu.test/real-node"
SANDBOX_IMAGE = "localhost/kyma-gpu-harness/pause:1"
SERVICE_IP = "10.0.0.1"
"""The `kubernetes` Service's ClusterIP: the first address of the harness's service range."""
KUBELET_FATAL = ("^F[0-9]{4} ", "failed to run Kubelet")
CONTAINERD_FATAL = ("level=fatal",)

_NAMESPACE_SCRIPT = """
set -e
for path in "$@"; do mount -t tmpfs -o mode=0755 kyma-gpu-node "$path"; done
exec sleep infinity
"""


class RealNode:
    """One real Node of ``cluster``: containerd + kubelet in a host slot (host.py)."""

    def __init__(
        self,
        cluster: LocalCluster,
        runs: Mapping[str, str],
        namespace: str,
        progress: Callable[[str], None] | None = None,
        registries: Sequence[str] = (),
    ) -> None:
        self.cluster = cluster
        self.registries = tuple(registries)
        """Registries (host:port on 127.0.0.1) that serve TLS with the cluster's certificate:
        containerd pulls from them by https, trusting the cluster's CA (hosts.toml each);
        others on 127.0.0.1 it pulls from over http, as without this."""
        self.runs = dict(runs)
        """The label selector (key -> value) of the pods that run here, in ``namespace``."""
        self.namespace = namespace
        self.progress = progress or cluster.progress
        self.claim: host.SlotClaim | None = None
        self.processes: list[ManagedProcess] = []
        self.name = ""
        self.dir = Path()
        self._healthz_port = 0

    @property
    def slot(self) -> host.Slot:
        if self.claim is None:
            raise RuntimeError("the real node has not been started")
        return self.claim.slot

    @property
    def socket(self) -> Path:
        return self.slot.run_dir / "containerd.sock"

    def start(self, timeout: float = 120.0) -> RealNode:
        self.claim = host.claim_slot()
        self.name = f"real-node-{self.slot.index}"
        self.dir = self.cluster.workdir / self.slot.tag
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self.progress(f"starting the real node {self.name} (kubelet + containerd)")
        (self.dir / "containerd").mkdir(parents=True, exist_ok=True)
        self.slot.run_dir.mkdir(parents=True, exist_ok=True)
        self._network()
        host.make_cgroup_root(self.slot)
        holder = self._process("node-namespace", [
            str(host_tool("unshare")), "--mount", "--propagation", "private", "sh", "-c",
            _NAMESPACE_SCRIPT, "node-namespace", *host.MOUNT_POINTS,
        ])  # fmt: skip
        wait_for(lambda: _mounted(holder, host.MOUNT_POINTS), 30, "the node's mount namespace",
                 alive=[holder])  # fmt: skip
        containerd = self._in_namespace(holder, "containerd", [
            str(host_tool("containerd")), "--config", str(self._containerd_config()),
        ], CONTAINERD_FATAL)  # fmt: skip
        wait_for(lambda: self.socket.exists() and self._ctr_ok(), 60, "containerd's socket",
                 alive=[containerd])  # fmt: skip
        self.load_image(self._pause_archive())
        self._allow_nodes()
        kubelet = self._in_namespace(holder, "kubelet", self._kubelet_argv(), KUBELET_FATAL)
        health = f"http://127.0.0.1:{self._healthz_port}/healthz"
        kubelet.wait_healthy(lambda: http_ok(health), timeout)
        wait_for(self._ready, timeout, f"Node {self.name} Ready", alive=[kubelet, containerd])
        self._place_pods()

    def stop(self) -> None:
        """Stop the kubelet and containerd, then undo every host change of the slot."""
        for process in reversed(self.processes):
            process.stop(timeout=10)
        if self.claim is not None:
            self.claim.release()
        self.processes.clear()

    # -- processes ------------------------------------------------------------------------

    def _process(self, name: str, argv: list[str], fatal: tuple[str, ...] = ()) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.cluster.log_dir / f"{name}.log",
                                 cwd=self.dir, fatal_patterns=fatal)  # fmt: skip
        process.start()
        self.cluster.register(process)
        self.processes.append(process)
        return process

    def _in_namespace(
        self, holder: ManagedProcess, name: str, argv: list[str], fatal: tuple[str, ...]
    ) -> ManagedProcess:
        enter = [str(host_tool("nsenter")), f"--mount=/proc/{holder.pid}/ns/mnt", "--"]
        return self._process(name, [*enter, *argv], fatal)

    def ctr(self, *args: str, timeout: float = 300.0) -> str:
        """containerd's own CLI against this node's containerd (namespace k8s.io)."""
        result = subprocess.run(
            [str(host_tool("ctr")), "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def _ctr_ok(self) -> bool:
        try:
            self.ctr("version", timeout=10)
        except RuntimeError:
            return False
        return True

    def load_image(self, archive: Path) -> None:
        """Import an image archive (docker-archive or OCI) into the node's containerd."""
        self.ctr("images", "import", str(archive))

    # -- configuration --------------------------------------------------------------------

    def _network(self) -> None:
        """The pods' bridge, the way to the API server, and no way anywhere else."""
        slot, bridge = self.slot, self.slot.bridge
        host.run("ip", "link", "add", bridge, "type", "bridge")
        host.run("ip", "addr", "add", f"{slot.gateway}/24", "dev", bridge)
        host.run("ip", "link", "set", bridge, "up")
        Path(f"/proc/sys/net/ipv4/conf/{bridge}/route_localnet").write_text("1\n")
        tag = ["-m", "comment", "--comment", slot.tag]
        host.run("iptables", "-t", "nat", "-I", "PREROUTING", "-i", bridge, "-d",
                 f"{SERVICE_IP}/32", "-p", "tcp", "--dport", "443", *tag, "-j", "DNAT",
                 "--to-destination", f"127.0.0.1:{self.cluster.api_port}")  # fmt: skip
        host.run("iptables", "-I", "FORWARD", "-i", bridge, "!", "-o", bridge, *tag, "-j", "DROP")

    def _containerd_config(self) -> Path:
        base = self.dir / "containerd"
        cni = self.dir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-bridge.conflist").write_text(json.dumps(self._cni_config(), indent=1))
        runc = host_tool("runc")
        text = f"""version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{_cni_bin_dir()}"
    conf_dir = "{cni / "net.d"}"
{self._registry_config(base)}"""
        path = base / "config.toml"
        path.write_text(text, encoding="utf-8")
        return path

    def _registry_config(self, base: Path) -> str:
        if not self.registries:
            return ""
        certs = base / "certs.d"
        ca = self.cluster.pki.ca_cert
        for registry in self.registries:
            folder = certs / registry
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts.toml").write_text(
                f'server = "https://{registry}"\n\n[host."https://{registry}"]\n'
                f'  capabilities = ["pull", "resolve"]\n  ca = "{ca}"\n', encoding="utf-8"
            )  # fmt: skip
        return (f'  [plugins."io.containerd.grpc.v1.cri".registry]\n'
                f'    config_path = "{certs}"\n')  # fmt: skip

    def _cni_config(self) -> dict[str, Any]:
        slot = self.slot
        return {
            "cniVersion": "0.4.0", "name": slot.bridge,
            "plugins": [{
                "type": "bridge", "bridge": slot.bridge, "isGateway": True, "ipMasq": False,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": slot.subnet,
                                                              "gateway": slot.gateway}]],
                         "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.dir / "ipam")},
            }],
        }  # fmt: skip

    def _kubelet_argv(self) -> list[str]:
        pki = self.cluster.pki
        cert, key = client_cert(pki, self.slot.tag, f"system:node:{self.name}", ("system:nodes",))
        config = yaml.safe_load(self.cluster.kubeconfig.read_text(encoding="utf-8"))
        config["users"] = [{"name": "admin", "user": {"client-certificate": str(cert),
                                                      "client-key": str(key)}}]  # fmt: skip
        kubeconfig = self.dir / "kubelet.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config), encoding="utf-8")
        kubeconfig.chmod(0o600)
        config_path = self.dir / "kubelet.yaml"
        config_path.write_text(yaml.safe_dump(self._kubelet_config()), encoding="utf-8")
        labels = f"{ROLE_LABEL}=true"
        return [
            str(require("kubelet")["kubelet"]), f"--config={config_path}",
            f"--kubeconfig={kubeconfig}", f"--root-dir={self.slot.run_dir / 'kubelet'}",
            f"--cert-dir={self.dir / 'kubelet-pki'}", f"--hostname-override={self.name}",
            f"--node-ip={self.slot.gateway}", f"--node-labels={labels}",
        ]  # fmt: skip

    def _kubelet_config(self) -> dict[str, Any]:
        self._healthz_port = free_port()
        endpoint = f"unix://{self.socket}"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "failSwapOn": False, "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.slot.cgroup_root,
            "containerRuntimeEndpoint": endpoint, "imageServiceEndpoint": endpoint,
            "address": self.slot.gateway, "port": free_port(), "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self._healthz_port,
            # Only clients the cluster CA signed (the API server's kubelet client certificate):
            # the pods on the bridge reach this port too, and must not exec into each other.
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.cluster.pki.ca_cert)}},
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(self.cluster.log_dir / "pods"),
            "volumePluginDir": str(self.dir / "volume-plugins"),
            "registerWithTaints": [TAINT], "maxOpenFiles": 20000,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "serializeImagePulls": False, "resolvConf": "",
            # No image garbage collection: the images were loaded into the machine's containerd
            # once (the manager's, the pause image) and cannot be pulled again. At the default
            # 85 % the kubelet removed the pause image on a machine whose disk was 86 % full by
            # its count (CI, 2026-12-04), and no pod of the KLM upgrade could start.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        }  # fmt: skip

    def _allow_nodes(self) -> None:
        """The harness's API server authorizes by RBAC alone (no Node authorizer): the nodes
        group gets the kubelet's ClusterRole."""
        self.cluster.apply({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "kyma-gpu-harness:nodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": "system:nodes"}],
        })  # fmt: skip

    def _place_pods(self) -> None:
        """The placement policy, and a wait until the API server applies it (a dry-run pod)."""
        if not self.runs:  # no selector: no pod is sent here (a node for NFD alone)
            return
        if self.cluster.get_object("namespace", self.namespace) is None:
            self.cluster.create_namespace(self.namespace)  # for the probe; installs apply it too
        self.cluster.apply(*placement_policy(self.name, self.namespace, self.runs))
        probe = json.dumps({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "placement-probe", "namespace": self.namespace,
                         "labels": self.runs},
            "spec": {"containers": [{"name": "probe", "image": SANDBOX_IMAGE}]},
        })  # fmt: skip

        def placed() -> bool:
            answer = self.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                          input=probe, check=False)  # fmt: skip
            if answer.returncode != 0:
                return False
            selector = json.loads(answer.stdout)["spec"].get("nodeSelector") or {}
            return bool(selector.get("kubernetes.io/hostname") == self.name)

        wait_for(placed, 60, "the placement policy in force", interval=0.5)

    def _ready(self) -> bool:
        node = self.cluster.get_object("node", self.name)
        conditions = ((node or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # -- images -----------------------------------------------------------------------------

    def _pause_archive(self) -> Path:
        path = self.dir / "pause.tar"
        path.write_bytes(pause_archive(require("pause")["pause"].read_bytes()))
        return path

    # -- what tests read --------------------------------------------------------------------

    def container_pid(self, pod: Mapping[str, Any], container: str) -> int:
        """The host pid of a running container, from its status (containerd's task)."""
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        found = [s for s in statuses if s["name"] == container and s.get("containerID")]
        if not found:
            raise AssertionError(f"{container} of {pod['metadata']['name']} has no container")
        container_id = found[0]["containerID"].removeprefix("containerd://")
        for line in self.ctr("tasks", "ls").splitlines()[1:]:
            parts = line.split()
            if parts and parts[0] == container_id:
                return int(parts[1])
        raise AssertionError(f"containerd has no task for container {container_id}")

    def running_pods(self) -> set[str]:
        """``namespace/name`` of every pod with a running container (or sandbox) in containerd."""
        pods = set()
        for line in self.ctr("tasks", "ls").splitlines()[1:]:
            parts = line.split()
            if len(parts) < 3 or parts[2] != "RUNNING":
                continue
            try:
                info = json.loads(self.ctr("containers", "info", parts[0]))
            except RuntimeError:
                continue  # gone in between
            labels = info.get("Labels") or {}
            pods.add(f"{labels.get('io.kubernetes.pod.namespace')}/"
                     f"{labels.get('io.kubernetes.pod.name')}")  # fmt: skip
        return pods


def _mounted(holder: ManagedProcess, paths: tuple[str, ...]) -> bool:
    try:
        mounts = Path(f"/proc/{holder.pid}/mounts").read_text()
    except OSError:
        return False
    targets = {line.split()[1] for line in mounts.splitlines()}
    return set(paths) <= targets


def _cni_bin_dir() -> str:
    for candidate in ("/usr/lib/cni", "/opt/cni/bin"):
        if Path(candidate, "bridge").exists():
            return candidate
    raise host.HostError("no CNI plugins (bridge, host-local): run `make setup`")


def placement_policy(node: str, namespace: str, runs: Mapping[str, str]) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy and its binding: the pods of ``runs`` in ``namespace`` get a
    node selector for ``node`` and a toleration of its taint, nothing else."""
    name = f"kyma-gpu-harness-{node}"
    toleration = (
        f'Object.spec.tolerations{{key: "{TAINT["key"]}", operator: "Equal", '
        f'value: "{TAINT["value"]}", effect: "{TAINT["effect"]}"}}'
    )
    tolerations = (
        f'has(object.spec.tolerations) ? [JSONPatch{{op: "add", path: "/spec/tolerations/-", '
        f'value: {toleration}}}] : [JSONPatch{{op: "add", path: "/spec/tolerations", '
        f"value: [{toleration}]}}]"
    )
    selector = (
        f'has(object.spec.nodeSelector) ? [JSONPatch{{op: "add", '
        f'path: "/spec/nodeSelector/kubernetes.io~1hostname", value: "{node}"}}] : '
        f'[JSONPatch{{op: "add", path: "/spec/nodeSelector", '
        f'value: {{"kubernetes.io/hostname": "{node}"}}}}]'
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"]}]},
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "JSONPatch",
                           "jsonPatch": {"expression": f"({selector}) + ({tolerations})"}}],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "matchResources": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "objectSelector": {"matchLabels": dict(runs)}}},
    }  # fmt: skip
    return [policy, binding]


def pause_archive(binary: bytes, tag: str = SANDBOX_IMAGE) -> bytes:
    """A docker-archive of a one-layer image holding ``binary`` as /pause, its entrypoint."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("pause")
        info.size, info.mode = len(binary), 0o755
        tar.addfile(info, io.BytesIO(binary))
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()  # fmt: skip
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag],
                            "Layers": ["layer/layer.tar"]}]).encode()  # fmt: skip
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in ((config_name, config), ("layer/layer.tar", layer_bytes),
                           ("manifest.json", manifest)):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
