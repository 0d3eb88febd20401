"""The Gpu in Kyma dashboard (Busola): its resource extension, generated from the CRD.

Busola shows a custom resource through a resource extension: a ConfigMap labelled
`busola.io/extension: resource` and `busola.io/extension-version` whose keys describe its views
(general, list, details, form, translations, presets; Busola's
docs/contributor/extensibility/). The module ships one for the Gpu in `kube-public`
(config/ui-extension/, a part of config/default, so of the KLM manifest and the plain install).
The dashboard reads it, and the Gpu, with the rights of the user who looks: the extension needs
no privilege of its own.

Every field a view reads or the form writes goes through `Fields`, which looks it up in the
schema of the generated CRD and fails when it is not there: a field renamed in the API fails
`make manifests` and tests/unit/test_dashboard.py (the committed parts against this module)
before it can leave the extension behind. The form is the CRD's spec walked field by field, each
with the CRD's own description. `make check` also validates every part against the schemas of
the Busola version the tests run (hack/busola_schemas.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import yaml

from kyma_gpu.api.conditions import ConditionType
from kyma_gpu.api.models import API_GROUP, API_VERSION, KIND, PLURAL, SINGLETON_NAME, GpuState
from kyma_gpu.extensions.node_marks.conditions import NODE_FINDINGS
from kyma_gpu.extensions.workload_protection.conditions import Conditions as WorkloadConditions
from kyma_gpu_tools.crd import SINGLETON_MESSAGE, crd

EXTENSION_VERSION = "0.5"
"""The `busola.io/extension-version` this extension is written for (Busola reads 0.4 and 0.5,
its src/components/Extensibility/migration.js)."""
NAMESPACE = "kube-public"
CONFIG_MAP = f"{PLURAL}.{API_GROUP}"
PARTS = ("general", "list", "details", "form", "translations", "presets")
"""The ConfigMap's keys, one file each in config/ui-extension/."""
HEALTHY = "Healthy"
"""What a GPU node without a health finding shows in the details' node table."""
UNKNOWN_HEALTH = "Unknown"
"""A node beyond the first 20 unhealthy ones the status names (unhealthyNodeCount counts all)."""

Part = Any
"""A part as YAML gives it: lists and mappings of strings, numbers and booleans."""


class FieldError(ValueError):
    """A view names a field the Gpu CRD does not have."""


@dataclass(frozen=True)
class Fields:
    """The Gpu's fields, from the CRD's openAPIV3Schema: each path a view uses is checked here."""

    schema: Mapping[str, Any]

    def at(self, path: str) -> Mapping[str, Any]:
        """The schema of ``path`` ("status.nodes[].name"; "[]" steps into an array's items).
        metadata is the API server's ObjectMeta, which the CRD does not spell out."""
        node: Mapping[str, Any] = self.schema
        if path.split(".", maxsplit=1)[0] == "metadata" and "metadata" in self.schema["properties"]:
            metadata: Mapping[str, Any] = self.schema["properties"]["metadata"]
            return metadata
        for step in path.split("."):
            name, many = step.removesuffix("[]"), step.endswith("[]")
            properties = node.get("properties") or {}
            if name not in properties:
                raise FieldError(f"{path}: the Gpu CRD has no field {name!r} there")
            node = properties[name]
            if many:
                if node.get("type") != "array":
                    raise FieldError(f"{path}: {name!r} is no list in the Gpu CRD")
                node = node["items"]
        return node

    def path(self, path: str) -> str:
        """``path`` itself, once the CRD has it."""
        self.at(path)
        return path

    def item(self, array: str, field: str) -> str:
        """``$item.field`` in a table over ``array``, once the CRD has ``array[].field``."""
        self.at(f"{array}[].{field}")
        return f"$item.{field}"

    def key(self, array: str, field: str) -> str:
        """``field`` of an element of ``array`` (in a JSONata filter), once the CRD has it."""
        self.at(f"{array}[].{field}")
        return field

    def condition(self, type_: StrEnum, field: str) -> str:
        """A field of one condition of the Gpu's status (the core's or an extension's type)."""
        self.at("status.conditions[].type")
        self.at(f"status.conditions[].{field}")
        return f"$root.status.conditions[type='{type_}'].{field}"


def gpu_fields() -> Fields:
    """The fields of the CRD `make manifests` writes (kyma_gpu_tools/crd.py)."""
    return Fields(crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


STATE_HIGHLIGHTS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "positive": (GpuState.READY.value,),
    "informative": (GpuState.PROCESSING.value, GpuState.DELETING.value),
    "warning": (GpuState.WARNING.value,),
    "critical": (GpuState.ERROR.value,),
})  # fmt: skip
HEALTH_HIGHLIGHTS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "positive": (HEALTHY,),
    "informative": (UNKNOWN_HEALTH,),
    "critical": tuple(reason.value for reason in NODE_FINDINGS),
})  # fmt: skip


def _highlights(table: Mapping[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """A highlight table as the ConfigMap's YAML holds it."""
    return {key: list(values) for key, values in table.items()}


def _flux_highlights(f: Fields, type_: ConditionType) -> dict[str, str]:
    """A condition's reason, mirrored from Flux: its own reasons (InstallSucceeded,
    UpgradeFailed, ...) are not the module's to list, so the badge goes by the condition's
    status, and a Failed reason. (Busola evaluates a highlight rule on the resource, not on
    the badge's value.)"""
    return {
        "positive": f"{f.condition(type_, 'status')} = 'True'",
        "critical": f"$contains({f.condition(type_, 'reason')}, 'Failed')",
    }


def general() -> Part:
    """The Gpu in the navigation: cluster-scoped, in the Kyma category. Create and delete stay
    on: the form creates the one Gpu the singleton allows (the name is preset and fixed), and
    the API server refuses any other name with the CRD's message."""
    return {
        "resource": {"kind": KIND, "group": API_GROUP, "version": API_VERSION},
        "name": TRANSLATIONS["name"],
        "category": "Kyma",
        "urlPath": PLURAL,
        "scope": "cluster",
        "description": "description",
        "features": {"actions": {"disableCreate": False, "disableDelete": False}},
    }


def _state_badge(f: Fields) -> Part:
    """The state as a badge, its message on it."""
    return {
        "name": "state",
        "source": f.path("status.state"),
        "widget": "Badge",
        "highlights": _highlights(STATE_HIGHLIGHTS),
        "description": f.path("status.message"),
    }


def list_columns(f: Fields) -> Part:
    """The list: state, GPU nodes ready, healthy GPUs, driver mode and version, chart (Busola
    adds the name and the age)."""
    return [
        _state_badge(f),
        {"name": "ready-nodes", "source": f.path("status.readyNodes")},
        {"name": "gpus", "source": f.path("status.gpus")},
        {"name": "driver-mode", "source": f.path("status.driverMode")},
        {"name": "driver-version", "source": f.path("status.driverVersion")},
        {"name": "chart", "source": f.path("status.chartVersion")},
    ]  # fmt: skip


def _status_body(f: Fields) -> Part:
    return [
        {"name": "message", "source": f.path("status.message")},
        {"name": "ready-nodes", "source": f.path("status.readyNodes")},
        {"name": "gpus", "source": f.path("status.gpus")},
        {"name": "driver-mode", "source": f.path("status.driverMode")},
        {"name": "driver-version", "source": f.path("status.driverVersion")},
        {"name": "desired-driver-version", "source": f.path("status.desiredDriverVersion")},
        {"name": "installer-release", "source": f.path("status.installerRelease")},
        {"name": "stack", "source": f.path("status.stack")},
        {"name": "conditions", "source": f.path("status.conditions"), "widget": "ConditionList"},
    ]


def _health(f: Fields) -> str:
    """A node's finding from status.unhealthyNodes, Healthy without one (Unknown when the
    status names fewer unhealthy nodes than it counts)."""
    found = _finding(f)
    counted = f"$root.{f.path('status.unhealthyNodeCount')}"
    named = f"$count($root.{f.path('status.unhealthyNodes')})"
    return (
        f"$exists({found}) ? {found}.{f.key('status.unhealthyNodes', 'reason')} : "
        f"({named} < {counted} ? '{UNKNOWN_HEALTH}' : '{HEALTHY}')"
    )


def _finding(f: Fields) -> str:
    """The entry of status.unhealthyNodes of the node of a row of status.nodes."""
    unhealthy = "status.unhealthyNodes"
    name = f.item("status.nodes", "name")
    return f"$root.{f.path(unhealthy)}[{f.key(unhealthy, 'name')} = {name}]"


def _nodes_table(f: Fields) -> Part:
    """The GPU nodes (the first 100 the status names), each with its health."""
    nodes = "status.nodes"
    return {
        "name": "gpu-nodes", "widget": "Table", "source": f.path(nodes),
        "children": [
            {"name": "node", "source": f.item(nodes, "name"), "sort": True},
            {"name": "pool", "source": f.item(nodes, "pool"), "sort": True},
            {"name": "machine-type", "source": f.item(nodes, "machineType")},
            {"name": "gpu-model", "source": f.item(nodes, "gpuModel")},
            {"name": "gpu-count", "source": f.item(nodes, "gpuCount")},
            {"name": "os", "source": f"{f.item(nodes, 'os')} & ' ' & {f.item(nodes, 'osVersion')}"},
            {"name": "node-driver-mode", "source": f.item(nodes, "driverMode")},
            {"name": "health", "source": _health(f), "widget": "Badge",
             "highlights": _highlights(HEALTH_HIGHLIGHTS),
             "description": f"{_finding(f)}.{f.key('status.unhealthyNodes', 'message')}"},
        ],
    }  # fmt: skip


def _unhealthy_table(f: Fields) -> Part:
    """The nodes with a health finding, what was seen, and whether the module marked them."""
    nodes = "status.unhealthyNodes"
    return {
        "name": "unhealthy-nodes", "widget": "Table", "source": f.path(nodes),
        "visibility": f"$count($root.{f.path(nodes)}) > 0",
        "children": [
            {"name": "node", "source": f.item(nodes, "name")},
            {"name": "pool", "source": f.item(nodes, "pool")},
            {"name": "finding", "source": f.item(nodes, "reason"), "widget": "Badge",
             "highlights": _highlights(HEALTH_HIGHLIGHTS)},
            {"name": "seen", "source": f.item(nodes, "message")},
            {"name": "marked", "source": f.item(nodes, "marked")},
        ],
    }  # fmt: skip


def _pools_table(f: Fields) -> Part:
    pools = "status.pools"
    healthy, total = f.item(pools, "gpusHealthy"), f.item(pools, "gpuTotal")
    return {
        "name": "pools", "widget": "Table", "source": f.path(pools),
        "children": [
            {"name": "pool", "source": f.item(pools, "name")},
            {"name": "pool-nodes", "source": f.item(pools, "nodes")},
            {"name": "gpus", "source": f"$string({healthy}) & '/' & $string({total})"},
            {"name": "unhealthy-node-count", "source": f.item(pools, "unhealthyNodes")},
        ],
    }  # fmt: skip


def _release_panel(f: Fields) -> Part:
    """The HelmRelease Flux installs the chart with, as the Gpu mirrors it: its Ready reason
    and message (which name the chart it installed), the chart source's, the chart versions."""
    release, source = ConditionType.RELEASE_READY, ConditionType.SOURCE_READY
    return {
        "name": "release", "widget": "Panel",
        "children": [
            {"name": "helm-release", "source": f.path("status.helmRelease")},
            {"name": "release-state", "source": f.condition(release, "reason"),
             "widget": "Badge", "highlights": _flux_highlights(f, release)},
            {"name": "release-message", "source": f.condition(release, "message")},
            {"name": "chart", "source": f.path("status.chartVersion")},
            {"name": "installed-chart", "source": f.path("status.installedChartVersion")},
            {"name": "source-state", "source": f.condition(source, "reason"),
             "widget": "Badge", "highlights": _flux_highlights(f, source)},
            {"name": "source-message", "source": f.condition(source, "message")},
        ],
    }  # fmt: skip


def _components_table(f: Fields) -> Part:
    """The GPU operand DaemonSets and their readiness."""
    ds = "status.components"
    available, desired = f.item(ds, "available"), f.item(ds, "desired")
    return {
        "name": "components", "widget": "Table", "source": f.path(ds),
        "children": [
            {"name": "daemonset", "source": f.item(ds, "name")},
            {"name": "daemonset-ready", "widget": "Badge",
             "source": f"{f.item(ds, 'ready')} ? 'Ready' : 'Not ready'",
             "highlights": {"positive": ["Ready"], "critical": ["Not ready"]}},
            {"name": "available", "source": f"$string({available}) & '/' & $string({desired})"},
        ],
    }  # fmt: skip


def _deletion_panel(f: Fields) -> Part:
    """While a deletion runs: what it waits for (GPU workloads, Flux's uninstall)."""
    workloads, uninstalled = WorkloadConditions.WORKLOADS_PROTECTED, ConditionType.UNINSTALLED
    return {
        "name": "deletion", "widget": "Panel",
        "visibility": f"$exists($root.{f.path('metadata.deletionTimestamp')})",
        "children": [
            {"name": "deletion-waits", "source": f.path("status.message")},
            {"name": "workloads", "source": f.condition(workloads, "reason"), "widget": "Badge"},
            {"name": "workloads-message", "source": f.condition(workloads, "message")},
            {"name": "uninstall", "source": f.condition(uninstalled, "reason"), "widget": "Badge"},
            {"name": "uninstall-message", "source": f.condition(uninstalled, "message")},
        ],
    }  # fmt: skip


def details(f: Fields) -> Part:
    """The details: the state and the conditions; the GPU nodes with their health, the
    unhealthy ones, the worker pools, the HelmRelease, the DaemonSets; a deletion's waits."""
    return {
        "header": [
            {"name": "desired-driver-version", "source": f.path("status.desiredDriverVersion")},
        ],
        "status": {
            "header": [
                _state_badge(f),
            ],
            "body": _status_body(f),
        },
        "body": [
            _deletion_panel(f), _nodes_table(f), _unhealthy_table(f), _pools_table(f),
            _release_panel(f), _components_table(f),
        ],
    }  # fmt: skip


# -- the form: the CRD's spec, walked ------------------------------------------------------------


def form(f: Fields) -> Part:
    """The create and edit form: the name (the singleton's, preset and fixed), then every field
    of the spec in the CRD's order, each with the CRD's description: the driver and its upgrade
    policy, the chart and its sources, the components, sharing, health, the stack, and the chart
    values the allowlist permits (spec.values, as its schema lists them)."""
    name = {"path": f.path("metadata.name"), "widget": "Name", "disableOnEdit": True,
            "inputInfo": SINGLETON_MESSAGE}  # fmt: skip
    spec = f.at("spec")
    return [name, *_form_fields("spec", "spec.", spec)]


def _form_fields(path: str, prefix: str, parent: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fields of an object's properties, named ``prefix + key`` (a FormGroup's children
    relative to it, a GenericList's as ``[].key``), required as the CRD says."""
    required = set(parent.get("required") or ())
    return [_form_field(f"{path}.{key}", f"{prefix}{key}", field, key in required)
            for key, field in (parent.get("properties") or {}).items()]  # fmt: skip


def _form_field(
    path: str, relative: str, schema: Mapping[str, Any], required: bool
) -> dict[str, Any]:
    """One form field at ``relative``. Busola would mark a field required when the CRD does
    not say (every field of the spec), so each says it."""
    widget, children = _widget(path, schema)
    item: dict[str, Any] = {"path": relative, "required": required}
    if widget is not None:
        item["widget"] = widget
    if "description" in schema:
        item["description"] = schema["description"]
    if children:
        item["children"] = children
    return item


def _widget(path: str, schema: Mapping[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """Busola's widget for a field of this schema, and its children. Scalars get Busola's own
    (text, number, switch, a select for an enum); an int-or-string a text field."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    if properties and not any("." in key for key in properties):
        return "FormGroup", _form_fields(path, "", schema)
    if schema.get("type") == "object":  # a map, or keys a form path cannot name ("config.yaml")
        values = schema.get("additionalProperties")
        string_map = isinstance(values, Mapping) and values.get("type") == "string"
        return ("KeyValuePair" if string_map else "CodeEditor"), []
    if schema.get("type") == "array":
        items: Mapping[str, Any] = schema["items"]
        if "properties" in items:
            return "GenericList", _form_fields(f"{path}[]", "[].", items)
        return "SimpleList", [{"path": "[]"}]
    if "anyOf" in schema:
        return "Text", []
    return None, []


def presets() -> Part:
    """The form starts as the module's default Gpu: the singleton's name, the empty spec."""
    return [{"name": "default-gpu", "default": True,
             "value": {"metadata": {"name": SINGLETON_NAME}, "spec": {}}}]  # fmt: skip


TRANSLATIONS: Mapping[str, str] = MappingProxyType({
    "name": "GPU",
    "description": (
        "The GPU module: detects the GPU nodes, picks their driver, and has Flux install the "
        "NVIDIA GPU Operator. One Gpu, named gpu."
    ),
    "default-gpu": "The default Gpu",
    "state": "State",
    "message": "Message",
    "ready-nodes": "Ready GPU nodes",
    "gpus": "Healthy GPUs",
    "driver-mode": "Driver",
    "driver-version": "Driver version",
    "desired-driver-version": "Desired driver version",
    "installer-release": "Installer release",
    "chart": "Chart",
    "installed-chart": "Installed chart",
    "stack": "Stack",
    "conditions": "Conditions",
    "gpu-nodes": "GPU nodes",
    "node": "Node",
    "pool": "Worker pool",
    "machine-type": "Machine type",
    "gpu-model": "GPU model",
    "gpu-count": "GPUs",
    "os": "OS",
    "node-driver-mode": "Driver mode",
    "health": "Health",
    "unhealthy-nodes": "Unhealthy GPU nodes",
    "finding": "Finding",
    "seen": "What was seen",
    "marked": "Marked",
    "pools": "GPU worker pools",
    "pool-nodes": "GPU nodes",
    "unhealthy-node-count": "Unhealthy nodes",
    "release": "Flux release",
    "helm-release": "HelmRelease",
    "release-state": "Release",
    "release-message": "Release message",
    "source-state": "Chart source",
    "source-message": "Chart source message",
    "components": "GPU operands (DaemonSets in gpu-operator)",
    "daemonset": "DaemonSet",
    "daemonset-ready": "Ready",
    "available": "Available",
    "deletion": "Deletion",
    "deletion-waits": "Waiting for",
    "workloads": "GPU workloads",
    "workloads-message": "GPU workloads message",
    "uninstall": "Uninstall",
    "uninstall-message": "Uninstall message",
})  # fmt: skip
"""The English names of the views' fields (the form's fields keep Busola's names from their
paths, and their descriptions are the CRD's)."""


def translations() -> Part:
    return {"en": dict(TRANSLATIONS)}


def parts(f: Fields | None = None) -> dict[str, Part]:
    """Every part of the extension, by its ConfigMap key."""
    f = f or gpu_fields()
    return {
        "general": general(),
        "list": list_columns(f),
        "details": details(f),
        "form": form(f),
        "translations": translations(),
        "presets": presets(),
    }


HEADER = "# GENERATED by `make manifests` (kyma-gpu dashboard) from the Gpu CRD; do not edit.\n"


def part_files(f: Fields | None = None) -> dict[str, str]:
    """config/ui-extension/<part>.yaml: each part as the ConfigMap holds it."""
    return {f"{key}.yaml": HEADER + _dump(part) for key, part in parts(f).items()}


class _Dumper(yaml.SafeDumper):
    """Each highlight list written out where it is used: no YAML anchors in a ConfigMap."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(part: Part) -> str:
    return yaml.dump(part, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
