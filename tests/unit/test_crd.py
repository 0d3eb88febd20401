"""The Gpu CRD: generated from the models, committed as generated, and structural."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.api.values import default_allowlist
from kyma_gpu_tools.crd import crd, crd_yaml

ALLOWLIST = default_allowlist()  # the module's list, as the CRD's schema is generated from it

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "config" / "crd" / "bases" / "gpu.kyma-project.io_gpus.yaml"
FORBIDDEN = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "definitions", "title", "const"}


def test_the_committed_crd_is_the_generated_one() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == crd_yaml(), (
        "config/crd/bases/gpu.kyma-project.io_gpus.yaml is stale: regenerate it with "
        "`kyma-gpu crd > config/crd/bases/gpu.kyma-project.io_gpus.yaml` (make manifests)"
    )


def test_the_yaml_is_the_dict() -> None:
    assert yaml.safe_load(crd_yaml()) == crd()


def _schemas(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, prop in (node.get("properties") or {}).items():
        yield from _schemas(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _schemas(node["items"], f"{path}[]")


def _schema() -> dict[str, Any]:
    version = crd()["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


@pytest.mark.parametrize(("path", "node"), list(_schemas(_schema(), "")))
def test_the_schema_is_structural(path: str, node: dict[str, Any]) -> None:
    if node.get("x-kubernetes-int-or-string"):
        assert node["anyOf"] == INT_OR_STRING, path  # the one anyOf a structural schema allows
        node = {k: v for k, v in node.items() if k != "anyOf"} | {"type": "int-or-string"}
    assert "type" in node, f"{path or '<root>'} has no type"
    assert not FORBIDDEN & set(node), f"{path}: {sorted(FORBIDDEN & set(node))}"
    if "properties" in node:
        assert node["type"] == "object", path
        assert "additionalProperties" not in node, path
    if node["type"] == "array":
        assert isinstance(node.get("items"), dict), path
    if node.get("x-kubernetes-preserve-unknown-fields"):
        assert node["type"] == "object", path
    for key in ("default", "enum"):
        if key in node:
            assert node[key] is not None, path


def _version() -> dict[str, Any]:
    version: dict[str, Any] = crd()["spec"]["versions"][0]
    return version


def _spec_properties() -> dict[str, Any]:
    props: dict[str, Any] = _schema()["properties"]["spec"]["properties"]
    return props


def _status_properties() -> dict[str, Any]:
    props: dict[str, Any] = _schema()["properties"]["status"]["properties"]
    return props


def test_the_crd_is_named_for_the_group_and_plural() -> None:
    assert crd()["metadata"]["name"] == "gpus.gpu.kyma-project.io"


def test_the_gpu_is_cluster_scoped() -> None:
    assert crd()["spec"]["scope"] == "Cluster"


def test_the_kind_is_gpu() -> None:
    assert crd()["spec"]["names"]["kind"] == "Gpu"


def test_the_served_version_is_v1beta1() -> None:
    assert _version()["name"] == "v1beta1"


def test_the_status_is_a_subresource() -> None:
    assert _version()["subresources"] == {"status": {}}


def test_kubectl_get_shows_the_state_nodes_gpus_driver_and_chart_first() -> None:
    columns = [c["name"] for c in _version()["additionalPrinterColumns"]]
    assert columns[:6] == ["State", "Ready Nodes", "GPUs", "Driver", "Driver Version", "Chart"]


def test_the_one_gpu_must_be_named_gpu() -> None:
    assert "self.metadata.name == 'gpu'" in _schema()["x-kubernetes-validations"][0]["rule"]


def test_the_driver_modes_are_the_four_documented_ones() -> None:
    assert _spec_properties()["driver"]["properties"]["mode"]["enum"] == [
        "Auto",
        "Precompiled",
        "Preinstalled",
        "Upstream",
    ]


def test_a_chart_source_over_plain_http_is_validated() -> None:
    assert "http://" in _spec_properties()["source"]["x-kubernetes-validations"][0]["rule"]


def test_spec_values_is_an_object() -> None:
    assert _spec_properties()["values"]["type"] == "object"


def test_spec_values_holds_the_allowlists_fields() -> None:
    assert set(_spec_properties()["values"]["properties"]) == set(ALLOWLIST.tree)


def test_the_states_are_kymas_module_states() -> None:
    assert _status_properties()["state"]["enum"] == [
        "Ready",
        "Processing",
        "Warning",
        "Error",
        "Deleting",
    ]


def test_every_status_printer_column_shows_a_status_field() -> None:
    status = _status_properties()
    for column in _version()["additionalPrinterColumns"]:
        field = column["jsonPath"].rsplit(".", 1)[-1]
        if column["jsonPath"].startswith(".status."):
            assert field in status, column


def test_conditions_are_a_map_by_type() -> None:
    """One condition per type: server-side apply merges them by type, and `kubectl wait
    --for=condition=Ready` finds the one."""
    version = crd()["spec"]["versions"][0]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    conditions = status["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]


def test_descriptions_are_single_spaced() -> None:
    for path, node in _schemas(_schema(), ""):
        text = node.get("description", "")
        if "\n" not in text:
            assert "  " not in text, path


def test_the_committed_reference_is_the_generated_one() -> None:
    from kyma_gpu_tools.reference import reference_markdown

    committed = REPO / "docs" / "crd-reference.md"
    assert committed.read_text(encoding="utf-8") == reference_markdown(), (
        "docs/crd-reference.md is stale: regenerate it with `make manifests`"
    )


def test_spec_values_preserves_nothing_the_allowlist_does_not_name() -> None:
    """No unknown field survives anywhere below spec.values: the API server prunes it (or
    refuses it under strict field validation)."""
    values = _schema()["properties"]["spec"]["properties"]["values"]
    for path, node in _schemas(values, "spec.values"):
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        if node.get("type") == "object" and "properties" not in node:
            assert path.endswith(("additionalLabels", "featureGates")), f"{path}: an open map"


@pytest.mark.parametrize("allowed", ALLOWLIST.values, ids=lambda a: a.dotted)
def test_each_listed_value_is_in_the_schema_with_its_reason(allowed: Any) -> None:
    node = _schema()["properties"]["spec"]["properties"]["values"]
    for key in allowed.path:
        node = node["properties"][key]
    assert node["description"] == f"{allowed.type}: {allowed.why}"


@pytest.mark.parametrize("hint", [h for h in ALLOWLIST.hints if h.use], ids=lambda h: h.use)
def test_each_field_a_refusal_points_to_is_a_field_of_the_gpu(hint: Any) -> None:
    """values-allowlist.yaml's `instead`: a renamed field cannot leave a refusal pointing
    nowhere."""
    node: dict[str, Any] = {"properties": {"spec": {"properties": _spec_properties()}}}
    for key in hint.use.split("."):
        assert key in (node.get("properties") or {}), f"{hint.use}: no {key}"
        node = node["properties"][key]
