"""The chart rules the module narrows with a Flux post-renderer (issue 20, door 8)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kyma_gpu.plan.narrowing import NarrowingMismatch, apply, for_version, post_renderers
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.data_models import RuleNarrowing

POLICIES = ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]
GROUP = ["admissionregistration.k8s.io"]
CHART_RULE = {"apiGroups": GROUP, "resources": POLICIES,
              "verbs": ["get", "list", "watch", "create", "update", "delete"]}  # fmt: skip
PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}


def _narrowing(**changes: Any) -> RuleNarrowing:
    data: dict[str, Any] = {
        "chartVersions": ["v26.7.0"], "clusterRole": "gpu-operator", "index": 1,
        "rule": CHART_RULE, "unnamedVerbs": ["get", "list", "watch", "create"],
        "resourceNames": ["resourceslices-policy-nvidia-dra-driver"], "why": "door 8",
    }  # fmt: skip
    return RuleNarrowing.model_validate({**data, **changes})


def _role(rules: list[dict[str, Any]], name: str = "gpu-operator") -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules}  # fmt: skip


def test_the_rule_is_split_into_unnamed_reads_and_named_writes() -> None:
    (role,) = apply([_role([PODS, CHART_RULE])], [_narrowing()])
    assert role["rules"] == [
        PODS,
        {"apiGroups": GROUP, "resources": POLICIES,
         "verbs": ["get", "list", "watch", "create"]},
        {"apiGroups": GROUP, "resources": POLICIES, "verbs": ["update", "delete"],
         "resourceNames": ["resourceslices-policy-nvidia-dra-driver"]},
    ]  # fmt: skip


def test_the_documents_passed_in_stay_as_they_were() -> None:
    original = _role([PODS, CHART_RULE])
    apply([original], [_narrowing()])
    assert original["rules"] == [PODS, CHART_RULE]


@pytest.mark.parametrize(
    "rules",
    [[CHART_RULE, PODS], [PODS], [PODS, {**CHART_RULE, "verbs": ["get", "update", "delete"]}]],
)
def test_a_chart_that_differs_is_refused(rules: list[dict[str, Any]]) -> None:
    with pytest.raises(NarrowingMismatch, match="ClusterRole gpu-operator rule 1 is"):
        apply([_role(rules)], [_narrowing()])


def test_a_missing_role_is_refused() -> None:
    with pytest.raises(NarrowingMismatch, match="is not rendered"):
        apply([_role([PODS, CHART_RULE], name="other")], [_narrowing()])


def test_the_post_renderer_tests_before_it_changes() -> None:
    (renderer,) = post_renderers([_narrowing()])
    (patch,) = renderer["kustomize"]["patches"]
    assert patch["target"] == {"group": "rbac.authorization.k8s.io", "version": "v1",
                               "kind": "ClusterRole", "name": "gpu-operator"}  # fmt: skip
    ops = yaml.safe_load(patch["patch"])
    assert [o["op"] for o in ops] == ["test", "replace", "add"]
    assert ops[0] == {"op": "test", "path": "/rules/1", "value": CHART_RULE}
    assert ops[2]["path"] == "/rules/-"
    assert post_renderers([]) == []


@pytest.mark.parametrize(
    ("changes", "words"),
    [({"unnamedVerbs": ["get", "escalate"]}, "are not verbs of the rule"),
     ({"unnamedVerbs": list(CHART_RULE["verbs"])}, "nothing is narrowed"),
     ({"resourceNames": []}, "at least 1"),
     ({"chartVersions": ["26.7.0"]}, "pattern")],
)  # fmt: skip
def test_a_bad_narrowing_is_refused(changes: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        _narrowing(**changes)


def test_the_shipped_file_narrows_only_the_chart_that_needs_it() -> None:
    narrowings = Catalog().chart_rbac.narrowings
    assert [n.cluster_role for n in for_version(narrowings, "v26.7.0")] == ["gpu-operator"]
    assert for_version(narrowings, "v26.3.3") == ()
