"""The chart sources the tests allow, written the way a cluster administrator writes them: the
ConfigMap kyma-system/kyma-gpu-chart-sources (docs/security.md#chart-sources), applied with
the harness's admin credentials. The module has no bypass: a Gpu naming the local Helm
repository is refused until this ConfigMap lists it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from kyma_gpu.api.chart_sources import CONFIG_MAP_KEY, CONFIG_MAP_NAME, NVIDIA_REPOSITORY
from tests.harness.cluster import LocalCluster

MODULE_NAMESPACE = "kyma-system"
NVIDIA = {"kind": "HelmRepository", "url": NVIDIA_REPOSITORY}


def local_source(url: str, **more: Any) -> dict[str, Any]:
    """The harness's plain-http Helm repository (tests/harness/helm_repo.py)."""
    return {"kind": "HelmRepository", "url": url, "insecure": True, **more}


def chart_sources_config_map(*sources: Mapping[str, Any]) -> dict[str, Any]:
    text = yaml.safe_dump({"sources": [dict(s) for s in sources]}, sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP_NAME, "namespace": MODULE_NAMESPACE},
        "data": {CONFIG_MAP_KEY: text},
    }


def allow_chart_sources(cluster: LocalCluster, *sources: Mapping[str, Any]) -> None:
    """NVIDIA's repository and `sources` become the allowed ones (as an admin: kubectl apply
    with the harness's cluster-admin credentials)."""
    if cluster.get_object("namespace", MODULE_NAMESPACE) is None:
        cluster.create_namespace(MODULE_NAMESPACE)
    cluster.apply(chart_sources_config_map(NVIDIA, *sources))
