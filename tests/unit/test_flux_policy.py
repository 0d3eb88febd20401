"""The chart sources at admission (issue 32, finding 4): the generated policies, and the line
reading of sources.yaml that the policy does in CEL and the plan in Python.

The real API server runs the policies in tests/integration/test_flux_admission.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kyma_gpu.api.chart_sources import ChartSources, listed_lines, unreadable_lines
from kyma_gpu.plan.allowed import allowed_sources_of
from kyma_gpu.plan.flux_objects import CHART_SOURCE_LABEL, FluxSettings, flux_objects
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu_tools.flux_policy import RELEASE, RELEASE_ACCOUNT, TARGET_NAMESPACE, flux_policy_yaml

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = Catalog(ROOT / "values-rules").defaults


def test_the_committed_policy_is_the_generated_one() -> None:
    committed = ROOT / "config" / "admission" / "flux_policy.yaml"
    assert committed.read_text(encoding="utf-8") == flux_policy_yaml(), (
        "config/admission/flux_policy.yaml is stale: run `make manifests`"
    )


def test_the_policy_names_are_the_defaults() -> None:
    assert DEFAULTS.release_name == RELEASE
    assert DEFAULTS.target_namespace == TARGET_NAMESPACE
    assert DEFAULTS.flux_settings.service_account_name == RELEASE_ACCOUNT


BLOCK = """\
sources:
- kind: OCIRepository
  url: "oci://registry.example/charts/"
  chartName: my-gpu-operator
  insecure: true
  secretRefs:
  - pull-a
  - 'pull-b'
"""
FLOW_REFS = """\
sources:
- url: https://charts.example/nvidia
  kind: HelmRepository
  secretRefs: [a, "b"]
"""


def test_listed_lines() -> None:
    lines = listed_lines(BLOCK)
    assert lines.urls == {"oci://registry.example/charts"}
    assert lines.chart_names == {"my-gpu-operator"}
    assert {"pull-a", "pull-b"} <= lines.items
    assert lines.insecure
    flow = listed_lines(FLOW_REFS)
    assert flow.urls == {"https://charts.example/nvidia"}
    assert {"a", "b"} <= flow.items
    assert not flow.insecure


@pytest.mark.parametrize("text", [BLOCK, FLOW_REFS])
def test_block_style_reads_the_same_both_ways(text: str) -> None:
    assert unreadable_lines(text, ChartSources.model_validate(yaml.safe_load(text))) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("sources: [{kind: HelmRepository, url: 'https://c.example'}]", "write the url"),
        ("sources:\n- {kind: HelmRepository, url: 'https://c.example', insecure: false}\n",
         "write the url"),
        ("sources:\n- kind: HelmRepository\n  url: https://c.example\n  chartName: x\n"
         "  secretRefs: [a]\n  insecure: false\n", None),
        ("sources:\n- kind: HelmRepository\n  url: http://c.example\n  insecure: !!bool true\n",
         "insecure: true"),
    ],
)  # fmt: skip
def test_what_the_policy_cannot_read_the_plan_refuses(text: str, says: str | None) -> None:
    allowed_sources = allowed_sources_of({"data": {"sources.yaml": text}})
    if says is None:
        assert allowed_sources.error is None
        return
    assert allowed_sources.error is not None
    assert says in allowed_sources.error
    assert "reads sources.yaml line by line" in allowed_sources.error


def test_only_other_sources_are_labelled_for_the_administrators_list() -> None:
    settings = FluxSettings.from_defaults(DEFAULTS)

    def labels(repository: str, **more: object) -> list[dict[str, str]]:
        objs = flux_objects(settings, chart_repository=repository, chart_name="gpu-operator",
                            chart_version="v26.7.0", insecure=bool(more.get("insecure")),
                            secret_ref=more.get("secret_ref"), values={}, owner=None)  # type: ignore[arg-type]  # fmt: skip
        return [o["metadata"]["labels"] for o in objs]

    nvidia = DEFAULTS.chart_repository
    assert all(CHART_SOURCE_LABEL not in label for label in labels(nvidia))
    assert all(CHART_SOURCE_LABEL not in label for label in labels(nvidia + "/"))
    for repository, more in (("https://mirror.example", {}), (nvidia, {"secret_ref": "s"}),
                             ("oci://mirror.example/charts", {})):  # fmt: skip
        assert all(label[CHART_SOURCE_LABEL] == "administrator"
                   for label in labels(repository, **more))  # fmt: skip
