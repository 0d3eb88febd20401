"""Generate the CustomResourceDefinition of `Gpu` from the pydantic models.

The CRD is never edited by hand: `make manifests` writes it to config/, and a test fails
when the committed file differs from what this module generates.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import TypeAdapter

from kyma_gpu.api.models import (
    API_GROUP,
    API_VERSION,
    HTTP_NEEDS_INSECURE,
    KIND,
    PLURAL,
    SINGLETON_NAME,
    VGPU_NEEDS_IMAGE,
    GpuSpec,
    GpuStatus,
)
from kyma_gpu.api.operations import PROFILE_NAME_RESERVED, REPLICAS_NEEDED, TIME_SLICING_ONLY
from kyma_gpu.api.resources import module_labels
from kyma_gpu.api.values import (
    GATES_RULE,
    LABEL_VALUE_PATTERN,
    LABELS_RULE,
    MAX_LABELS,
    PYTHON_TYPES,
    Allowed,
    Tree,
    ValueType,
)
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.yamlio import dump

SINGLETON_MESSAGE = f"the Gpu resource is a singleton: metadata.name must be '{SINGLETON_NAME}'"
"""Said by the CEL rule on the Gpu and by `kyma-gpu plan`."""

_Rules = tuple[Mapping[str, str], ...]

_DROP = frozenset({"title", "additionalProperties", "x-kyma-values"})

# Validation that JSON schema cannot say, checked by the API server (CEL).
_ROOT_RULES: _Rules = (
    MappingProxyType({
        "rule": f"self.metadata.name == '{SINGLETON_NAME}'",
        "message": SINGLETON_MESSAGE,
    }),
)  # fmt: skip
_SOURCE_RULES: _Rules = (
    MappingProxyType({
        "rule": "!has(self.chartRepository) || !self.chartRepository.startsWith('http://')"
        " || (has(self.insecure) && self.insecure)",
        "message": HTTP_NEEDS_INSECURE,
    }),
)  # fmt: skip

_SHARING_RULES: _Rules = (
    MappingProxyType({
        "rule": "!has(self.mode) || self.mode == 'None' || has(self.replicas)",
        "message": REPLICAS_NEEDED,
    }),
    MappingProxyType({
        "rule": "!(has(self.failRequestsGreaterThanOne) && self.failRequestsGreaterThanOne)"
        " || (has(self.mode) && self.mode == 'TimeSlicing')",
        "message": TIME_SLICING_ONLY,
    }),
)  # fmt: skip
_PROFILES_RULE: Mapping[str, str] = MappingProxyType({
    "rule": "!has(self.profiles) || self.profiles.all(p, p.name != 'default')",
    "message": PROFILE_NAME_RESERVED,
})  # fmt: skip
_COMPONENTS_RULES: _Rules = (
    MappingProxyType({
        "rule": "!(has(self.vgpuManager) && self.vgpuManager) || has(self.vgpuManagerImage)",
        "message": VGPU_NEEDS_IMAGE,
    }),
)  # fmt: skip


def _rules(rules: _Rules) -> list[dict[str, str]]:
    """CEL rules as the CRD's YAML holds them."""
    return [dict(rule) for rule in rules]


def _add_rules(spec: dict[str, Any]) -> None:
    """The CEL rules that mirror the models' own validators."""
    props = spec["properties"]
    props["source"]["x-kubernetes-validations"] = _rules(_SOURCE_RULES)
    props["components"]["x-kubernetes-validations"] = _rules(_COMPONENTS_RULES)
    sharing = props["sharing"]
    sharing["x-kubernetes-validations"] = _rules((*_SHARING_RULES, _PROFILES_RULE))
    sharing["properties"]["profiles"]["items"]["x-kubernetes-validations"] = _rules(_SHARING_RULES)


def _values_schema(description: str) -> dict[str, Any]:
    """spec.values: exactly the allowlist's values (values-rules/values-allowlist.yaml), typed,
    with nothing preserved, so the API server prunes (or, under strict field validation,
    names) every other key."""
    out = _object(values_tree(Catalog().values_allowlist.tree))
    out["description"] = " ".join(description.split())
    return out


def values_tree(tree: Tree) -> dict[str, Any]:
    """The properties of one level of the allowlist's tree."""
    return {
        key: _leaf(sub) if isinstance(sub, Allowed) else _object(values_tree(sub))
        for key, sub in tree.items()
    }


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


_MAPS: Mapping[ValueType, tuple[Mapping[str, Any], Mapping[str, str]]] = MappingProxyType({
    ValueType.LABELS: (
        MappingProxyType({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN}),
        LABELS_RULE,
    ),
    ValueType.FEATURE_GATES: (MappingProxyType({"type": "boolean"}), GATES_RULE),
})  # fmt: skip
"""The map types: their values' schema and the CEL rule on their keys (a structural schema
has no propertyNames)."""


def _leaf(allowed: Allowed) -> dict[str, Any]:
    if allowed.type in _MAPS:
        values, keys = _MAPS[allowed.type]
        schema: dict[str, Any] = {"type": "object", "maxProperties": MAX_LABELS,
                                  "additionalProperties": dict(values),
                                  "x-kubernetes-validations": [dict(keys)]}  # fmt: skip
    else:
        raw = TypeAdapter(PYTHON_TYPES[allowed.type]).json_schema(by_alias=True, mode="validation")
        schema = _structural(raw, raw.pop("$defs", {}))
    return {**schema, "description": f"{allowed.type}: {allowed.why}"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Turn a pydantic JSON schema into a Kubernetes structural schema."""
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("x-kyma-values"):
        return _values_schema(node.get("description", ""))
    resolved = _resolve(node, defs)
    if resolved is not None:
        return _structural(resolved, defs)
    if "const" in node:
        node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
    out = {}
    for key, value in node.items():
        if key in _DROP or key == "$defs" or (key == "default" and value is None):
            continue
        out[key] = _structural_field(key, value, defs)
    return out


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any] | None:
    """A $ref inlined, or an optional (anyOf with null) made plain; None when neither."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        return {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(branches) == 1:
            return {**branches[0], **rest}
    return None


def _structural_field(key: str, value: Any, defs: dict[str, Any]) -> Any:
    if key == "description" and isinstance(value, str):
        return " ".join(value.split())
    if key == "properties":
        return {name: _structural(prop, defs) for name, prop in value.items()}
    return _structural(value, defs)


def _schema(model: type[GpuSpec] | type[GpuStatus]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _structural(raw, defs)
    return schema


def _printer_columns() -> list[dict[str, Any]]:
    return [
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {"name": "Ready Nodes", "type": "string", "jsonPath": ".status.readyNodes"},
        {"name": "GPUs", "type": "string", "jsonPath": ".status.gpus"},
        {"name": "Driver", "type": "string", "jsonPath": ".status.driverMode"},
        {"name": "Driver Version", "type": "string", "jsonPath": ".status.driverVersion"},
        {"name": "Chart", "type": "string", "jsonPath": ".status.chartVersion"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {
            "name": "Message",
            "type": "string",
            "jsonPath": ".status.message",
            "priority": 1,
        },
    ]


def _metadata() -> dict[str, Any]:
    return {"name": f"{PLURAL}.{API_GROUP}", "labels": module_labels("gpu-manager")}


def _names() -> dict[str, Any]:
    return {
        "kind": KIND,
        "listKind": f"{KIND}List",
        "plural": PLURAL,
        "singular": KIND.lower(),
        "categories": ["kyma-modules", "kyma-gpu"],
    }


def _open_api_schema() -> dict[str, Any]:
    """The whole object's schema: the generated spec and status, with the CEL rules."""
    spec = _schema(GpuSpec)
    _add_rules(spec)
    status = _schema(GpuStatus)
    return {
        "description": "Gpu makes the GPU worker pools of the cluster "
        "usable: it detects GPU nodes and has Flux install the NVIDIA GPU "
        f"Operator with fitting values. A singleton named '{SINGLETON_NAME}'.",
        "type": "object",
        "required": ["spec"],
        "x-kubernetes-validations": _rules(_ROOT_RULES),
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition as a plain dict."""
    version = {
        "name": API_VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "additionalPrinterColumns": _printer_columns(),
        "schema": {"openAPIV3Schema": _open_api_schema()},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": _metadata(),
        "spec": {
            "group": API_GROUP,
            "names": _names(),
            "scope": "Cluster",
            "versions": [version],
        },
    }


def crd_yaml() -> str:
    """The CRD as the YAML committed to config/."""
    header = "# Generated by `make manifests` from operator/kyma_gpu/api/models.py. Do not edit.\n"
    return header + dump(crd())
