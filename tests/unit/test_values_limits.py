"""spec.values limits (api/values.py) and the admission policy generated from them
(api/policy.py). The API server's side of the same table is tests/integration/test_admission.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kyma_gpu.api.admission import admission_message
from kyma_gpu.api.models import GpuSpec
from kyma_gpu.api.policy import policy, policy_yaml
from kyma_gpu.api.values import MAX_DEPTH, MAX_ENTRIES, MAX_TEXT, values_error

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "config" / "admission" / "gpu_values_policy.yaml"


def deep(levels: int, leaf: Any = "x") -> Any:
    node = leaf
    for _ in range(levels):
        node = {"a": node}
    return node


def test_the_committed_policy_is_the_generated_one() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == policy_yaml(), (
        "config/admission/gpu_values_policy.yaml is stale: run `make manifests`"
    )


def test_the_policy_walks_every_level_the_model_walks() -> None:
    names = [v["name"] for v in policy()["spec"]["variables"]]
    assert names[: MAX_DEPTH + 1] == [f"v{i}" for i in range(MAX_DEPTH + 1)]
    assert f"variables.v{MAX_DEPTH}.all(" in policy()["spec"]["validations"][0]["expression"]


def test_the_policy_is_valid_yaml_of_two_objects() -> None:
    kinds = [d["kind"] for d in yaml.safe_load_all(policy_yaml())]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


@pytest.mark.parametrize(
    ("values", "fine"),
    [
        (deep(MAX_DEPTH), True),
        (deep(MAX_DEPTH + 1), False),
        (deep(MAX_DEPTH, {}), True),  # an empty map at the last level holds nothing deeper
        (deep(300), False),
        ({"x": list(range(MAX_ENTRIES - 1))}, True),
        ({"x": list(range(MAX_ENTRIES))}, False),
        ({"x": "y" * (MAX_TEXT - 1)}, True),
        ({"x": "y" * MAX_TEXT}, False),
        ({"a": "tab\tis fine"}, True),
        ({"a": "IfNotPresent\n---\nkind: ClusterRoleBinding"}, False),
        ({"a": "a\rb"}, False),
        ({"a": "a\u2028b"}, False),
        ({"a": "a\x85b"}, False),
        ({"a": "a\x00b"}, False),
        ({"a": "a\ufeffb"}, False),
        ({"labels": {"a\nb": "c"}}, False),
        ({"devicePlugin": {"config": {"data": {"any": "version: v1\nsharing: {}\n"}}}}, True),
        ({"migManager": {"config": {"data": {"config.yaml": "a\nb"}}}}, True),
        ({"dcgmExporter": {"config": {"data": "DCGM_FI_DEV_SM_CLOCK, gauge, x\n"}}}, True),
        ({"dcgmExporter": {"config": {"data": "a\r\nb"}}}, False),
        ({"devicePlugin": {"config": {"data": {"any": {"nested": "a\nb"}}}}}, False),
        ({"devicePlugin": {"config": {"name": "a\nb"}}}, False),
        # the ConfigMap names: DNS names, so they rename that ConfigMap and nothing else
        ({"devicePlugin": {"config": {"name": "kygpu-sharing.v2"}}}, True),
        ({"migManager": {"config": {"name": "Not A Name"}}}, False),
        ({"dcgmExporter": {"config": {"name": "x: y"}}}, False),
        ({"dcgmExporter": {"config": {"name": ["a"]}}}, False),
        ({"devicePlugin": {"config": {"name": "a" * 254}}}, False),
    ],
)
def test_limits(values: Any, fine: bool) -> None:
    assert (values_error(values) is None) is fine


def test_a_deep_spec_is_refused_by_the_model_in_the_api_servers_words() -> None:
    with pytest.raises(ValidationError) as err:
        GpuSpec.model_validate({"values": deep(300)})
    message = admission_message(err.value)
    assert message.startswith("spec.values." + ".".join(["a"] * MAX_DEPTH) + ": Invalid value: ")
    assert f"at most {MAX_DEPTH} levels deep" in message


def test_a_refused_string_is_shown_up_to_its_first_bad_character() -> None:
    with pytest.raises(ValidationError) as err:
        GpuSpec.model_validate(
            {"values": {"operator": {"priorityClassName": "x {owner} {message}\n---"}}}
        )
    assert 'after "x {owner} {message}"' in admission_message(err.value)


@pytest.mark.parametrize(
    "values",
    [
        {"node-feature-discovery": {"nameOverride": "x"}},
        {"node-feature-discovery": {"fullnameOverride": "x"}},
        {"node-feature-discovery": {"master": {"serviceAccount": {"name": "x"}}}},
        {"node-feature-discovery": {"worker": {"serviceAccount": {"name": "x"}}}},
        {"node-feature-discovery": {"gc": {"serviceAccount": {"name": "x"}}}},
        {"node-feature-discovery": {"topologyUpdater": {"serviceAccount": {"name": "x"}}}},
    ],
)
def test_values_that_rename_release_objects_are_refused(values: Any) -> None:
    """The release account writes and binds the chart's RBAC objects by their chart names
    (config/rbac/release_rbac.yaml): a value that renames them would fail the install at
    best, so the model and admission refuse it in one sentence."""
    with pytest.raises(ValidationError) as err:
        GpuSpec.model_validate({"values": values})
    assert "renames objects of the release" in admission_message(err.value)
