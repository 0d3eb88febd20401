"""Who picks the images (issue 31), the pure side: the administrator's registry list
(api/chart_sources.py), the plan's refusal and completion (plan/allowed.py), the image-bearing
keys of spec.values (api/values.py) and the generated admission policy
(kyma_gpu_tools/image_policy.py). The cluster side is tests/integration/test_image_registries.py
and test_rbac_editor.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.api import GpuSpec
from kyma_gpu.api.chart_sources import (
    REGISTRY_NOT_ALLOWED,
    AllowedRegistry,
    Registries,
    parse_registries,
)
from kyma_gpu.plan import allowed_sources_of, make_plan
from kyma_gpu.plan.allowed import image_findings, platform_spec
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu_tools.image_policy import images_policy_yaml
from tests.unit.builders import facts_of, node

ROOT = Path(__file__).resolve().parents[2]
MIRROR = "mirror.example/nvidia"


def allowed_sources(registries: str | None) -> Any:
    return allowed_sources_of({"data": {} if registries is None else {"registries": registries}})


def test_the_list_is_read_line_by_line() -> None:
    text = f"# a comment\n\n  {MIRROR}   pull-a pull-b\nother.example:5000\npublic\n"
    assert parse_registries(text) == Registries(
        (AllowedRegistry(MIRROR, ("pull-a", "pull-b")), AllowedRegistry("other.example:5000")),
        public=True,
    )
    assert parse_registries(MIRROR).public is False  # listed mirrors only


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("https://mirror.example", "line 1: 'https://mirror.example' is not a registry"),
        ("mirror.example Not_A_Secret", "line 1: 'Not_A_Secret' is not a Secret name"),
        ("ok.example\nmirror.example\tpull", "line 2: separate with spaces, not tabs"),
        ("\n".join(f"m{i}.example" for i in range(33)), "at most 32 registries, it lists 33"),
    ],
)
def test_a_bad_list_names_the_line(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_registries(text)
    found = allowed_sources(text)
    assert (found.registries_error or "").startswith(f"its key registries is invalid: {words}")
    assert not found.registries.public  # an invalid list allows nothing


def test_a_config_map_of_registries_only_keeps_the_default_chart_source() -> None:
    assert allowed_sources("public\n").error is None
    assert allowed_sources(None).error == "it has no key sources.yaml"


def _reasons(spec: dict[str, Any], registries: str | None) -> list[str]:
    return [
        f.message for f in image_findings(GpuSpec.model_validate(spec), allowed_sources(registries))
    ]


def test_the_plan_refuses_what_the_list_does_not_hold() -> None:
    listed = f"{MIRROR} pull\npublic"
    assert _reasons({"source": {"imageRegistry": MIRROR}}, listed) == []
    assert _reasons({"source": {"imageRegistry": "evil.example"}}, listed) == [
        REGISTRY_NOT_ALLOWED.format(registry="evil.example")
    ]
    assert _reasons({"source": {"imageRegistry": MIRROR}}, None) == [  # no ConfigMap: none
        REGISTRY_NOT_ALLOWED.format(registry=MIRROR)
    ]
    vgpu = {"components": {"vgpuManagerImage": f"{MIRROR}x/vgpu:1"}}
    assert len(_reasons(vgpu, listed)) == 1  # a prefix of a mirror is another registry
    assert _reasons({}, "") == [  # public not listed and no mirror: nothing can run
        "the charts' own registries are not allowed and no image registry mirror is listed "
        "(the ConfigMap kyma-system/kyma-gpu-chart-sources, key registries); nothing is applied"
    ]


def test_the_platform_completes_the_spec() -> None:
    only_mirrors = allowed_sources(f"{MIRROR} pull-a\nother.example")
    spec = platform_spec(GpuSpec(), only_mirrors)
    assert spec.source.image_registry == MIRROR  # the first listed one
    assert spec.source.image_pull_secrets == ["pull-a"]
    named = GpuSpec.model_validate(
        {"source": {"imageRegistry": MIRROR, "imagePullSecrets": ["own", "pull-a"]}}
    )
    assert platform_spec(named, only_mirrors).source.image_pull_secrets == ["own", "pull-a"]
    assert (
        platform_spec(GpuSpec(), allowed_sources(f"{MIRROR}\npublic")) == GpuSpec()
    )  # public stays


def test_a_default_gpu_in_a_sovereign_cluster_pulls_from_the_mirror_only() -> None:
    catalog = Catalog()
    plan = make_plan(GpuSpec(), facts_of(catalog.machine_types, node()), catalog,
                     allowed_sources=allowed_sources(f"{MIRROR} pull"))  # fmt: skip
    assert plan.preflight.verdict != "error", plan.preflight.findings
    repositories = [v["repository"] for v in _image_nodes(plan.values)]
    assert repositories, plan.values
    assert all(r.startswith(f"{MIRROR}/") for r in repositories), repositories


def _image_nodes(values: Any) -> list[dict[str, Any]]:
    found = []
    stack = [values]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            if isinstance(current.get("repository"), str):
                found.append(current)
            stack += list(current.values())
    return found


def test_the_committed_images_policy_is_the_generated_one() -> None:
    committed = ROOT / "config" / "admission" / "gpu_images_policy.yaml"
    assert committed.read_text(encoding="utf-8") == images_policy_yaml(), (
        "config/admission/gpu_images_policy.yaml is stale: run `make manifests`"
    )
    policy, binding = yaml.safe_load_all(images_policy_yaml())
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert binding["spec"]["paramRef"]["name"] == "kyma-gpu-chart-sources"


def test_the_default_gpu_takes_the_platforms_chart_source_too() -> None:
    """Where NVIDIA's repository is not allowed, the Gpu that names no chart source gets the
    first allowed one (with its first Secret): KLM's empty Gpu installs from the mirror."""
    sources = yaml.safe_dump(
        {
            "sources": [
                {
                    "kind": "OCIRepository",
                    "url": "oci://mirror.example/charts",
                    "secretRefs": ["chart-auth"],
                    "digests": {"v26.7.0": "sha256:" + "a" * 64},
                }
            ]
        }
    )
    found = allowed_sources_of(
        {"data": {"sources.yaml": sources, "registries": "mirror.example\n"}}
    )
    catalog = Catalog()
    plan = make_plan(GpuSpec(), facts_of(catalog.machine_types, node()), catalog,
                     allowed_sources=found)  # fmt: skip
    assert plan.preflight.verdict != "error", plan.preflight.findings
    source = plan.source
    assert source is not None
    assert source["kind"] == "OCIRepository"
    assert source["spec"]["url"] == "oci://mirror.example/charts/gpu-operator"
    assert source["spec"]["ref"]["digest"] == "sha256:" + "a" * 64
    assert source["spec"]["secretRef"] == {"name": "chart-auth"}
    with_nvidia = allowed_sources_of({"data": {"sources.yaml": yaml.safe_dump({"sources": [
        {"kind": "HelmRepository", "url": "https://helm.ngc.nvidia.com/nvidia"},
        {"kind": "OCIRepository", "url": "oci://mirror.example/charts"}]})}})  # fmt: skip
    assert platform_spec(GpuSpec(), with_nvidia) == GpuSpec()  # NVIDIA's stays the default
