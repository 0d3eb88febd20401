"""Small builders of Node bodies and cluster facts for the unit tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from kyma_gpu.facts import ClusterFacts, MachineTypeRegistry, cluster_facts, node_facts
from kyma_gpu.plan import AllowedSources, allowed_sources_of

GL = "Garden Linux 1877.21"
UBUNTU = "Ubuntu 22.04.5 LTS"


def node(
    name: str = "gpu-1",
    *,
    instance_type: str | None = "g6.xlarge",
    provider_id: str | None = "aws:///eu-central-1a/i-0a1b2c3d4e5f60001",
    os_image: str | None = GL,
    arch: str | None = "amd64",
    kernel: str | None = "6.12.44-cloud-amd64",
    pool: str | None = "gpu",
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str] | None = None,
    nfd: bool = True,
) -> dict[str, Any]:
    """A Node body as the API returns it, with only the fields detection reads (and a few more).

    ``nfd``: with the OS and kernel labels that node-feature-discovery publishes."""
    all_labels: dict[str, str] = {"kubernetes.io/os": "linux"}
    if nfd and isinstance(kernel, str) and kernel:
        all_labels["feature.node.kubernetes.io/kernel-version.full"] = kernel
    if nfd and isinstance(os_image, str) and os_image.split():
        os_id = os_image.split()[0].lower()
        all_labels["feature.node.kubernetes.io/system-os_release.ID"] = os_id
    if instance_type is not None:
        all_labels["node.kubernetes.io/instance-type"] = instance_type
    if pool is not None:
        all_labels["worker.gardener.cloud/pool"] = pool
    all_labels.update(labels or {})
    info: dict[str, Any] = {"containerRuntimeVersion": "containerd://1.7.27"}
    if os_image is not None:
        info["osImage"] = os_image
    if arch is not None:
        info["architecture"] = arch
    if kernel is not None:
        info["kernelVersion"] = kernel
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {},
        "status": {
            "capacity": {"cpu": "4", "memory": "16093720Ki", "pods": "110", **(capacity or {})},
            "nodeInfo": info,
        },
    }
    if provider_id is not None:
        body["spec"]["providerID"] = provider_id
    return body


def cpu_node(name: str = "cpu-1", os_image: str = GL) -> dict[str, Any]:
    return node(name, instance_type="m6i.large", os_image=os_image, pool="cpu")


def ubuntu_node(name: str = "ubuntu-1", **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("instance_type", "g4dn.xlarge")
    kwargs.setdefault("os_image", UBUNTU)
    kwargs.setdefault("kernel", "6.8.0-1036-aws")
    return node(name, **kwargs)


def facts_of(registry: MachineTypeRegistry, *bodies: Mapping[str, Any]) -> ClusterFacts:
    return cluster_facts(node_facts(body, registry) for body in bodies)


def allowing(*sources: Mapping[str, Any], nvidia: bool = True) -> AllowedSources:
    """The allowed chart sources as the ConfigMap kyma-system/kyma-gpu-chart-sources holds
    them: NVIDIA's repository (unless `nvidia` is False) and `sources` (each as in
    sources.yaml, camelCase)."""
    default = {"kind": "HelmRepository", "url": "https://helm.ngc.nvidia.com/nvidia"}
    listed = [*([default] if nvidia else []), *(dict(s) for s in sources)]
    text = yaml.safe_dump({"sources": listed})
    allowed_sources = allowed_sources_of({"kind": "ConfigMap", "data": {"sources.yaml": text}})
    assert allowed_sources.error is None, allowed_sources.error
    return allowed_sources
