"""The CRD reference (docs/crd-reference.md), generated from the same schema as the CRD."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from kyma_gpu.api.conditions import (
    ComponentsReason,
    ConditionType,
    DriverReason,
    FluxReason,
    NodesReason,
    PoolsReason,
    PreflightReason,
    ReadyReason,
    ReleaseReason,
    SourceReason,
    UninstallReason,
)
from kyma_gpu.api.values import (
    ALLOWLIST_DOC,
    FORMATS,
    MAX_LABELS,
    MAX_LIST,
    MAX_TEXT,
    ValueType,
)
from kyma_gpu.extensions import EXTENSIONS
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu_tools.crd import crd

REASONS: Mapping[StrEnum, type[StrEnum]] = MappingProxyType(
    {
        ConditionType.READY: ReadyReason,
        ConditionType.NODES_DETECTED: NodesReason,
        ConditionType.PREFLIGHT: PreflightReason,
        ConditionType.POOLS_READY: PoolsReason,
        ConditionType.RELEASE_READY: ReleaseReason,
        ConditionType.SOURCE_READY: SourceReason,
        ConditionType.DRIVER_READY: DriverReason,
        ConditionType.COMPONENTS_READY: ComponentsReason,
        ConditionType.FLUX_AVAILABLE: FluxReason,
        ConditionType.UNINSTALLED: UninstallReason,
        **{
            c: r for e in EXTENSIONS if e.status is not None for c, r in e.status.conditions.items()
        },
    }
)
"""Each condition and the enum of the reasons the module itself gives it: the core's
(api/conditions.py), then the registered extensions' (`Report.conditions`)."""

TYPE_TAKES: Mapping[ValueType, str] = MappingProxyType(
    {
        ValueType.RESOURCES: "`requests` and `limits` of `cpu`, `memory`, `ephemeral-storage`: "
        'quantities ("500m", "2Gi", 1); no device resources',
        ValueType.TOLERATIONS: f"at most {MAX_LIST} tolerations (`key`, `operator` Exists or "
        "Equal, `value`, `effect`, `tolerationSeconds`)",
        ValueType.PRIORITY_CLASS_NAME: "a PriorityClass name",
        ValueType.PULL_POLICY: "`Always`, `IfNotPresent` or `Never`",
        ValueType.BOOLEAN: "`true` or `false`",
        ValueType.UPDATE_STRATEGY: "`RollingUpdate` or `OnDelete`",
        ValueType.MAX_UNAVAILABLE: 'a number ("2") or a percentage ("25%")',
        ValueType.LOG_LEVEL: "`debug`, `info` or `error`",
        ValueType.KERNEL_MODULE_TYPE: "`auto`, `open` or `proprietary`",
        ValueType.FEATURE_GATES: f"at most {MAX_LABELS} feature gates: a name (letters and digits) "
        "and `true` or `false`",
        ValueType.DURATION: 'a duration ("15s", "1m")',
        ValueType.LABELS: f"at most {MAX_LABELS} labels (qualified keys, label values)",
        ValueType.CONFIG_MAP_NAME: "a ConfigMap name (DNS name) in the GPU operator's namespace",
        ValueType.MIG_CONFIG_NAME: "a MIG layout name of the MIG configuration",
        ValueType.DCGM_METRICS: f"{FORMATS[ValueType.DCGM_METRICS]}; at most {MAX_TEXT} characters",
        ValueType.MIG_CONFIG: f"{FORMATS[ValueType.MIG_CONFIG]}; at most {MAX_TEXT} characters",
    }
)
"""What each type takes, for the CRD reference."""


def _type(prop: dict[str, Any]) -> str:
    if prop.get("x-kubernetes-preserve-unknown-fields"):
        return "object (free form)" if prop.get("type") == "object" else "any"
    kind = str(prop.get("type", "object"))
    if kind == "array":
        return f"[]{_type(prop.get('items') or {})}"
    return kind


def _constraints(prop: dict[str, Any]) -> str:
    out = []
    if "enum" in prop:
        out.append("one of " + ", ".join(f"`{v}`" for v in prop["enum"]))
    if "pattern" in prop:
        out.append(f"pattern `{prop['pattern']}`")
    if "maxLength" in prop:
        out.append(f"at most {prop['maxLength']} characters")
    if "maxItems" in prop:
        out.append(f"at most {prop['maxItems']} items")
    for rule in prop.get("x-kubernetes-validations") or []:
        out.append(f"rule: {rule['message']}")
    return "; ".join(out)


def _rows(schema: dict[str, Any], path: str) -> Iterator[str]:
    for name, prop in (schema.get("properties") or {}).items():
        here = f"{path}.{name}"
        default = ""
        if "default" in prop:
            value = prop["default"]
            default = f"`{str(value).lower() if isinstance(value, bool) else value}`"
        description = str(prop.get("description", "")).replace("|", "\\|")
        extra = _constraints(prop).replace("|", "\\|")
        yield f"| `{here}` | {_type(prop)} | {default} | {description} {extra}".rstrip() + " |"
        nested = prop.get("items") if prop.get("type") == "array" else prop
        if here == "spec.values":
            continue  # the allowlist has a section of its own
        if nested and nested.get("properties"):
            yield from _rows(nested, here + ("[]" if prop.get("type") == "array" else ""))


def reference_markdown() -> str:
    doc = crd()
    version = doc["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    group = doc["spec"]["group"]
    lines = [
        "<!-- Generated by `make manifests` from operator/kyma_gpu/api/models.py. Do not edit. -->",
        f"# `Gpu` ({group}/{version['name']}) reference",
        "",
        schema["description"],
        "",
        f"Scope: {doc['spec']['scope']}. "
        + " ".join(f"{r['message'].capitalize()}." for r in schema["x-kubernetes-validations"]),
        "",
        "## spec",
        "",
        "| field | type | default | description |",
        "|---|---|---|---|",
        *_rows(schema["properties"]["spec"], "spec"),
        "",
        *_values_rows(),
        "## status",
        "",
        "Written by the operator only.",
        "",
        "| field | type | default | description |",
        "|---|---|---|---|",
        *_rows(schema["properties"]["status"], "status"),
        "",
        "## Printer columns",
        "",
        "| column | from |",
        "|---|---|",
        *(f"| {c['name']} | `{c['jsonPath']}` |" for c in version["additionalPrinterColumns"]),
        "",
        *_condition_rows(),
    ]
    return "\n".join(lines)


def _values_rows() -> list[str]:
    """spec.values: the allowlist (values-rules/values-allowlist.yaml) and its types."""
    allowlist = Catalog().values_allowlist
    return [
        "## Chart values (spec.values)",
        "",
        f"Only these chart values, listed in `{ALLOWLIST_DOC}` for every supported chart",
        f"({', '.join(allowlist.charts)}); the CRD's schema is generated from the list, so the",
        "API server prunes any other key, and names it (`unknown field`) under strict field",
        "validation (`kubectl apply` and `create` by default); without it (`kubectl patch` by",
        "default) the key is dropped, with a warning. Images, commands, env entries, host paths,",
        "volumes, registries, Pod labels and",
        "annotations, and NFD's labels, taints and configuration are the module's.",
        "",
        "| value | type | why |",
        "|---|---|---|",
        *(f"| `{a.dotted}` | {a.type} | {a.why} |" for a in allowlist.values),
        "",
        "| type | takes |",
        "|---|---|",
        *(f"| {t} | {TYPE_TAKES[t]} |" for t in ValueType),
        "",
    ]


def _condition_rows() -> list[str]:
    """status.conditions: each type and the reasons the module gives it (`REASONS`)."""
    rows = [
        "## Conditions",
        "",
        "Ready summarizes ReleaseReady, DriverReady and ComponentsReady; the others inform, and",
        "an error in any of them makes the Gpu `Error`. ReleaseReady and SourceReady also mirror",
        "Flux's own reasons (InstallSucceeded, InstallFailed, SourceNotReady, FetchFailed, ...);",
        "Preflight also carries the reason of its worst finding (NoDriverImage, UnknownOs, ...).",
        "",
        "| type | reasons |",
        "|---|---|",
    ]
    for kind, reasons in REASONS.items():
        rows.append(f"| {kind} | {', '.join(f'`{r}`' for r in reasons)} |")
    return [*rows, ""]
