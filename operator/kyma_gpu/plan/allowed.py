"""Is the chart the Gpu names one the platform allows? Pure.

The allowed sources are the ConfigMap kyma-system/kyma-gpu-chart-sources (api/chart_sources.py),
which the manager watches and hands to the plan as plain data (`AllowedSources`); `kyma-gpu plan
--sources` reads the same ConfigMap from a file. A Gpu whose spec.source names another
repository, chart, version or Secret, or plain http:// the source does not allow, gets a fleet
error (`ChartSourceNotAllowed`): nothing is written to Flux.

The same ConfigMap's key `registries` lists the image registry mirrors (api/chart_sources.py). A Gpu
naming another one in spec.source.imageRegistry, or a vGPU Manager image from elsewhere, gets
`ImageRegistryNotAllowed`, in the words the admission policy kyma-gpu-images uses. A Gpu that
names no mirror where the administrator allows mirrors only gets the first listed one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from kyma_gpu.api.chart_sources import (
    CONFIG_MAP_KEY,
    CONFIG_MAP_NAME,
    LINES_NOTE,
    NVIDIA_REPOSITORY,
    REGISTRIES_KEY,
    REGISTRY_NOT_ALLOWED,
    VGPU_IMAGE_NOT_ALLOWED,
    WHO_MAY_CHANGE,
    AllowedSource,
    ChartSources,
    Registries,
    default_sources,
    parse_registries,
    unreadable_lines,
)
from kyma_gpu.api.conditions import PreflightReason
from kyma_gpu.api.models import GpuSpec
from kyma_gpu.plan.findings import Finding, Severity


@dataclass(frozen=True, slots=True)
class AllowedSources:
    """The allowed sources (chart sources and image registries) of the ConfigMap
    kyma-system/kyma-gpu-chart-sources, as the plan gets them."""

    sources: ChartSources = field(default_factory=default_sources)
    configured: bool = False
    """From the ConfigMap; False: the default (NVIDIA's repository only)."""
    error: str | None = None
    """The ConfigMap exists but its key is missing or invalid: no source is allowed."""
    registries: Registries = field(default_factory=Registries)
    """The image registry mirrors (the key `registries`); without it the charts' own only."""
    registries_error: str | None = None
    """The key `registries` is invalid: no mirror is allowed, and no Gpu is planned."""
    key: str = field(init=False)
    """A hashable fingerprint (the plan cache's key)."""

    def __post_init__(self) -> None:
        text = (
            f"{self.configured}|{self.error}|{self.sources.model_dump_json()}|"
            f"{self.registries}|{self.registries_error}"
        )
        object.__setattr__(self, "key", text)


def allowed_sources_of(config_map: Mapping[str, Any] | None) -> AllowedSources:
    """The ConfigMap's body (None: there is none) -> the allowed sources and registries."""
    if config_map is None:
        return AllowedSources()
    data = config_map.get("data") or {}
    registries, registries_error = _registries(data.get(REGISTRIES_KEY))
    sources, error = _sources(data.get(CONFIG_MAP_KEY))
    if CONFIG_MAP_KEY not in data and REGISTRIES_KEY not in data:
        error = f"it has no key {CONFIG_MAP_KEY}"
    return AllowedSources(sources, True, error, registries, registries_error)


def _sources(text: Any) -> tuple[ChartSources, str | None]:
    if text is None:  # a ConfigMap of registries only: the default chart source
        return default_sources(), None
    if not isinstance(text, str):
        return default_sources(), f"its key {CONFIG_MAP_KEY} is not text"
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        return default_sources(), f"its key {CONFIG_MAP_KEY} is not valid YAML"
    try:
        sources = ChartSources.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors()
        )
        return default_sources(), f"its key {CONFIG_MAP_KEY} is invalid: {problems}"
    unreadable = unreadable_lines(text, sources)
    if unreadable is not None:
        return (
            default_sources(),
            f"its key {CONFIG_MAP_KEY} is invalid: {unreadable} ({LINES_NOTE})",
        )
    return sources, None


def _registries(text: Any) -> tuple[Registries, str | None]:
    if text is None:
        return Registries(), None
    if not isinstance(text, str):
        return Registries(public=False), f"its key {REGISTRIES_KEY} is not text"
    try:
        return parse_registries(text), None
    except ValueError as err:
        return Registries(public=False), f"its key {REGISTRIES_KEY} is invalid: {err}"


@dataclass(frozen=True, slots=True)
class Wanted:
    """The chart source a Gpu asks for (spec.source with the module's defaults filled in)."""

    url: str
    chart_name: str
    version: str
    secret_ref: str | None
    insecure: bool


def allowed_by(
    wanted: Wanted, allowed_sources: AllowedSources, supported: tuple[str, ...]
) -> AllowedSource | str:
    """The allowed source that admits `wanted`, or why none does (the first clause of the
    refusal; `refusal` adds who can allow it and where)."""
    if allowed_sources.error is not None:
        return f"no chart source is allowed: {allowed_sources.error}"
    url = wanted.url.rstrip("/")
    source = next(
        (s for s in allowed_sources.sources.sources
         if s.url.rstrip("/") == url and s.chart_name == wanted.chart_name),
        None,
    )  # fmt: skip
    what = f"chart {wanted.chart_name} from {wanted.url}"
    if source is None:
        return f"{what} is not an allowed chart source"
    versions = source.operator_versions or supported
    if wanted.version not in versions:
        return f"version {wanted.version} of {what} is not allowed (allowed: {', '.join(versions)})"
    if wanted.secret_ref is not None and wanted.secret_ref not in source.secret_refs:
        listed = ", ".join(source.secret_refs) or "none"
        return (
            f"spec.source.secretRef {wanted.secret_ref} is not allowed for {what} "
            f"(allowed: {listed})"
        )
    if wanted.insecure and not source.insecure:
        return f"spec.source.insecure is not allowed for {what}"
    return source


def refusal(reason: str, namespace: str) -> str:
    """The whole message: what is refused, where the allowed sources are, who changes them."""
    return (
        f"{reason}; the allowed chart sources are the ConfigMap {namespace}/{CONFIG_MAP_NAME}, "
        f"key {CONFIG_MAP_KEY}, which only {WHO_MAY_CHANGE} can change "
        "(docs/security.md#chart-sources); nothing is applied"
    )


def source_findings(
    wanted: Wanted, allowed_sources: AllowedSources, supported: tuple[str, ...], namespace: str
) -> list[Finding]:
    allowed = allowed_by(wanted, allowed_sources, supported)
    if isinstance(allowed, AllowedSource):
        return []
    message = refusal(allowed, namespace)
    return [Finding(Severity.ERROR, PreflightReason.CHART_SOURCE_NOT_ALLOWED, message)]


def pinned_digest(
    wanted: Wanted, allowed_sources: AllowedSources, supported: tuple[str, ...]
) -> str | None:
    """The OCI manifest digest the allowed source pins for the wanted version, if any."""
    allowed = allowed_by(wanted, allowed_sources, supported)
    return allowed.digests.get(wanted.version) if isinstance(allowed, AllowedSource) else None


def image_findings(spec: GpuSpec, allowed_sources: AllowedSources) -> list[Finding]:
    """The registries the Gpu names against the administrator's list (the key registries)."""
    registries = allowed_sources.registries
    found: list[str] = []
    if allowed_sources.registries_error is not None:
        found.append(f"no image registry is allowed: the ConfigMap kyma-system/"
                     f"{CONFIG_MAP_NAME} is invalid: "
                     f"{allowed_sources.registries_error}")  # fmt: skip
    registry = spec.source.image_registry
    if registry is not None and registries.find(registry) is None:
        found.append(REGISTRY_NOT_ALLOWED.format(registry=registry))
    image = spec.components.vgpu_manager_image
    if image is not None and registries.holding(image) is None:
        found.append(VGPU_IMAGE_NOT_ALLOWED.format(image=image))
    if registry is None and not registries.public and not registries.mirrors:
        found.append("the charts' own registries are not allowed and no image registry mirror "
                     f"is listed (the ConfigMap kyma-system/{CONFIG_MAP_NAME}, key "
                     f"{REGISTRIES_KEY}); nothing is applied")  # fmt: skip
    reason = PreflightReason.IMAGE_REGISTRY_NOT_ALLOWED
    return [Finding(Severity.ERROR, reason, message) for message in dict.fromkeys(found)]


def platform_spec(spec: GpuSpec, allowed_sources: AllowedSources) -> GpuSpec:
    """The spec as the platform completes it: the first allowed chart source where NVIDIA's
    repository is not allowed and the Gpu names none; the first listed mirror where the
    charts' own registries are not allowed and the Gpu names none, and the mirror's pull
    Secrets. So the Gpu that KLM creates (an empty spec) works in a sovereign cluster."""
    return _platform_images(_platform_chart(spec, allowed_sources), allowed_sources)


def _platform_chart(spec: GpuSpec, allowed_sources: AllowedSources) -> GpuSpec:
    sources = allowed_sources.sources.sources
    nvidia = any(s.url.rstrip("/") == NVIDIA_REPOSITORY for s in sources)
    if spec.source.chart_repository is not None or allowed_sources.error is not None or nvidia:
        return spec
    first = sources[0]
    update = {"chart_repository": first.url, "chart_name": first.chart_name,
              "secret_ref": first.secret_refs[0] if first.secret_refs else None,
              "insecure": first.insecure}  # fmt: skip
    return spec.model_copy(update={"source": spec.source.model_copy(update=update)})


def _platform_images(spec: GpuSpec, allowed_sources: AllowedSources) -> GpuSpec:
    registries = allowed_sources.registries
    registry = spec.source.image_registry
    if registry is None and not registries.public and registries.mirrors:
        registry = registries.mirrors[0].registry
    mirror = registries.find(registry) if registry is not None else None
    if mirror is None or (registry == spec.source.image_registry and not mirror.pull_secrets):
        return spec
    secrets = list(dict.fromkeys((*spec.source.image_pull_secrets, *mirror.pull_secrets)))
    source = spec.source.model_copy(
        update={"image_registry": registry, "image_pull_secrets": secrets}
    )
    return spec.model_copy(update={"source": source})
