"""An air-gapped Kyma cluster on this machine (issue 31): the module released into registry A
(the public registries' stand-in), moved whole into registry B (the sovereign one) with the ocm
CLI, A stopped, and the real KLM installing the module from B.

- A and B are distribution's registry with TLS (the cluster's serving certificate): the ocm CLI
  copies by https only, and KLM can localise only references without a scheme.
- The release names its operands and the module's Flux in A (`--operand-registry`), and A holds
  a stand-in under each of those names (`stand_ins`): nothing pulls them (the fleet is kwok's),
  the ocm CLI copies them. The manager's image is the real one, built and pushed to A.
- Who trusts B: containerd of the real node (hosts.toml with the cluster's CA), the cluster's
  Flux (SSL_CERT_FILE), KLM (SSL_CERT_FILE), as the nodes and controllers of a sovereign
  cloud trust its registry.
- The administrator's ConfigMap (`administrator_config_map`) names B's chart, pinned by the
  digests the transfer gave, and B as the only image registry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kyma_gpu.api.chart_sources import CONFIG_MAP_KEY, CONFIG_MAP_NAME, REGISTRIES_KEY
from kyma_gpu.plan.mirror import replace_registry
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu_tools.inventory import module_images

from .binaries import REPO_ROOT, require
from .cluster import LocalCluster
from .flux import FluxStack
from .klm import (
    MANAGER_LABELS,
    SKR_NAMESPACE,
    LifecycleManager,
    Published,
    Registry,
    publish,
)
from .nodes import DEMO_FLEET
from .realnode import RealNode

COMPONENT = "kyma-project.io/module/gpu"
CHARTS = REPO_ROOT.parent / "shared" / "charts"


def stand_ins(registry: Registry, version: str, *, manager: bool = True) -> list[str]:
    """Push a stand-in under every name a release with `--operand-registry registry.host`
    gives an image but the manager's (manager=True: that one too, by the release's tag)."""
    sys.path.insert(0, str(REPO_ROOT / "hack"))
    from module import operand_resources

    references = [r["access"]["imageReference"]
                  for r in operand_resources(Catalog(), CHARTS, registry.host, version)
                  if r["type"] == "ociArtifact"]  # fmt: skip
    references += [replace_registry(i.reference, registry.host) for i in module_images()[1:]]
    if manager:
        references.append(f"{registry.host}/kyma-project/gpu-manager:{version}")
    for reference in references:
        registry.push_stand_in(reference)
    return references


def ocm(*args: str, ca: Path) -> str:
    env = {**os.environ, "SSL_CERT_FILE": str(ca)}
    result = subprocess.run([str(require("ocm")["ocm"]), *args], capture_output=True, text=True,
                            env=env, timeout=900, check=False)  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(f"ocm {' '.join(args[:2])} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def transfer(source: Registry, target: Registry, version: str) -> None:
    """`ocm transfer --copy-resources`: the component and everything it names, into target."""
    ocm("transfer", "componentversions", "--copy-resources", "--overwrite",
        f"{source.host}//{COMPONENT}:{version}", target.host, ca=source.ca)  # fmt: skip


def resources(registry: Registry, version: str) -> list[dict[str, Any]]:
    out = ocm("get", "resources", f"{registry.host}//{COMPONENT}:{version}", "-o", "json",
              ca=registry.ca)  # fmt: skip
    return [item["element"] for item in json.loads(out)["items"]]


def administrator_config_map(registry: Registry, version: str) -> dict[str, Any]:
    """The chart from the registry's component, pinned by digest; the registry the only
    image registry."""
    charts = [r for r in resources(registry, version) if r["type"] == "helmChart"]
    digests = {str(r["version"]): str(r["access"]["imageReference"]).rsplit("@", 1)[1]
               for r in charts}  # fmt: skip
    source = {"kind": "OCIRepository", "url": f"oci://{registry.host}/{COMPONENT}",
              "chartName": "gpu-operator", "digests": digests}  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP_NAME, "namespace": SKR_NAMESPACE},
        "data": {CONFIG_MAP_KEY: yaml.safe_dump({"sources": [source]}),
                 REGISTRIES_KEY: f"{registry.host}\n"},
    }  # fmt: skip


@dataclass
class AirGapped:
    """The whole landscape, up to KLM offering the module from B (see the module docstring)."""

    workdir: Path
    version: str = "0.3.0"
    progress: Callable[[str], None] = print
    cluster: LocalCluster = field(init=False)
    flux: FluxStack = field(init=False)
    public: Registry = field(init=False)
    sovereign: Registry = field(init=False)
    node: RealNode = field(init=False)
    klm: LifecycleManager = field(init=False)
    released: Published = field(init=False)
    _started: list[Any] = field(default_factory=list)

    def start(self) -> AirGapped:
        self.cluster = LocalCluster(node_files=[DEMO_FLEET], progress=self.progress)
        try:
            self.cluster.start()
            self.flux = FluxStack(self.cluster, trust_cluster_ca=True).start()
            self._started.append(self.flux)
            self.public = Registry(self.cluster, tls=True, name="registry-public").start()
            self.sovereign = Registry(self.cluster, tls=True, name="registry-sovereign").start()
            self.node = RealNode(self.cluster, MANAGER_LABELS, SKR_NAMESPACE,
                                 registries=(self.sovereign.host,)).start()  # fmt: skip
            self._started.append(self.node)
            self._release_and_move()
            self.progress("starting Kyma Lifecycle Manager on the sovereign registry")
            self.klm = LifecycleManager(self.cluster, self.sovereign).start()
            self.klm.offer(self.released, {"regular": self.version})
        except BaseException:
            self.stop()
            raise
        return self

    def _release_and_move(self) -> None:
        self.progress(f"stand-ins of the public images in {self.public.host}")
        stand_ins(self.public, self.version, manager=False)
        self.progress(f"releasing {self.version} into {self.public.url} (hack/module.py)")
        self.released = publish(self.public, self.version, self.workdir / self.version,
                                operand_registry=self.public.host)  # fmt: skip
        self.progress(f"ocm transfer --copy-resources to {self.sovereign.host}; stopping A")
        transfer(self.public, self.sovereign, self.version)
        self.public.stop()

    def stop(self) -> None:
        for part in reversed(self._started):
            part.stop()
        self._started.clear()
        self.cluster.stop()
