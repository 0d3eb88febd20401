"""The Gpu CRD: generated from the models, committed as generated, and structural."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.api.crd import crd, crd_yaml
from kyma_gpu.api.values import allowlist

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


def test_crd_shape() -> None:
    doc = crd()
    assert doc["metadata"]["name"] == "gpus.gpu.kyma-project.io"
    spec = doc["spec"]
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == "Gpu"
    version = spec["versions"][0]
    assert version["name"] == "v1beta1"
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:6] == ["State", "Ready Nodes", "GPUs", "Driver", "Driver Version", "Chart"]
    schema = version["schema"]["openAPIV3Schema"]
    assert "self.metadata.name == 'gpu'" in schema["x-kubernetes-validations"][0]["rule"]
    props = schema["properties"]["spec"]["properties"]
    assert props["driver"]["properties"]["mode"]["enum"] == [
        "Auto",
        "Precompiled",
        "Preinstalled",
        "Upstream",
    ]
    assert "http://" in props["source"]["x-kubernetes-validations"][0]["rule"]
    values = props["values"]
    assert values["type"] == "object"
    assert set(values["properties"]) == set(allowlist().tree)
    status = schema["properties"]["status"]["properties"]
    assert status["state"]["enum"] == ["Ready", "Processing", "Warning", "Error", "Deleting"]
    for column in version["additionalPrinterColumns"]:
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
    from kyma_gpu.api.reference import reference_markdown

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


@pytest.mark.parametrize("allowed", allowlist().values, ids=lambda a: a.dotted)
def test_each_listed_value_is_in_the_schema_with_its_reason(allowed: Any) -> None:
    node = _schema()["properties"]["spec"]["properties"]["values"]
    for key in allowed.path:
        node = node["properties"][key]
    assert node["description"] == f"{allowed.type}: {allowed.why}"
