"""The allowed chart sources (plan/allowed.py): parsing the ConfigMap and matching a Gpu's
spec.source against it. Pure; the cluster side is tests/integration/test_chart_sources.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.api import GpuSpec
from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME, AllowedSource
from kyma_gpu.plan import AllowedSources, allowed_sources_of, make_plan
from kyma_gpu.plan.allowed import Wanted, allowed_by, refusal
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import allowing, facts_of, node

ROOT = Path(__file__).resolve().parents[2]
SUPPORTED = ("v26.3.3", "v26.7.0")
NVIDIA = "https://helm.ngc.nvidia.com/nvidia"
MIRROR = "oci://registry.example/mirror/charts"
DIGEST = "sha256:" + "ab" * 32


def wanted(url: str = NVIDIA, **more: Any) -> Wanted:
    fields: dict[str, Any] = {"chart_name": "gpu-operator", "version": "v26.7.0",
                              "secret_ref": None, "insecure": False, **more}  # fmt: skip
    return Wanted(url=url, **fields)


def test_the_default_is_nvidia_with_the_supported_versions() -> None:
    for version in SUPPORTED:
        assert isinstance(
            allowed_by(wanted(version=version), AllowedSources(), SUPPORTED), AllowedSource
        )
    assert isinstance(allowed_by(wanted(NVIDIA + "/"), AllowedSources(), SUPPORTED), AllowedSource)
    assert allowed_by(wanted(version="v99.0.0"), AllowedSources(), SUPPORTED) == (
        f"version v99.0.0 of chart gpu-operator from {NVIDIA} is not allowed "
        "(allowed: v26.3.3, v26.7.0)"
    )


@pytest.mark.parametrize(
    ("asked", "clause"),
    [
        (wanted(MIRROR), f"chart gpu-operator from {MIRROR} is not an allowed chart source"),
        (wanted(chart_name="evil"), f"chart evil from {NVIDIA} is not an allowed chart source"),
        (wanted(NVIDIA + "-evil"), f"chart gpu-operator from {NVIDIA}-evil is not an allowed "
                                   "chart source"),
        (wanted(secret_ref="platform-auth"),
         f"spec.source.secretRef platform-auth is not allowed for chart gpu-operator from "
         f"{NVIDIA} (allowed: none)"),
        (wanted(insecure=True), f"spec.source.insecure is not allowed for chart gpu-operator "
                                f"from {NVIDIA}"),
    ],
)  # fmt: skip
def test_anything_else_is_refused(asked: Wanted, clause: str) -> None:
    assert allowed_by(asked, AllowedSources(), SUPPORTED) == clause


def test_a_mirror_allows_its_versions_and_secrets_only() -> None:
    allowed_sources = allowing({"kind": "OCIRepository", "url": MIRROR,
                                "operatorVersions": ["v26.3.3"], "secretRefs": ["mirror-auth"],
                                "digests": {"v26.3.3": DIGEST}})  # fmt: skip
    asked = wanted(MIRROR, version="v26.3.3", secret_ref="mirror-auth")
    ok = allowed_by(asked, allowed_sources, SUPPORTED)
    assert isinstance(ok, AllowedSource)
    assert ok.digests == {"v26.3.3": DIGEST}
    assert "not allowed (allowed: v26.3.3)" in str(
        allowed_by(wanted(MIRROR), allowed_sources, SUPPORTED)
    )
    other = allowed_by(
        wanted(MIRROR, version="v26.3.3", secret_ref="x"), allowed_sources, SUPPORTED
    )
    assert "(allowed: mirror-auth)" in str(other)
    # the mirror's Secret is not NVIDIA's: each source lists its own
    assert "not allowed" in str(
        allowed_by(wanted(secret_ref="mirror-auth"), allowed_sources, SUPPORTED)
    )


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({}, "it has no key sources.yaml"),
        ({"sources.yaml": "sources: [\n"}, "its key sources.yaml is not valid YAML"),
        ({"sources.yaml": "sources: [{kind: OCIRepository, url: 'https://x.example'}]"},
         "kind OCIRepository does not match the URL scheme https://"),
        ({"sources.yaml": "sources: [{kind: HelmRepository, url: 'http://x.example'}]"},
         "a plain http:// URL needs insecure: true"),
        ({"sources.yaml": "sources: [{kind: HelmRepository, url: 'https://x.example', "
                          "digests: {v26.7.0: 'sha256:" + "0" * 64 + "'}}]"},
         "digests pin OCI charts only"),
        ({"sources.yaml": "sources: [{kind: HelmRepository, url: 'https://x.example', "
                          "secretRef: a}]"}, "Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_a_broken_config_map_allows_nothing(data: dict[str, str], error: str) -> None:
    allowed_sources = allowed_sources_of({"kind": "ConfigMap", "data": data})
    assert error in str(allowed_sources.error), allowed_sources.error
    said = allowed_by(wanted(), allowed_sources, SUPPORTED)
    assert str(said).startswith("no chart source is allowed: ")


def test_the_refusal_says_where_and_who() -> None:
    message = refusal("x", "kyma-system")
    assert message == (
        f"x; the allowed chart sources are the ConfigMap kyma-system/{CONFIG_MAP_NAME}, key "
        "sources.yaml, which only a cluster administrator can change "
        "(docs/security.md#chart-sources); nothing is applied"
    )


def test_the_plan_refuses_and_writes_nothing(catalog: Catalog) -> None:
    spec = GpuSpec.model_validate({"source": {"chartRepository": MIRROR, "secretRef": "a"}})
    plan = make_plan(spec, facts_of(catalog.machine_types, node()), catalog)
    first = plan.preflight.findings[0]
    assert (str(first.severity), str(first.reason)) == ("error", "ChartSourceNotAllowed")
    assert plan.objects == ()
    pinned = allowing({"kind": "OCIRepository", "url": MIRROR, "secretRefs": ["a"],
                       "digests": {"v26.7.0": DIGEST}})  # fmt: skip
    plan = make_plan(spec, facts_of(catalog.machine_types, node()), catalog, None, pinned)
    assert plan.source is not None
    assert plan.source["spec"]["ref"] == {"tag": "v26.7.0", "digest": DIGEST}


def test_the_supported_versions_are_the_chart_facts(catalog: Catalog) -> None:
    assert catalog.chart_versions() == SUPPORTED


def test_the_sample_config_map_parses() -> None:
    sample = yaml.safe_load((ROOT / "config" / "samples" / "chart_sources.yaml").read_text())
    allowed_sources = allowed_sources_of(sample)
    assert allowed_sources.error is None
    assert [s.kind for s in allowed_sources.sources.sources] == ["HelmRepository", "OCIRepository"]
