"""Is the chart the Gpu names one the platform allows? Pure.

The allowed sources are the ConfigMap kyma-system/kyma-gpu-chart-sources (api/sources.py),
which the manager watches and hands to the plan as plain data (`Origins`); `kyma-gpu plan
--sources` reads the same ConfigMap from a file. A Gpu whose spec.source names another
repository, chart, version or Secret, or plain http:// the source does not allow, gets a fleet
error (`ChartSourceNotAllowed`): nothing is written to Flux.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from kyma_gpu.api.conditions import PreflightReason
from kyma_gpu.api.sources import (
    CONFIG_MAP_KEY,
    CONFIG_MAP_NAME,
    DEFAULT_SOURCES,
    WHO_MAY_CHANGE,
    AllowedSource,
    ChartSources,
)
from kyma_gpu.plan.findings import Finding, Severity


@dataclass(frozen=True, slots=True)
class Origins:
    """The allowed chart sources, as the plan gets them."""

    sources: ChartSources = DEFAULT_SOURCES
    configured: bool = False
    """From the ConfigMap; False: the default (NVIDIA's repository only)."""
    error: str | None = None
    """The ConfigMap exists but its key is missing or invalid: no source is allowed."""
    key: str = field(init=False)
    """A hashable fingerprint (the plan cache's key)."""

    def __post_init__(self) -> None:
        text = f"{self.configured}|{self.error}|{self.sources.model_dump_json()}"
        object.__setattr__(self, "key", text)


def origins_of(config_map: Mapping[str, Any] | None) -> Origins:
    """The ConfigMap's body (None: there is none) -> the allowed sources."""
    if config_map is None:
        return Origins()
    text = (config_map.get("data") or {}).get(CONFIG_MAP_KEY)
    if not isinstance(text, str):
        return Origins(configured=True, error=f"it has no key {CONFIG_MAP_KEY}")
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        return Origins(configured=True, error=f"its key {CONFIG_MAP_KEY} is not valid YAML")
    try:
        return Origins(ChartSources.model_validate(data), configured=True)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors()
        )
        return Origins(configured=True, error=f"its key {CONFIG_MAP_KEY} is invalid: {problems}")


@dataclass(frozen=True, slots=True)
class Wanted:
    """The chart source a Gpu asks for (spec.source with the module's defaults filled in)."""

    url: str
    chart_name: str
    version: str
    secret_ref: str | None
    insecure: bool


def allowed_by(wanted: Wanted, origins: Origins, supported: tuple[str, ...]) -> AllowedSource | str:
    """The allowed source that admits `wanted`, or why none does (the first clause of the
    refusal; `refusal` adds who can allow it and where)."""
    if origins.error is not None:
        return f"no chart source is allowed: {origins.error}"
    url = wanted.url.rstrip("/")
    source = next(
        (s for s in origins.sources.sources
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


def origin_findings(
    wanted: Wanted, origins: Origins, supported: tuple[str, ...], namespace: str
) -> list[Finding]:
    allowed = allowed_by(wanted, origins, supported)
    if isinstance(allowed, AllowedSource):
        return []
    message = refusal(allowed, namespace)
    return [Finding(Severity.ERROR, PreflightReason.CHART_SOURCE_NOT_ALLOWED, message)]


def pinned_digest(wanted: Wanted, origins: Origins, supported: tuple[str, ...]) -> str | None:
    """The OCI manifest digest the allowed source pins for the wanted version, if any."""
    allowed = allowed_by(wanted, origins, supported)
    return allowed.digests.get(wanted.version) if isinstance(allowed, AllowedSource) else None
