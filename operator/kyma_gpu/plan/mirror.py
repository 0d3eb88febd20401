"""Where the chart's images come from: a release's digests pin them, a mirror serves them.
Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kyma_gpu.rules.catalog import ChartFacts
from kyma_gpu.rules.chart import image_reference
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
        keys = image.path.split(".")
        current = _node(values, keys).get("repository")
        repository = current if isinstance(current, str) else image.repository
        fragment = _nested(keys, {"repository": replace_registry(repository, mirror)})
        deep_merge(values, fragment, "image-mirror", provenance)


DIGESTS = "image-digests"
"""The provenance of a pinned image's version."""
NOT_PINNED = frozenset({"driver", "vgpuManager"})
"""Driver images: NVIDIA's controller appends each node's kernel and OS to their tag, so one
digest cannot name them (the release's component pins the ones it lists)."""


def pin_digests(
    values: dict[str, Any], provenance: Provenance, chart: ChartFacts, digests: Mapping[str, str]
) -> None:
    """Every chart image whose reference the release recorded a digest for, by tag and digest
    (`v26.7.0@sha256:...`): the chart and NVIDIA's controller put the version after a colon,
    so the kubelet pulls exactly what the release copied, and the tag stays for readers."""
    for image in chart.images if digests else ():
        keys = image.path.split(".")
        node = _node(values, keys)
        key = "tag" if keys[-1] == "image" else "version"  # NFD's image.tag
        version = node.get(key, node.get("version", image.version))
        reference = image_reference({
            "repository": node.get("repository", image.repository),
            "image": node.get("image", image.image), "version": version,
        })  # fmt: skip
        digest = digests.get(reference)
        if image.path in NOT_PINNED or digest is None or "@" in str(version):
            continue
        deep_merge(values, _nested(keys, {key: f"{version}@{digest}"}), DIGESTS, provenance)


def _node(values: Mapping[str, Any], keys: list[str]) -> Mapping[str, Any]:
    node: Any = values
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def _nested(keys: list[str], leaf: dict[str, Any]) -> dict[str, Any]:
    """{"a": {"b": leaf}} for the keys a, b."""
    for key in reversed(keys):
        leaf = {key: leaf}
    return leaf
