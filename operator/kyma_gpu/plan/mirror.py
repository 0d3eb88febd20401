"""The image-registry rewrite: every image of the chart pulled from a mirror. Pure."""

from __future__ import annotations

import copy
from typing import Any

from kyma_gpu.rules.catalog import ChartFacts
from kyma_gpu.rules.engine import Provenance, deep_merge


def replace_registry(repository: str, mirror: str) -> str:
    """nvcr.io/nvidia/k8s -> <mirror>/nvidia/k8s (the first path element is the registry)."""
    parts = repository.split("/", 1)
    has_host = "." in parts[0] or ":" in parts[0] or parts[0] == "localhost"
    path = parts[1] if has_host and len(parts) > 1 else repository
    return f"{mirror.rstrip('/')}/{path}"


def mirror_values(
    values: dict[str, Any], provenance: Provenance, chart: ChartFacts, mirror: str
) -> None:
    """Point every image of the chart at the mirror, keeping paths (rules' repositories too)."""
    for image in chart.images:
        node: Any = values
        keys = image.path.split(".")
        current = image.repository
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get("repository"), str):
            current = node["repository"]
        fragment: dict[str, Any] = {"repository": replace_registry(current, mirror)}
        for key in reversed(keys):
            fragment = {key: fragment}
        deep_merge(values, copy.deepcopy(fragment), "image-mirror", provenance)
