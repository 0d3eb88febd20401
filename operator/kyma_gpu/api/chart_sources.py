"""The chart sources a cluster administrator allows: the ConfigMap
kyma-system/kyma-gpu-chart-sources, key sources.yaml (docs/security.md, door 3).

Where the GPU operator chart comes from is the platform's decision, not the Gpu's: the chart
is installed with the rights of the release account. The Gpu's spec.source must name one of
these sources (repository URL, chart name, an allowed version, an allowed Secret); the plan
refuses anything else. Without the ConfigMap only NVIDIA's repository is allowed, with the
module's supported chart versions.

Where the images come from is the platform's decision too: the key `registries` lists the
registry mirrors a Gpu may name in spec.source.imageRegistry (and that spec.components.
vgpuManagerImage may come from), one per line, each with the pull Secrets the module adds for
it. It is plain text, not YAML, because the ValidatingAdmissionPolicy kyma-gpu-images reads it
too (CEL reads strings, not YAML): a Gpu naming another registry is refused at admission and by
the plan, with the same words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StrictBool, StringConstraints, model_validator

from kyma_gpu.api.base import DNS_NAME_PATTERN
from kyma_gpu.api.base import Model as _Model
from kyma_gpu.api.models import (
    CHART_REPOSITORY_PATTERN,
    CHART_VERSION_PATTERN,
    IMAGE_REGISTRY_PATTERN,
)

CONFIG_MAP_NAME = "kyma-gpu-chart-sources"
CONFIG_MAP_KEY = "sources.yaml"
REGISTRIES_KEY = "registries"
PUBLIC = "public"
"""The line of `registries` that keeps the charts' own registries (nvcr.io, registry.k8s.io,
ghcr.io) allowed beside the mirrors. Without the key they are the only ones allowed."""
WHO_MAY_CHANGE = "a cluster administrator"
"""Who may write the ConfigMap: the ValidatingAdmissionPolicy kyma-gpu-chart-sources
(config/admission/chart_sources_policy.yaml) holds every write to it to the right to update
chartsources.gpu.kyma-project.io, which no aggregated role grants."""
NVIDIA_REPOSITORY = "https://helm.ngc.nvidia.com/nvidia"
NVIDIA_CHART = "gpu-operator"

_DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"

ChartVersion = Annotated[str, StringConstraints(pattern=CHART_VERSION_PATTERN, max_length=64)]
SecretName = Annotated[str, StringConstraints(pattern=DNS_NAME_PATTERN, max_length=253)]
Digest = Annotated[str, StringConstraints(pattern=_DIGEST_PATTERN)]


class SourceKind(StrEnum):
    """How Flux reads the chart: an https:// Helm repository or an oci:// registry."""

    HELM_REPOSITORY = "HelmRepository"
    OCI_REPOSITORY = "OCIRepository"


class AllowedSource(_Model):
    """One chart source the Gpu may name in spec.source."""

    kind: SourceKind
    url: str = Field(pattern=CHART_REPOSITORY_PATTERN, max_length=512)
    """The repository URL exactly as spec.source.chartRepository names it (a trailing slash
    does not count): https:// for a HelmRepository, oci:// for an OCIRepository; http:// only
    with insecure: true."""

    chart_name: str = Field(default=NVIDIA_CHART, pattern=DNS_NAME_PATTERN, max_length=63)
    operator_versions: tuple[ChartVersion, ...] | None = Field(default=None, max_length=64)
    """The chart versions spec.operatorVersion may name. Empty: the module's supported
    versions (values-rules/charts/)."""

    secret_refs: tuple[SecretName, ...] = Field(default=(), max_length=16)
    """The Secrets of kyma-system that spec.source.secretRef may name for this source. Flux
    sends a Secret's credentials to this URL: list only the ones meant for it."""

    insecure: StrictBool = False
    """The Gpu may set spec.source.insecure (plain http://, an OCI registry without TLS)."""

    digests: dict[ChartVersion, Digest] = Field(default_factory=dict, max_length=64)
    """OCI only: the chart's manifest digest per version. A version listed here is pulled by
    digest (the OCIRepository's ref.digest), so a tag moved in the registry is not installed."""

    @model_validator(mode="after")
    def _consistent(self) -> AllowedSource:
        scheme = self.url.split("://", 1)[0]
        oci = self.kind is SourceKind.OCI_REPOSITORY
        if oci != (scheme == "oci"):
            raise ValueError(f"kind {self.kind} does not match the URL scheme {scheme}://")
        if scheme == "http" and not self.insecure:
            raise ValueError("a plain http:// URL needs insecure: true")
        if self.digests and not oci:
            raise ValueError("digests pin OCI charts only")
        listed = set(self.operator_versions or ())
        unlisted = sorted(v for v in self.digests if self.operator_versions and v not in listed)
        if unlisted:
            raise ValueError(f"digests for versions not in operatorVersions: {unlisted}")
        return self


class ChartSources(_Model):
    """The content of the ConfigMap's key sources.yaml."""

    sources: tuple[AllowedSource, ...] = Field(max_length=32)


@dataclass(frozen=True, slots=True)
class ListedLines:
    """What the admission policy kyma-gpu-flux-sources reads of sources.yaml, line by line (CEL
    cannot read YAML): `url:`, `chartName:` and `insecure: true` lines, list items (`- x`) and
    the items of a `secretRefs: [a, b]` line, each trimmed, a leading `- ` and quotes taken off,
    a URL's trailing slash too. The plan holds the ConfigMap to it (`unreadable_lines`), so that
    both read the same list."""

    urls: frozenset[str]
    chart_names: frozenset[str]
    items: frozenset[str]
    insecure: bool


def _unquoted(value: str) -> str:
    if len(value) > 1 and value[0] in "'\"" and value[-1] == value[0]:
        return value[1:-1]
    return value


def _flow_items(value: str) -> list[str]:
    """`[a, b]` -> a, b (a flow list on one line)."""
    if not (value.startswith("[") and value.endswith("]")):
        return []
    return [_unquoted(v.strip()) for v in value[1:-1].split(",")]


def listed_lines(text: str) -> ListedLines:
    urls, names, items, insecure = set(), set(), set(), False
    for raw in text.split("\n"):
        line = raw.strip()
        if line.startswith("- "):
            items.add(_unquoted(line[2:].strip()))
            line = line[2:].strip()
        if line.startswith("url:"):
            url = _unquoted(line[4:].strip())
            urls.add(url[:-1] if url.endswith("/") else url)
        elif line.startswith("chartName:"):
            names.add(_unquoted(line[10:].strip()))
        elif line.startswith("secretRefs:"):
            items.update(_flow_items(line[11:].strip()))
        insecure = insecure or line == "insecure: true"
    return ListedLines(frozenset(urls), frozenset(names), frozenset(items), insecure)


def unreadable_lines(text: str, sources: ChartSources) -> str | None:
    """Why the admission policy would not find a source of the parsed list, or None."""
    lines = listed_lines(text)
    for source in sources.sources:
        url = source.url.rstrip("/")
        if url not in lines.urls:
            return f"write the url {source.url} on a line of its own (url: {source.url})"
        if source.chart_name != NVIDIA_CHART and source.chart_name not in lines.chart_names:
            return f"write chartName: {source.chart_name} on a line of its own"
        missing = [s for s in source.secret_refs if s not in lines.items]
        if missing:
            return f"list the secretRefs on one line ([{missing[0]}]) or one per line"
        if source.insecure and not lines.insecure:
            return "write insecure: true on a line of its own"
    return None


LINES_NOTE = (
    "the admission policy kyma-gpu-flux-sources reads sources.yaml line by line: block style, "
    "one key per line"
)


def default_sources() -> ChartSources:
    """Without the ConfigMap: NVIDIA's repository, the supported versions, no Secret. Made
    anew each time: a model's `digests` is a dict, which no module may share."""
    return ChartSources(
        sources=(AllowedSource(kind=SourceKind.HELM_REPOSITORY, url=NVIDIA_REPOSITORY),)
    )


REGISTRY_NOT_ALLOWED = (
    "spec.source.imageRegistry {registry} is not an image registry mirror a cluster "
    "administrator allows: the ConfigMap kyma-system/kyma-gpu-chart-sources, key registries, "
    "lists them (docs/security.md#image-registries)"
)
"""Said by the admission policy kyma-gpu-images and by the plan (ImageRegistryNotAllowed)."""
VGPU_IMAGE_NOT_ALLOWED = (
    "spec.components.vgpuManagerImage {image} is not from an image registry mirror a cluster "
    "administrator allows: the ConfigMap kyma-system/kyma-gpu-chart-sources, key registries, "
    "lists them (docs/security.md#image-registries)"
)
"""Said by the admission policy kyma-gpu-images and by the plan (ImageRegistryNotAllowed)."""


@dataclass(frozen=True, slots=True)
class AllowedRegistry:
    """A registry mirror a Gpu may name, and the pull Secrets (in the GPU operator's namespace)
    the module gives every operand pulled from it."""

    registry: str
    pull_secrets: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Registries:
    """The key `registries`: the mirrors, and whether the charts' own registries stay allowed."""

    mirrors: tuple[AllowedRegistry, ...] = ()
    public: bool = True

    def find(self, registry: str) -> AllowedRegistry | None:
        return next((m for m in self.mirrors if m.registry == registry), None)

    def holding(self, image: str) -> AllowedRegistry | None:
        """The mirror a full image reference (registry/path:tag) comes from, if any."""
        return next((m for m in self.mirrors if image.startswith(m.registry + "/")), None)

    def names(self) -> str:
        listed = [m.registry for m in self.mirrors] + ([PUBLIC] if self.public else [])
        return ", ".join(listed) or "none"


_REGISTRY = re.compile(IMAGE_REGISTRY_PATTERN)
_SECRET = re.compile(DNS_NAME_PATTERN)
MAX_REGISTRIES = 32


def parse_registries(text: str) -> Registries:
    """The key's text -> the mirrors. One mirror per line: the registry, then its pull Secrets,
    separated by spaces; `public` on a line of its own; `#` starts a comment line. Raises
    ValueError naming the first bad line."""
    mirrors: list[AllowedRegistry] = []
    public = False
    for number, line in enumerate(text.split("\n"), start=1):
        words = line.strip().split(" ")
        words = [w for w in words if w]
        if not words or words[0].startswith("#"):
            continue
        if "\t" in line:
            raise ValueError(f"line {number}: separate with spaces, not tabs")
        if words == [PUBLIC]:
            public = True
            continue
        registry, secrets = words[0], tuple(words[1:])
        if not _REGISTRY.match(registry) or len(registry) > 255:
            raise ValueError(f"line {number}: {registry!r} is not a registry (host[:port][/path])")
        bad = [s for s in secrets if not _SECRET.match(s) or len(s) > 253]
        if bad:
            raise ValueError(f"line {number}: {bad[0]!r} is not a Secret name")
        mirrors.append(AllowedRegistry(registry, secrets))
    if len(mirrors) > MAX_REGISTRIES:
        raise ValueError(f"at most {MAX_REGISTRIES} registries, it lists {len(mirrors)}")
    return Registries(tuple(mirrors), public)
