"""Kyma's delivery on the local cluster: an OCI registry, the module released into it with
Kyma's tools, and the real Kyma Lifecycle Manager installing it.

- ``Registry``: distribution's registry v3 (tools/registry) on 127.0.0.1, plain http,
  storage in the cluster's workdir. The manager image and the module's OCM component
  version are pushed there; KLM reads the component from it.
- ``publish(...)``: `hack/module.py release` against that registry: the image built from
  the Dockerfile (buildah) and pushed (the real node's containerd pulls it from there), the
  manifest pinned to its digest, `modulectl create`, `ocm add componentversions`,
  `ocm transfer ctf`. Returns the ModuleTemplate and ModuleReleaseMeta it wrote.
- ``LifecycleManager``: the KLM binary (built from ../shared/vendor/klm) with KCP and SKR the
  same cluster, as ../shared/reference/klm-local.md describes: its CRDs and the Istio and
  cert-manager CRDs it expects (no controllers for them), the Istio Gateway it requires, the
  SKR kubeconfig Secret, the KCP Kyma, the watcher's TLS Secrets and a ready `skr-webhook`
  Deployment (so the Kyma itself can become Ready). The module's ModuleTemplate and
  ModuleReleaseMeta go into kcp-system; an admin enables the module in the SKR Kyma
  `kyma-system/default`, which KLM creates.

Nothing here imitates KLM: it decides, from the component it reads from the registry, what to
apply, creates the default Gpu, waits for the manager Deployment, upgrades and removes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .binaries import REPO_ROOT, require
from .cluster import LocalCluster
from .flux import FluxStack
from .nodes import DEMO_FLEET
from .procs import ManagedProcess, free_port, http_ok
from .realnode import RealNode

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"

KLM_BINARIES = ("lifecycle-manager", "registry", "modulectl", "ocm")
KCP_NAMESPACE = "kcp-system"
SKR_NAMESPACE = "kyma-system"
KYMA_NAME = "local-kyma"
SKR_KYMA = "default"
KLM_FATAL = ("^panic: ", '"level":"fatal"', "\tFATAL\t")
MANAGER_LABELS = {"app.kubernetes.io/name": "gpu-manager"}
MANAGER_PODS = "app.kubernetes.io/name=gpu-manager"


def manager_pods(cluster: LocalCluster) -> list[dict[str, Any]]:
    """The manager's pods in kyma-system that are not being deleted."""
    pods = cluster.list_objects("pods", SKR_NAMESPACE, selector=MANAGER_PODS)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


class Registry:
    """distribution's registry v3 on 127.0.0.1:<port>: plain http, or https with the local
    cluster's serving certificate (tls=True: clients trust the cluster's CA, `ca`) where a
    tool reaches registries by https only (the ocm CLI copying resources, KLM's image
    references). `name` tells several apart (their folders and logs)."""

    def __init__(self, cluster: LocalCluster, *, tls: bool = False, name: str = "registry"):
        self.cluster = cluster
        self.tls = tls
        self.name = name
        self.port = 0
        self.process: ManagedProcess | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    @property
    def ca(self) -> Path:
        return self.cluster.pki.ca_cert

    def context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca)) if self.tls else None

    def start(self) -> Registry:
        binary = require("registry")["registry"]
        self.port = free_port()
        root = self.cluster.workdir / self.name
        root.mkdir(parents=True, exist_ok=True)
        http: dict[str, Any] = {"addr": self.host, "debug": {"addr": f"127.0.0.1:{free_port()}"}}
        if self.tls:
            pki = self.cluster.pki
            http["tls"] = {"certificate": str(pki.serving_cert), "key": str(pki.serving_key)}
        config = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(root / "data")},
                        "delete": {"enabled": True}},
            "http": http,
        }  # fmt: skip
        (root / "config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.process = ManagedProcess(
            self.name, [str(binary), "serve", str(root / "config.yml")],
            self.cluster.log_dir / f"{self.name}.log", cwd=root, fatal_patterns=("^panic: ",),
        )  # fmt: skip
        self.process.start()
        self.cluster.register(self.process)
        self.process.wait_healthy(lambda: http_ok(f"{self.url}/v2/", self.context()), timeout=30)
        return self

    def stop(self) -> None:
        """Gone for good: what a registry that is out of reach looks like to its clients."""
        if self.process is not None:
            self.process.stop()

    def push_stand_in(self, reference: str) -> None:
        """An image with a one-line config and no layers under `reference` (its host is this
        registry): for tools that read manifests and copy artifacts, never run them."""
        host, _, rest = reference.partition("/")
        assert host == self.host, reference
        name, _, tag = rest.rpartition(":")
        # A config of its own per reference: each stand-in has a digest of its own, so a digest
        # pinned to the wrong image shows.
        config = json.dumps({"standIn": reference}).encode()
        digest = self._blob(name, config)
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [],
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": digest, "size": len(config)}}  # fmt: skip
        put = urllib.request.Request(
            f"{self.url}/v2/{name}/manifests/{tag}", method="PUT",
            data=json.dumps(manifest).encode(), headers={"Content-Type": OCI_MANIFEST},
        )  # fmt: skip
        urllib.request.urlopen(put, timeout=10, context=self.context()).close()

    def _blob(self, name: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        start = urllib.request.Request(f"{self.url}/v2/{name}/blobs/uploads/", method="POST")
        with urllib.request.urlopen(start, timeout=10, context=self.context()) as answer:
            location = answer.headers["Location"]
        url = location if location.startswith("http") else self.url + location
        put = urllib.request.Request(
            f"{url}{'&' if '?' in url else '?'}digest={digest}", data=data, method="PUT",
            headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip
        urllib.request.urlopen(put, timeout=10, context=self.context()).close()
        return digest


@dataclass(frozen=True)
class Published:
    """What `hack/module.py release` wrote for one version."""

    version: str
    out: Path

    def template(self) -> dict[str, Any]:
        return _one(self.out / "template.yaml")

    def release_meta(self) -> dict[str, Any]:
        return _one(self.out / "modulereleasemeta.yaml")

    def manifest(self) -> list[dict[str, Any]]:
        text = (self.out / "manifest.yaml").read_text(encoding="utf-8")
        return [d for d in yaml.safe_load_all(text) if d]


def _one(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def publish(
    registry: Registry,
    version: str,
    out: Path,
    *,
    build_image: bool = True,
    operand_registry: str = "",
) -> Published:
    """Release ``version`` of the module into the registry, as `make module` does;
    `operand_registry`: the operands (and the module's Flux) named there, not in the public
    registries (hack/module.py --operand-registry)."""
    argv = [
        sys.executable, str(REPO_ROOT / "hack" / "module.py"), "release",
        "--version", version, "--image-repository", f"{registry.host}/kyma-project",
        "--component-repository", registry.url, "--team", "kyma/gpu-local",
        "--out", str(out),
    ]  # fmt: skip
    if not build_image:
        argv.append("--no-image")
    # Without an operand registry the operands are named in the public registries, which
    # this machine cannot reach: by tag (the air-gapped landscape pins them, from A).
    argv += ["--operand-registry", operand_registry] if operand_registry else [
        "--unpinned-operands"]  # fmt: skip
    env = {**os.environ, **({"SSL_CERT_FILE": str(registry.ca)} if registry.tls else {})}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False,
                            env=env)  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(f"hack/module.py release {version} failed:\n{result.stderr}")
    return Published(version, out)


class LifecycleManager:
    """The real KLM with KCP = SKR = the local cluster."""

    def __init__(self, cluster: LocalCluster, registry: Registry) -> None:
        self.cluster = cluster
        self.registry = registry
        self.home = require("lifecycle-manager.d")["lifecycle-manager.d"]
        self.process: ManagedProcess | None = None
        self.ports: dict[str, int] = {}

    def start(self) -> LifecycleManager:
        self._install_crds()
        self._kcp_objects()
        self.ports = {name: free_port() for name in ("metrics", "health", "listener", "pprof")}
        argv = [
            str(self.home / "bin" / "lifecycle-manager"),
            f"--oci-registry-host={self.registry.url}",
            "--skr-watcher-image-tag=1.0.0",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{self.ports['metrics']}",
            f"--health-probe-bind-address=127.0.0.1:{self.ports['health']}",
            f"--kyma-skr-listener-bind-address=127.0.0.1:{self.ports['listener']}",
            f"--pprof-bind-address=127.0.0.1:{self.ports['pprof']}",
            "--drop-crd-stored-version-map=",
            "--kyma-requeue-success-interval=10s",
            "--manifest-requeue-success-interval=5s",
            "--module-upgrade-rollout-max-delay=0s",
        ]
        self.process = ManagedProcess(
            "lifecycle-manager", argv, self.cluster.log_dir / "lifecycle-manager.log",
            env={"KUBECONFIG": str(self.cluster.kubeconfig),
                 **({"SSL_CERT_FILE": str(self.registry.ca)} if self.registry.tls else {})},
            cwd=self.home / "bin", fatal_patterns=KLM_FATAL,
        )  # fmt: skip
        self.process.start()
        self.cluster.register(self.process)
        health = f"http://127.0.0.1:{self.ports['health']}/readyz"
        self.process.wait_healthy(lambda: http_ok(health), timeout=120)
        return self

    def _install_crds(self) -> None:
        files = sorted((self.home / "crds" / "klm").glob("*.yaml"))
        files += sorted((self.home / "crds" / "deps").glob("*.yaml"))
        args = ["apply", "--server-side", "--field-manager=kyma-gpu-tests"]
        for path in files:
            args += ["-f", str(path)]
        self.cluster.kubectl(*args, timeout=180)
        self.cluster.wait_crds_established(
            "kymas.operator.kyma-project.io", "manifests.operator.kyma-project.io",
            "moduletemplates.operator.kyma-project.io",
            "modulereleasemetas.operator.kyma-project.io", "gateways.networking.istio.io",
        )  # fmt: skip

    def _kcp_objects(self) -> None:
        for namespace in (KCP_NAMESPACE, "istio-system", SKR_NAMESPACE):
            if self.cluster.get_object("namespace", namespace) is None:
                self.cluster.create_namespace(namespace)
        kubeconfig = self.cluster.kubeconfig.read_bytes()
        pki = self.cluster.pki
        tls = {
            "tls.crt": pki.serving_cert.read_bytes(), "tls.key": pki.serving_key.read_bytes(),
            "ca.crt": pki.ca_cert.read_bytes(),
        }  # fmt: skip
        self.cluster.apply(
            _gateway(), _secret(KYMA_NAME, KCP_NAMESPACE, {"config": kubeconfig}, _kyma_labels()),
            _secret(f"{KYMA_NAME}-webhook-tls", "istio-system", tls),
            _secret("klm-istio-gateway", "istio-system", {"ca.crt": tls["ca.crt"]}),
            _kcp_kyma(),
        )  # fmt: skip

    def offer(self, published: Published, channel_versions: Mapping[str, str]) -> None:
        """Put a version's ModuleTemplate into kcp-system and point the channels at versions."""
        template = published.template()
        template["metadata"]["namespace"] = KCP_NAMESPACE
        meta = published.release_meta()
        meta["spec"]["channels"] = [
            {"channel": c, "version": v} for c, v in sorted(channel_versions.items())
        ]
        self.cluster.apply(template, meta)

    def enable(self, module: str) -> None:
        """What an admin does: the module in the SKR Kyma's spec.modules."""
        patch = {"spec": {"modules": [{"name": module}]}}
        self.cluster.kubectl("patch", "kyma", SKR_KYMA, "-n", SKR_NAMESPACE, "--type=merge",
                             "-p", json.dumps(patch))  # fmt: skip

    def disable(self) -> None:
        self.cluster.kubectl("patch", "kyma", SKR_KYMA, "-n", SKR_NAMESPACE, "--type=merge",
                             "-p", json.dumps({"spec": {"modules": []}}))  # fmt: skip

    def kyma(self, namespace: str = KCP_NAMESPACE, name: str = KYMA_NAME) -> dict[str, Any] | None:
        return self.cluster.get_object("kymas.operator.kyma-project.io", name, namespace)

    def module_status(self, module: str) -> dict[str, Any] | None:
        """The module's entry in the KCP Kyma's status.modules."""
        kyma = self.kyma() or {}
        found = [m for m in (kyma.get("status") or {}).get("modules") or []
                 if m.get("name") == module]  # fmt: skip
        return found[0] if found else None


def _kyma_labels() -> dict[str, str]:
    return {
        "operator.kyma-project.io/kyma-name": KYMA_NAME,
        "operator.kyma-project.io/managed-by": "lifecycle-manager",
        "kyma-project.io/runtime-id": KYMA_NAME,
    }


def _secret(
    name: str, namespace: str, data: Mapping[str, bytes], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "data": {k: base64.b64encode(v).decode("ascii") for k, v in data.items()},
    }  # fmt: skip


def _gateway() -> dict[str, Any]:
    """KLM exits without its watcher Gateway: one server, one host (never served here)."""
    return {
        "apiVersion": "networking.istio.io/v1beta1", "kind": "Gateway",
        "metadata": {"name": "klm-watcher", "namespace": KCP_NAMESPACE},
        "spec": {"selector": {"istio": "ingressgateway"},
                 "servers": [{"hosts": ["listener.kyma.local"],
                              "port": {"name": "https", "number": 443, "protocol": "HTTPS"},
                              "tls": {"credentialName": "klm-istio-gateway", "mode": "MUTUAL"}}]},
    }  # fmt: skip


def _kcp_kyma() -> dict[str, Any]:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Kyma",
        "metadata": {"name": KYMA_NAME, "namespace": KCP_NAMESPACE,
                     "annotations": {"skr-domain": "kyma.local"},
                     "labels": {k: v for k, v in _kyma_labels().items()
                                if k != "operator.kyma-project.io/managed-by"}},
        "spec": {"channel": "regular"},
    }  # fmt: skip


@dataclass
class Landscape:
    """Everything of Kyma's delivery on one new cluster (the e2e test's and the KLM demo's):
    the demo fleet, Flux with the local Helm repository and the real NVIDIA controller, the
    registry, a real node (kubelet + containerd) for the manager's pods, the module released
    into the registry at ``versions``, and KLM (with the first version on the regular
    channel)."""

    workdir: Path
    versions: tuple[str, ...] = ("0.1.0",)
    progress: Callable[[str], None] = print
    cluster: LocalCluster = field(init=False)
    flux: FluxStack = field(init=False)
    registry: Registry = field(init=False)
    node: RealNode = field(init=False)
    klm: LifecycleManager = field(init=False)
    releases: dict[str, Published] = field(default_factory=dict)
    _started: list[Any] = field(default_factory=list)

    def start(self) -> Landscape:
        self.cluster = LocalCluster(node_files=[DEMO_FLEET], progress=self.progress)
        try:
            self.cluster.start()
            self.flux = FluxStack(self.cluster).start()
            self._started.append(self.flux)
            # TLS, as Kyma's registries: KLM cannot localise a reference with a scheme, and
            # the ocm CLI names what it uploads to a plain-http registry with http://.
            self.registry = Registry(self.cluster, tls=True).start()
            self.node = RealNode(self.cluster, MANAGER_LABELS, SKR_NAMESPACE,
                                 registries=(self.registry.host,)).start()  # fmt: skip
            self._started.append(self.node)
            for version in self.versions:
                self.progress(f"releasing {version} into {self.registry.url} (hack/module.py)")
                self.releases[version] = publish(self.registry, version, self.workdir / version)
            self.progress("starting Kyma Lifecycle Manager")
            self.klm = LifecycleManager(self.cluster, self.registry).start()
            self.klm.offer(self.releases[self.versions[0]], {"regular": self.versions[0]})
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for part in reversed(self._started):
            part.stop()
        self._started.clear()
        self.cluster.stop()
