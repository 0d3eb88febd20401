"""What `spec.values` may hold: the chart values of values-rules/values-allowlist.yaml, each of
one type of the closed set below, and nothing else.

An allowlist, not a deny-list: a chart of about 600 values, plus NVIDIA's conventions for
environment variables (an env entry VALIDATOR_IMAGE made the CUDA validator run an image of the
Gpu editor's choice, privileged, on every GPU node), always has one more key that names an
image, a command or a host path. Every type here is bounded and none can name an image, a
command, an env entry, a host path, a volume, a registry, a Pod label or annotation, or NFD's
labels, taints or configuration; the two texts (the DCGM metrics list and the MIG layouts) are
held to their formats line by line.

The same list is enforced three times with the same data: the Gpu CRD's structural schema for
spec.values is generated from it (kyma_gpu_tools/crd.py: the API server prunes anything else, and
refuses it under kubectl's strict field validation), the model refuses it (`kyma-gpu plan`,
the operator's Invalid phase), and the manager refuses a Gpu whose managedFields still record a
value the API server pruned after an upgrade of the list (`unlisted_managed_values`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import yaml
from cachetools import LRUCache, cached
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from kyma_gpu.api.admission import error_text, json_type
from kyma_gpu.api.base import DNS_NAME_PATTERN
from kyma_gpu.api.base import Model as _Model
from kyma_gpu.datadir import default_rules_dir

ALLOWLIST_FILE = "values-allowlist.yaml"
ALLOWLIST_DOC = "values-rules/values-allowlist.yaml"
REFERENCE_DOC = "docs/crd-reference.md#chart-values-specvalues"
NOT_LISTED = (
    f"not a chart value a Gpu may set: spec.values takes only the values listed in "
    f"{ALLOWLIST_DOC} ({REFERENCE_DOC}); images, commands, env, host paths and NFD's "
    "configuration are the module's"
)
"""Said by `kyma-gpu plan` and the operator for a key outside the list (the API server prunes
it, or names it as an unknown field under strict field validation)."""
PRUNED = (
    "the API server no longer stores it since the module's allowlist narrowed, and the running "
    "release keeps it until the Gpu is fixed: remove it from your manifest and apply it with "
    "`kubectl apply --server-side` (a client-side apply leaves the API server's record of the "
    "old field behind; docs/troubleshooting.md#a-gpu-value-the-allowlist-dropped)"
)
"""Why a Gpu whose managedFields name a value outside the list is Invalid."""

NO_CONTROL = r"\x00-\x08\x0a-\x1f\x7f-\x9f\x{2028}\x{2029}\x{feff}"
"""Line breaks (LF, CR, NEL, LS, PS), other control characters and the byte-order mark: RE2,
as the API server and pydantic's Rust regex engine read it. Tab is allowed."""
_CHAR = f"[^{NO_CONTROL}]"
QUANTITY_PATTERN = r"^[0-9]{1,15}(\.[0-9]{1,9})?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P)?$"
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
DURATION_PATTERN = r"^([0-9]{1,6}(ms|s|m|h))+$"
MAX_UNAVAILABLE_PATTERN = r"^(0|[1-9][0-9]{0,4}|([1-9]?[0-9]|100)%)$"
MIG_CONFIG_NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
_DCGM_LINE = (
    rf"(#{_CHAR}*|[ \t]*|[ \t]*DCGM_[A-Z0-9_]{{1,80}}[ \t]*,[ \t]*(gauge|counter|label)"
    rf"[ \t]*,{_CHAR}*)"
)
_DCGM_FIRST = (
    rf"(#{_CHAR}*|DCGM_[A-Z0-9_]{{1,80}}[ \t]*,[ \t]*(gauge|counter|label)[ \t]*,{_CHAR}*)"
)
_LEAD = rf"((#{_CHAR}*)?\n)*"
"""Empty lines and comments in the first column, before the first line of content."""
DCGM_METRICS_PATTERN = rf"^{_LEAD}({_DCGM_FIRST}(\n{_DCGM_LINE})*)?$"
"""DCGM exporter's CSV: comments, blank lines and "DCGM field, type, help" lines. Its first line
that is not empty starts in the first column: the chart prints the text as a YAML block
(`dcgm-metrics.csv: |`), whose indentation is that of its first line, so a text whose first
line starts with blanks (or whose empty lines before it hold blanks) breaks every render."""
_MIG_LINE = rf"((version|mig-configs):{_CHAR}*|#{_CHAR}*| {_CHAR}*|)"
MIG_CONFIG_PATTERN = rf"^{_LEAD}((version|mig-configs):{_CHAR}*(\n{_MIG_LINE})*)?$"
"""mig-parted's file: only the top-level keys version and mig-configs (MIG layouts per device),
comments and indented lines below them. Its first line of content is one of the two keys in
the first column: a text indented as a whole would make its indented lines the top level,
where any key goes."""
MAX_TEXT = 65536
MAX_LIST = 32
MAX_LABELS = 16


class ValueType(StrEnum):
    """The closed set of types a listed value may have."""

    RESOURCES = "Resources"
    TOLERATIONS = "Tolerations"
    PRIORITY_CLASS_NAME = "PriorityClassName"
    PULL_POLICY = "PullPolicy"
    BOOLEAN = "Boolean"
    UPDATE_STRATEGY = "UpdateStrategy"
    MAX_UNAVAILABLE = "MaxUnavailable"
    LOG_LEVEL = "LogLevel"
    KERNEL_MODULE_TYPE = "KernelModuleType"
    FEATURE_GATES = "FeatureGates"
    DURATION = "Duration"
    LABELS = "Labels"
    CONFIG_MAP_NAME = "ConfigMapName"
    MIG_CONFIG_NAME = "MigConfigName"
    DCGM_METRICS = "DcgmMetrics"
    MIG_CONFIG = "MigConfig"


Quantity = Annotated[
    Annotated[StrictInt, Field(ge=0, le=10**15)]
    | Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN, max_length=32)],
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "maxLength": 32,
            "minimum": 0,
            "maximum": 10**15,
        }
    ),
]


class ResourceList(BaseModel):
    """CPU, memory and ephemeral storage: nothing that grants a device."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    cpu: Quantity | None = None
    memory: Quantity | None = None
    ephemeral_storage: Quantity | None = Field(default=None, alias="ephemeral-storage")


class Resources(_Model):
    """A container's requests and limits."""

    requests: ResourceList | None = None
    limits: ResourceList | None = None


TOLERATION_RULE = MappingProxyType(
    {
        "rule": "has(self.key) || (has(self.operator) && self.operator == 'Exists')",
        "message": "a toleration names a key, or has operator Exists (which tolerates every "
        "taint); an empty one, as the API server leaves of one whose keys it pruned, is no "
        "toleration Kubernetes takes",
    }
)


class Toleration(_Model):
    """One toleration of a Pod."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [dict(TOLERATION_RULE)]}
    )

    key: str | None = Field(default=None, pattern=LABEL_KEY_PATTERN, max_length=317)
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = Field(default=None, pattern=LABEL_VALUE_PATTERN, max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0, le=86400 * 365)

    @model_validator(mode="after")
    def _names_a_key(self) -> Toleration:
        if self.key is None and self.operator != "Exists":
            raise PydanticCustomError("values_rule", str(TOLERATION_RULE["message"]))
        return self


LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN, max_length=317)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_PATTERN, max_length=63)]
GATE_PATTERN = r"^[A-Za-z][A-Za-z0-9]{0,63}$"
GateName = Annotated[str, StringConstraints(pattern=GATE_PATTERN)]
GATES_RULE = MappingProxyType(
    {
        "rule": f"self.all(k, k.matches(r'{GATE_PATTERN}'))",
        "message": "feature gate names are letters and digits",
    }
)
LABELS_RULE = MappingProxyType(
    {
        "rule": f"self.all(k, k.size() <= 317 && k.matches(r'{LABEL_KEY_PATTERN}'))",
        "message": "label keys are qualified names (prefix/name)",
    }
)


def _text(pattern: str) -> Any:
    return Annotated[str, StringConstraints(pattern=pattern, max_length=MAX_TEXT)]


PYTHON_TYPES: Mapping[ValueType, Any] = MappingProxyType(
    {
        ValueType.RESOURCES: Resources,
        ValueType.TOLERATIONS: Annotated[list[Toleration], Field(max_length=MAX_LIST)],
        ValueType.PRIORITY_CLASS_NAME: Annotated[
            str, StringConstraints(pattern=DNS_NAME_PATTERN, max_length=253)
        ],
        ValueType.PULL_POLICY: Literal["Always", "IfNotPresent", "Never"],
        ValueType.BOOLEAN: StrictBool,
        ValueType.UPDATE_STRATEGY: Literal["RollingUpdate", "OnDelete"],
        ValueType.MAX_UNAVAILABLE: Annotated[
            str, StringConstraints(pattern=MAX_UNAVAILABLE_PATTERN, max_length=6)
        ],
        ValueType.LOG_LEVEL: Literal["debug", "info", "error"],
        ValueType.KERNEL_MODULE_TYPE: Literal["auto", "open", "proprietary"],
        ValueType.FEATURE_GATES: Annotated[
            dict[GateName, StrictBool], Field(max_length=MAX_LABELS)
        ],
        ValueType.DURATION: Annotated[
            str, StringConstraints(pattern=DURATION_PATTERN, max_length=16)
        ],
        ValueType.LABELS: Annotated[dict[LabelKey, LabelValue], Field(max_length=MAX_LABELS)],
        ValueType.CONFIG_MAP_NAME: Annotated[
            str, StringConstraints(pattern=DNS_NAME_PATTERN, max_length=253)
        ],
        ValueType.MIG_CONFIG_NAME: Annotated[
            str, StringConstraints(pattern=MIG_CONFIG_NAME_PATTERN, max_length=63)
        ],
        ValueType.DCGM_METRICS: _text(DCGM_METRICS_PATTERN),
        ValueType.MIG_CONFIG: _text(MIG_CONFIG_PATTERN),
    }
)
"""Each type as pydantic checks it; kyma_gpu_tools/crd.py turns the same types into the CRD's
schema."""


FORMATS: Mapping[ValueType, str] = MappingProxyType(
    {
        ValueType.RESOURCES: 'quantities such as "500m", "2Gi" or 1',
        ValueType.TOLERATIONS: "label keys and values",
        ValueType.PRIORITY_CLASS_NAME: "a PriorityClass name (a DNS name)",
        ValueType.MAX_UNAVAILABLE: 'a number ("2") or a percentage ("25%")',
        ValueType.DURATION: 'a duration such as "15s", "1m" or "500ms"',
        ValueType.LABELS: "label keys and values",
        ValueType.CONFIG_MAP_NAME: "a ConfigMap name (a DNS name)",
        ValueType.MIG_CONFIG_NAME: "a MIG layout name (letters, digits, '-', '_', '.')",
        ValueType.DCGM_METRICS: (
            'CSV lines "DCGM_FI_<FIELD>, gauge|counter|label, help", comments and blank lines, '
            "the first one that is not empty in the first column, without control characters"
        ),
        ValueType.MIG_CONFIG: (
            "mig-parted's file with only the top-level keys version and mig-configs in the "
            "first column (comments and indented lines below them), without control characters"
        ),
    }
)
"""What a pattern of each type accepts, in words: said instead of the pattern."""


VALIDATE: Mapping[ValueType, Callable[..., Any]] = MappingProxyType(
    {value_type: TypeAdapter(PYTHON_TYPES[value_type]).validate_python for value_type in ValueType}
)
"""Each type's validator, pydantic's, compiled when the module is imported."""


class AllowedValues(_Model):
    """One entry of the allowlist: paths of one type, for one reason."""

    why: str = Field(min_length=10)
    """What a user needs these values for."""
    type: ValueType
    """The type (and so the bounds) of each value."""
    paths: list[list[str]] = Field(min_length=1)
    """Chart value paths, one list of keys each."""
    charts: list[str] | None = None
    """The chart versions that read these values, where not all of the file's: the others
    ignore them (a chart ignores values it does not know)."""


KeyPattern = Annotated[str, StringConstraints(pattern=r"^(\*|[A-Za-z0-9][-A-Za-z0-9_.]*)$")]


class Instead(_Model):
    """What to set instead of chart values a Gpu may not set (said when they are refused)."""

    paths: list[list[KeyPattern]] = Field(min_length=1)
    """Chart value paths, one list of keys each; `*` stands for any one key."""
    use: str | None = Field(default=None, pattern=r"^spec(\.[a-zA-Z]+)+$")
    """The Gpu's typed field that does it (a test finds each in the CRD)."""
    note: str | None = Field(default=None, min_length=10)
    """What the user should know: what the field does, or why nothing does it."""


class AllowlistFile(_Model):
    """values-rules/values-allowlist.yaml."""

    charts: list[str] = Field(min_length=1)
    """The chart versions every listed path holds in."""
    values: list[AllowedValues] = Field(min_length=1)
    """The listed values."""
    instead: list[Instead] = Field(default_factory=list)
    """Chart values that are not listed, and what to set instead: each refusal names it."""


@dataclass(frozen=True, slots=True)
class Allowed:
    """A listed chart value."""

    path: tuple[str, ...]
    type: ValueType
    why: str
    charts: tuple[str, ...] = ()
    """The chart versions that read it (every supported one where empty)."""

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


Tree = Mapping[str, "Tree | Allowed"]


@dataclass(frozen=True, slots=True)
class Hint:
    """What to set instead of the chart values whose paths match `pattern`."""

    pattern: tuple[str, ...]
    use: str | None
    note: str | None

    def matches(self, path: Sequence[str]) -> bool:
        return len(path) == len(self.pattern) and all(
            p in ("*", k) for p, k in zip(self.pattern, path, strict=True)
        )

    @property
    def text(self) -> str:
        if self.use and self.note:
            return f"use {self.use}: {self.note}"
        return f"use {self.use}" if self.use else str(self.note)


@dataclass(frozen=True, slots=True)
class Allowlist:
    """The listed values, as a list and as a tree of keys."""

    charts: tuple[str, ...]
    values: tuple[Allowed, ...]
    tree: Tree
    """The same values by key, level by level (built once, read at every validation)."""
    hints: tuple[Hint, ...] = ()
    """What to set instead of some unlisted values, the most specific first."""

    def hint(self, path: Sequence[str]) -> Hint | None:
        """What to set instead of the unlisted value at `path`, if the list says."""
        return next((h for h in self.hints if h.matches(path)), None)


def _tree(values: Sequence[Allowed]) -> Tree:
    root: dict[str, Any] = {}
    for allowed in values:
        node = root
        for key in allowed.path[:-1]:
            node = node.setdefault(key, {})
        node[allowed.path[-1]] = allowed
    return _frozen(root)


def _frozen(node: Mapping[str, Any]) -> Tree:
    return MappingProxyType(
        {k: v if isinstance(v, Allowed) else _frozen(v) for k, v in node.items()}
    )


def parse_allowlist(data: Any) -> Allowlist:
    """The file's content, checked (a path listed twice, or below another, is an error)."""
    parsed = AllowlistFile.model_validate(data)
    values = tuple(
        Allowed(tuple(path), entry.type, " ".join(entry.why.split()), tuple(entry.charts or ()))
        for entry in parsed.values
        for path in entry.paths
    )
    unknown = {c for v in values for c in v.charts} - set(parsed.charts)
    if unknown:
        raise ValueError(f"charts {sorted(unknown)} are not among the list's {parsed.charts}")
    paths = sorted(v.path for v in values)
    for first, second in pairwise(paths):
        if second[: len(first)] == first:
            raise ValueError(f"{'.'.join(second)} is listed twice or below a listed value")
    return Allowlist(tuple(parsed.charts), values, _tree(values), _hints(parsed.instead, values))


def _hints(entries: Sequence[Instead], values: Sequence[Allowed]) -> tuple[Hint, ...]:
    """The hints, those with fewer wildcards first; none may match a listed value (a hint
    says what to do instead of a value that is refused)."""
    hints = [
        Hint(tuple(path), entry.use, " ".join(entry.note.split()) if entry.note else None)
        for entry in entries
        for path in entry.paths
    ]
    for hint in hints:
        if hint.use is None and hint.note is None:
            raise ValueError(f"instead {'.'.join(hint.pattern)}: says neither use nor note")
        listed = next((v.dotted for v in values if hint.matches(v.path)), None)
        if listed is not None:
            raise ValueError(f"instead {'.'.join(hint.pattern)} matches the listed {listed}")
    return tuple(sorted(hints, key=lambda h: h.pattern.count("*")))


def load_allowlist(directory: Path) -> Allowlist:
    """The allowlist of a values-rules/ directory."""
    with (directory / ALLOWLIST_FILE).open(encoding="utf-8") as handle:
        return parse_allowlist(yaml.safe_load(handle))


@cached(LRUCache(maxsize=4), key=lambda directory: directory)
def _loaded(directory: Path) -> Allowlist:
    return load_allowlist(directory)


def default_allowlist() -> Allowlist:
    """The allowlist of the default rules directory ($KYMA_GPU_RULES_DIR, else the package's
    values-rules/: what the Catalog reads), read on first use: for a validation given none
    (`ValuesContext`). The manager and the tools hand the Catalog's own."""
    return _loaded(default_rules_dir())


@dataclass(frozen=True, slots=True)
class ValuesContext:
    """What a validation of spec.values checks against (pydantic's validation context:
    `GpuSpec.model_validate(spec, context=ValuesContext(catalog.values_allowlist))`)."""

    allowlist: Allowlist


def allowlist_of(context: object) -> Allowlist:
    """The allowlist a validation context names; the default one without."""
    return context.allowlist if isinstance(context, ValuesContext) else default_allowlist()


def path_text(path: Sequence[str | int]) -> str:
    """spec.values.a.b[0].c"""
    return "spec.values" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


@dataclass(frozen=True, slots=True)
class ValuesError:
    """One rule spec.values breaks, in the API server's words first, then ours (each starts
    with its path)."""

    text: str
    unlisted: bool = False
    """A key outside the list (said together with the others, then why once)."""
    hint: str | None = None
    """Of a key outside the list: what to set instead, where the list says."""


MAX_NAMED = 10
"""A refusal names at most this many values, then says how many more there are."""
NOT_LISTED_MANY = NOT_LISTED.replace("not a chart value", "not chart values", 1)


def _unlisted(path: tuple[str, ...], allowlist: Allowlist) -> ValuesError:
    """kubectl's strict field validation names the key the same way; the list may say what to
    set instead."""
    hint = allowlist.hint(path)
    return ValuesError(f'"{path_text(path)}"', True, hint.text if hint is not None else None)


def values_errors(values: Any, allowlist: Allowlist) -> list[ValuesError]:
    """Every rule spec.values breaks; empty when it holds only listed values of their types
    (nulls count as unset, as the API server drops them)."""
    return list(_errors(values, allowlist.tree, (), allowlist))


def values_message(errors: Sequence[ValuesError]) -> str:
    """The refusal of spec.values: every refused key by name (up to MAX_NAMED), each with what
    to set instead where the list says, then why they are refused."""
    shown = errors[:MAX_NAMED]
    by_hint: dict[str | None, list[str]] = {}
    for error in shown:
        if error.unlisted:
            by_hint.setdefault(error.hint, []).append(error.text)
    parts = [e.text for e in shown if not e.unlisted]
    if by_hint:
        named = ", ".join(
            f"unknown field{'s' if len(keys) > 1 else ''} {', '.join(keys)}"
            + (f" ({hint})" if hint else "")
            for hint, keys in by_hint.items()
        )
        many = sum(e.unlisted for e in errors) > 1
        parts.insert(0, f"{named}: {NOT_LISTED_MANY if many else NOT_LISTED}")
    more = len(errors) - len(shown)
    return "; ".join(parts) + (f"; and {more} more refused" if more else "")


def values_error(values: Any, allowlist: Allowlist) -> ValuesError | None:
    """None when spec.values holds only listed values of their types; else the whole refusal
    (values_message)."""
    errors = values_errors(values, allowlist)
    return ValuesError(values_message(errors)) if errors else None


def without_nothing(values: Mapping[str, Any]) -> dict[str, Any]:
    """The values without what says nothing: nulls (the API server drops them), empty maps (what
    the API server leaves of a map whose keys it pruned: `driver: {env: [...]}` is stored as
    `driver: {}`), and maps that hold only those. Merged over the module's values, a map merges
    key by key, so what is left never removes a value the module's rules wrote."""
    out: dict[str, Any] = {}
    for key, child in values.items():
        if isinstance(child, Mapping):
            kept = without_nothing(child)
            if kept:
                out[key] = kept
        elif child is not None:
            out[key] = child
    return out


def _errors(
    node: Any, tree: Tree | Allowed, path: tuple[str, ...], allowlist: Allowlist
) -> Iterator[ValuesError]:
    if node is None:
        return
    if isinstance(tree, Allowed):
        try:
            VALIDATE[tree.type](node, strict=True)
        except ValidationError as err:
            yield _leaf_error(err, tree, path)
        return
    if not isinstance(node, Mapping):
        where = path_text(path)
        got = json_type(node)
        yield ValuesError(f'{where}: Invalid value: "{got}": {where} in body must be of type '
                          f'object: "{got}"')  # fmt: skip
        return
    for key, child in node.items():
        sub = tree.get(key) if isinstance(key, str) else None
        if sub is None:
            if child is not None:
                yield _unlisted((*path, str(key)), allowlist)
            continue
        yield from _errors(child, sub, (*path, key), allowlist)


_BRANCHES = ("constrained-int", "constrained-str")
"""pydantic's names of the int-or-string branches, which are no keys of the values."""


def _leaf_error(err: ValidationError, allowed: Allowed, path: tuple[str, ...]) -> ValuesError:
    """In the API server's words (its OpenAPI or CEL rule), with the type's format in ours."""
    errors = err.errors()
    first = next((e for e in errors if e["type"] != "int_type"), errors[0])
    loc = tuple(p for p in first["loc"] if p not in _BRANCHES)
    said = FORMATS.get(allowed.type)
    hint = f"(a {allowed.type} value{': ' + said if said else ''}; {ALLOWLIST_DOC})"
    if "[key]" in loc:  # a map's key: the CRD's CEL rule on the map says it
        where = path_text((*path, *loc[: loc.index("[key]") - 1]))
        rule = GATES_RULE if allowed.type is ValueType.FEATURE_GATES else LABELS_RULE
        return ValuesError(f"{where}: Invalid value: {rule['message']} {hint}")
    where = path_text((*path, *loc))
    return ValuesError(f"{error_text(first, where)} {hint}")


def pruned_error(paths: Sequence[str]) -> ValidationError:
    """A Gpu's spec as invalid because the API server pruned `paths` (the model's words)."""
    others = ", ".join(paths[1:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    first = f'unknown field "{paths[0]}": {NOT_LISTED}'
    message = f"{first}; {PRUNED}" + (f" (so are {others})" if others else "")
    error = PydanticCustomError("spec_values", "{message}", {"message": message})
    return ValidationError.from_exception_data(
        "GpuSpec", [{"type": error, "loc": ("values",), "input": None}]
    )


def managed_values(managed_fields: Sequence[Mapping[str, Any]] | None) -> tuple[Any, ...]:
    """The spec.values fields each manager of a Gpu set (their fieldsV1 below f:values): what
    `unlisted_values` holds against the allowlist."""
    found = []
    for entry in managed_fields or ():
        fields = entry.get("fieldsV1")
        if isinstance(fields, str):
            fields = json.loads(fields)
        spec = fields.get("f:spec") if isinstance(fields, Mapping) else None
        values = spec.get("f:values") if isinstance(spec, Mapping) else None
        if isinstance(values, Mapping):
            found.append(values)
    return tuple(found)


def unlisted_values(fields: Sequence[Mapping[str, Any]], allowlist: Allowlist) -> list[str]:
    """spec.values paths that a manager of the Gpu set (`managed_values`) and the allowlist
    does not hold.

    After the list narrows, the API server prunes such values when it reads the Gpu, so the
    manager never sees them; their managedFields entries stay (metadata is never pruned). They
    show that the Gpu the user wrote is not the Gpu the module reads."""
    found: list[str] = []
    for values in fields:
        found += _unlisted_fields(values, allowlist.tree, ())
    return sorted(set(found))


def _unlisted_fields(fields: Mapping[str, Any], tree: Tree, path: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for name, child in fields.items():
        if not name.startswith("f:"):
            continue
        key = name[2:]
        sub = tree.get(key)
        if sub is None:
            found.append(".".join(("spec.values", *path, key)))
        elif not isinstance(sub, Allowed) and isinstance(child, Mapping):
            found += _unlisted_fields(child, sub, (*path, key))
    return found
