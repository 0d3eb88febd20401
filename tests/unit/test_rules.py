"""The values-rules engine: conditions, templates, the deep merge and its provenance."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.chart import image_reference
from kyma_gpu.rules.engine import (
    Provenance,
    RuleError,
    RuleSet,
    deep_merge,
    evaluate,
    matches,
    render,
)
from kyma_gpu_tools.chart_facts import chart_facts

CONTEXT: dict[str, Any] = {
    "driver.mode": "Precompiled",
    "driver.os": "gardenlinux",
    "driver.branch": "590",
    "driver.version": None,
    "cluster.gpuNodes": 2,
    "cluster.osFamilies": ["gardenlinux", "ubuntu"],
    "components.dcgmExporter": True,
    "source.imageRegistry": None,
    "source.imagePullSecrets": [],
    "installer.release": "1.17.0",
}


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        ({}, True),
        ({"driver.mode": "Precompiled"}, True),
        ({"driver.mode": "Upstream"}, False),
        ({"driver.mode": ["Precompiled", "PerPool"]}, True),
        ({"driver.mode": ["Upstream", "PerPool"]}, False),
        ({"driver.mode": {"not": "Upstream"}}, True),
        ({"driver.mode": {"not": "Precompiled"}}, False),
        ({"cluster.osFamilies": {"contains": "ubuntu"}}, True),
        ({"cluster.osFamilies": {"contains": "rhel"}}, False),
        ({"driver.os": {"contains": "garden"}}, False),  # contains is for lists, not substrings
        ({"driver.branch": {"exists": True}}, True),
        ({"driver.version": {"exists": True}}, False),
        ({"driver.version": {"exists": False}}, True),
        ({"source.imagePullSecrets": {"exists": True}}, False),
        ({"source.imagePullSecrets": {"not": []}}, False),
        ({"cluster.gpuNodes": 2}, True),
        ({"cluster.gpuNodes": "2"}, False),
        ({"components.dcgmExporter": True}, True),
        ({"driver.mode": "Precompiled", "driver.os": "ubuntu"}, False),
        ({"driver.mode": "Precompiled", "driver.os": "gardenlinux"}, True),
    ],
)
def test_matches(when: dict[str, Any], expected: bool) -> None:
    assert matches(when, CONTEXT) is expected


def test_an_unknown_context_key_is_an_error() -> None:
    with pytest.raises(RuleError, match=r"unknown context key 'driver\.flavour'; known: .*driver"):
        matches({"driver.flavour": "x"}, CONTEXT)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("${driver.branch}", "590"),
        ("${cluster.gpuNodes}", 2),
        ("${components.dcgmExporter}", True),
        ("${driver.version}", None),
        ("${cluster.osFamilies}", ["gardenlinux", "ubuntu"]),
        ("installer/${installer.release}/values.yaml", "installer/1.17.0/values.yaml"),
        ("${cluster.gpuNodes} nodes", "2 nodes"),
        ("${driver.mode}-${driver.branch}", "Precompiled-590"),
        ("{{ .Values.driver.version }}", "{{ .Values.driver.version }}"),
        (
            "{{ range .system.osrelease }}VERSION_ID=0\n{{ end }}",
            "{{ range .system.osrelease }}VERSION_ID=0\n{{ end }}",
        ),
        ("$driver.branch", "$driver.branch"),
        ("plain", "plain"),
        (7, 7),
        (None, None),
        (
            {"a": ["${driver.branch}", {"b": "${cluster.gpuNodes}"}], "c": False},
            {"a": ["590", {"b": 2}], "c": False},
        ),
    ],
)
def test_render(template: Any, expected: Any) -> None:
    result = render(template, CONTEXT)
    assert result == expected
    assert type(result) is type(expected)


def test_render_copies_values() -> None:
    context = {"list": ["a"]}
    rendered = render({"x": "${list}"}, context)
    rendered["x"].append("b")
    assert context["list"] == ["a"]


@pytest.mark.parametrize("template", ["${nope}", "prefix ${nope} suffix", {"a": ["${nope}"]}])
def test_render_unknown_key(template: Any) -> None:
    with pytest.raises(RuleError, match="unknown context key 'nope'"):
        render(template, CONTEXT)


def _merge(base: dict[str, Any], *fragments: tuple[str, Mapping[str, Any]]) -> Provenance:
    provenance: Provenance = {}
    for source, fragment in fragments:
        deep_merge(base, fragment, source, provenance)
    return provenance


def test_deep_merge_merges_mappings_and_replaces_the_rest() -> None:
    base: dict[str, Any] = {}
    provenance = _merge(
        base,
        ("a", {"driver": {"version": "590", "repository": "r1"}, "list": [1, 2]}),
        ("b", {"driver": {"version": "580"}, "list": [3]}),
    )
    assert base == {"driver": {"version": "580", "repository": "r1"}, "list": [3]}
    assert provenance == {"driver.version": "b", "driver.repository": "a", "list": "b"}


def test_deep_merge_replacing_a_subtree_forgets_its_leaves() -> None:
    base: dict[str, Any] = {}
    provenance = _merge(
        base,
        ("rule", {"devicePlugin": {"config": {"name": "x", "data": {"a": "1"}}}}),
        ("spec.values", {"devicePlugin": {"config": None}}),
    )
    assert base == {"devicePlugin": {"config": None}}
    assert provenance == {"devicePlugin.config": "spec.values"}


def test_deep_merge_scalar_becomes_mapping() -> None:
    base: dict[str, Any] = {}
    provenance = _merge(base, ("a", {"x": 1}), ("b", {"x": {"y": 2, "z": {}}}))
    assert base == {"x": {"y": 2, "z": {}}}
    assert provenance == {"x.y": "b", "x.z": "b"}


def test_deep_merge_empty_mapping_replaces() -> None:
    base: dict[str, Any] = {}
    provenance = _merge(base, ("a", {"x": {"y": 1}}), ("b", {"x": {}}))
    assert base == {"x": {}}
    assert provenance == {"x": "b"}


def test_deep_merge_keeps_no_reference_to_the_fragment() -> None:
    fragment: dict[str, Any] = {"a": {"b": [1]}}
    base: dict[str, Any] = {}
    _merge(base, ("a", fragment))
    fragment["a"]["b"].append(2)
    assert base == {"a": {"b": [1]}}


def _rules(*rules: Any, **extra: Any) -> dict[str, Any]:
    return {"rules": list(rules), **extra}


GOOD: dict[str, Any] = {"name": "ok", "values": {"a": 1}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "rules.yaml: missing key 'rules'"),
        ({"rules": []}, "rules.yaml: rules: List should have at least 1 item"),
        ({"rules": {"name": "x"}}, "rules.yaml: rules: Input should be a valid list"),
        (None, "rules.yaml: must be a mapping (got None)"),
        (_rules("x"), "rules/0: must be a mapping (got 'x')"),
        (_rules({"values": {}}), "rules/0: missing key 'name'"),
        (_rules({"name": "", "values": {}}), "rules/0 ('')/name: String should have at least 1"),
        (_rules(GOOD, GOOD), "rule 'ok' is defined twice"),
        (
            _rules({**GOOD, "value": {}}),
            "rules/0 ('ok'): unknown key 'value'; allowed: appendTo, forEach, item, name, values, "
            "valuesFile, when, why",
        ),
        (_rules({**GOOD, "when": ["a"]}), "rules/0 ('ok')/when: must be a mapping"),
        (_rules({**GOOD, "when": {"a": {"equals": 1}}}), "rules/0 ('ok')/when/a: a condition must"),
        (_rules({**GOOD, "when": {"a": {"not": 1, "exists": True}}}), "when/a: a condition must"),
        (_rules({**GOOD, "when": {"a": {"exists": 1}}}), "exists takes true or false; got 1"),
        (_rules({"name": "x"}), "rules/0 ('x'): needs exactly one of values, valuesFile, item"),
        (_rules({"name": "x", "values": {}, "valuesFile": "f"}), "needs exactly one"),
        (_rules({"name": "x", "item": {}}), "item needs forEach: pools and appendTo"),
        (_rules({"name": "x", "item": {}, "forEach": "pools"}), "item needs forEach"),
        (_rules({"name": "x", "item": {}, "forEach": "nodes", "appendTo": "l"}), "forEach: Input"),
        (
            _rules(GOOD, imageMirror={"when": "yes"}),
            "imageMirror/when: must be a mapping (got 'yes')",
        ),
        (_rules(GOOD, imageMirror={"if": {}}), "imageMirror: unknown key 'if'; allowed: when"),
    ],
)
def test_ruleset_errors(data: Any, message: str) -> None:
    with pytest.raises(RuleError, match=re.escape(message)):
        RuleSet.from_mapping(data)


def test_ruleset_from_mapping() -> None:
    rules = RuleSet.from_mapping(
        _rules(
            {"name": "a", "why": "because", "when": {"x": 1}, "values": {"k": "v"}},
            {"name": "b", "item": {"n": "${pool.name}"}, "forEach": "pools", "appendTo": "objs"},
            imageMirror={"when": {"source.imageRegistry": {"exists": True}}},
        )
    )
    assert [r.name for r in rules.rules] == ["a", "b"]
    assert rules.rules[0].why == "because"
    assert rules.mirror_when == {"source.imageRegistry": {"exists": True}}


def test_evaluate_in_order_with_pools_and_files() -> None:
    rules = RuleSet.from_mapping(
        _rules(
            {"name": "file", "valuesFile": "installer/${installer.release}/v.yaml"},
            {"name": "never", "when": {"driver.mode": "Upstream"}, "values": {"x": 0}},
            {"name": "branch", "values": {"driver": {"version": "${driver.branch}"}}},
            {
                "name": "pools",
                "forEach": "pools",
                "appendTo": "extraObjects",
                "item": {"name": "${pool.name}", "branch": "${driver.branch}"},
            },
        )
    ).rules
    reads: list[str] = []

    def read(path: str) -> Mapping[str, Any]:
        reads.append(path)
        return {"driver": {"version": 590, "repository": "r"}, "extraObjects": [{"name": "keep"}]}

    result = evaluate(rules, CONTEXT, [{"pool.name": "p1"}, {"pool.name": "p2"}], read)
    assert reads == ["installer/1.17.0/v.yaml"]
    assert result.applied == ("file", "branch", "pools")
    assert result.values == {
        "driver": {"version": "590", "repository": "r"},
        "extraObjects": [
            {"name": "keep"},
            {"name": "p1", "branch": "590"},
            {"name": "p2", "branch": "590"},
        ],
    }
    assert result.provenance == {
        "driver.version": "branch",
        "driver.repository": "file",
        "extraObjects": "pools",
    }


def test_the_module_rules_load(catalog: Catalog) -> None:
    names = [r.name for r in catalog.rules.rules]
    assert names[0] == "garden-linux-installer-values"
    assert len(names) == len(set(names))
    assert all(r.why for r in catalog.rules.rules), "every rule says why"


def test_chart_facts_and_image_reference() -> None:
    values = {
        "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
        "vgpuManager": {"repository": "", "image": "vgpu"},
        "operator": {"repository": "nvcr.io/nvidia", "image": "gpu-operator"},
        "toolkit": {"enabled": True},
    }
    subcharts = {"node-feature-discovery": {"image": {"repository": "registry.k8s.io/nfd/nfd"}}}
    facts = chart_facts("v1.0.0", values, subcharts)
    assert facts["defaultDriverVersion"] == "595.91.07"
    assert [i["path"] for i in facts["images"]] == [
        "driver",
        "node-feature-discovery.image",
        "operator",
    ]
    refs = [image_reference(i) for i in facts["images"]]
    assert refs == [
        "nvcr.io/nvidia/driver:595.91.07",
        "registry.k8s.io/nfd/nfd",
        "nvcr.io/nvidia/gpu-operator",
    ]


def test_deep_merge_into_an_empty_mapping_leaf() -> None:
    base: dict[str, Any] = {}
    provenance = _merge(base, ("a", {"x": {}}), ("b", {"x": {"y": 1}}))
    assert base == {"x": {"y": 1}}
    assert provenance == {"x.y": "b"}
