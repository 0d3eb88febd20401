"""Typed rule data: one pydantic model per kind of file in values-rules/.

The models check the files when the catalog loads them, and give their JSON Schemas
(values-rules/schema/, `kyma-gpu rules-schema`). `parse` turns a validation error into a
RuleError that names the entry and carries its YAML keys, so that the catalog can add the line.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    RootModel,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from kyma_gpu.facts.node import OsFamily
from kyma_gpu.rules.rule_error import RuleError


class _Data(BaseModel):
    """A file's mapping: unknown keys are errors (typos must not pass silently)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )


class _CamelData(_Data):
    model_config = ConfigDict(alias_generator=to_camel)


class _Published(_Data):
    """Upstream's file (gardenlinux-nvidia-installer): keys we do not use are allowed."""

    model_config = ConfigDict(extra="allow")


# --- values -------------------------------------------------------------------------------


def _quoted(value: object) -> object:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} must be a quoted string (YAML reads 1877.20 as 1877.2)")
    return value


def _version(text: str) -> str:
    try:
        Version(text)
    except InvalidVersion as err:
        raise ValueError(f"{text!r} is not a version") from err
    return text


VersionText = Annotated[
    str,
    BeforeValidator(_quoted),
    AfterValidator(_version),
    WithJsonSchema({"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)*$"}),
]
"""A dotted version, quoted in YAML: "1877.21", "2150.9.0", "590.48.01"."""


def _branch_text(value: object) -> object:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


BranchOrVersion = Annotated[
    StrictStr,
    BeforeValidator(_branch_text),
    AfterValidator(_version),
    WithJsonSchema({"type": ["integer", "string"], "pattern": r"^[0-9]+(\.[0-9]+)*$"}),
]
"""A driver branch (590, an int in the published values) or full version ("590.48.01")."""


def _os_family(value: str) -> str:
    try:
        return str(OsFamily(value))
    except ValueError as err:
        known = ", ".join(f.value for f in OsFamily)
        raise ValueError(f"unknown OS family {value!r}; known: {known}") from err


OsFamilyName = Annotated[
    StrictStr, AfterValidator(_os_family), WithJsonSchema({"enum": [f.value for f in OsFamily]})
]
DriverModeName = Literal["Precompiled", "Preinstalled", "Upstream"]
GoDuration = Annotated[StrictStr, Field(pattern=r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")]


# --- rules.yaml ---------------------------------------------------------------------------

OPERATORS = ("contains", "exists", "not")


def _condition(cond: JsonValue) -> JsonValue:
    if isinstance(cond, dict):
        op = next(iter(cond), None)
        if len(cond) != 1 or op not in OPERATORS:
            raise ValueError(
                f"a condition must be a value, a list, or one of {list(OPERATORS)}; got {cond!r}"
            )
        if op == "exists" and not isinstance(cond[op], bool):
            raise ValueError(f"exists takes true or false; got {cond[op]!r}")
    return cond


def _operator(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: schema},
        "required": [name],
        "additionalProperties": False,
    }


Condition = Annotated[
    JsonValue,
    AfterValidator(_condition),
    WithJsonSchema(
        {
            "description": "equal to a value; any of a list; {not: v}; {contains: v} (for lists); "
            "{exists: true|false} (not null, empty string or empty list)",
            "anyOf": [
                {"type": ["string", "number", "boolean", "null"]},
                {"type": "array"},
                _operator("not", {}),
                _operator("contains", {}),
                _operator("exists", {"type": "boolean"}),
            ],
        }
    ),
]
When = dict[str, Condition]


def _empty_when(value: object) -> object:
    return {} if value is None else value


_BODIES = ("values", "values_file", "item")


class Rule(_Data):
    """One ordered rule of values-rules/rules.yaml. Exactly one of values, valuesFile, item."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["values"]},
                {"required": ["valuesFile"]},
                {"required": ["item", "forEach", "appendTo"]},
            ]
        }
    )

    name: StrictStr = Field(min_length=1)
    """Unique; the plan's provenance names the rule that set each value."""
    why: StrictStr = ""
    """The reason, for reviewers."""
    when: Annotated[When, BeforeValidator(_empty_when)] = Field(default_factory=dict)
    """All must hold. Keys: the rule context (values-rules/context.md)."""
    values: dict[str, JsonValue] | None = None
    """A chart values fragment; "${key}" is replaced by a context value."""
    values_file: StrictStr | None = Field(default=None, alias="valuesFile")
    """A file below values-rules/ (templated path), merged like values."""
    for_each: Literal["pools"] | None = Field(default=None, alias="forEach")
    """With item: one list entry per GPU OS pool that needs a driver."""
    append_to: StrictStr | None = Field(default=None, alias="appendTo")
    """With item: the list key the entries are appended to."""
    item: dict[str, JsonValue] | None = None
    """With forEach: the list entry; the pool keys of the context may be used."""

    @model_validator(mode="after")
    def _one_body(self) -> Rule:
        bodies = [
            type(self).model_fields[f].alias or f for f in _BODIES if f in self.model_fields_set
        ]
        if len(bodies) != 1:
            raise ValueError(f"needs exactly one of values, valuesFile, item; got {bodies}")
        if "item" in self.model_fields_set and (self.for_each != "pools" or not self.append_to):
            raise ValueError("item needs forEach: pools and appendTo: <list key>")
        return self


class ImageMirror(_Data):
    """The image mirror step, applied after every rule and before spec.values."""

    when: Annotated[When, BeforeValidator(_empty_when)] = Field(default_factory=dict)
    """When to point the chart's images at spec.source.imageRegistry."""


class RulesFile(_CamelData):
    """values-rules/rules.yaml: the rules, applied in order, and the image mirror step."""

    rules: list[Rule] = Field(min_length=1)
    image_mirror: ImageMirror | None = None

    def duplicate(self) -> int | None:
        """The index of the first rule whose name an earlier rule has, or None."""
        seen: set[str] = set()
        for index, rule in enumerate(self.rules):
            if rule.name in seen:
                return index
            seen.add(rule.name)
        return None


# --- defaults.yaml ------------------------------------------------------------------------


class ChartPin(_Data):
    """The NVIDIA GPU Operator chart the module installs by default."""

    name: StrictStr
    version: StrictStr
    repository: StrictStr


class FluxDefaults(_CamelData):
    """Flux settings of the HelmRelease and its source. Durations are Go durations."""

    interval: GoDuration
    source_interval: GoDuration
    timeout: GoDuration
    retry_interval: GoDuration
    uninstall_timeout: GoDuration
    service_account_name: StrictStr


class Defaults(_CamelData):
    """values-rules/defaults.yaml: the module's pinned defaults."""

    chart: ChartPin
    installer_release: StrictStr
    installer_repository: StrictStr
    module_namespace: StrictStr
    target_namespace: StrictStr
    release_name: StrictStr
    auto_driver_mode: dict[OsFamilyName, DriverModeName]
    """Driver mode per OS family when spec.driver.mode is Auto."""
    os_release_id: dict[OsFamilyName, StrictStr]
    """/etc/os-release ID per OS family (NFD's system-os_release.ID label)."""
    nvidia_driver_repository: StrictStr
    flux_settings: FluxDefaults = Field(alias="flux")

    @property
    def chart_version(self) -> str:
        return self.chart.version

    @property
    def chart_repository(self) -> str:
        return self.chart.repository

    @property
    def chart_name(self) -> str:
        return self.chart.name


# --- machine-types.yaml, gpu-families.yaml -----------------------------------------------

CheckedDate = Annotated[StrictStr, Field(pattern=r"^20[0-9]{2}-[01][0-9]-[0-3][0-9]$")]
"""The day a fact was checked against its source, YYYY-MM-DD (quoted in YAML)."""
SourceUrl = Annotated[StrictStr, Field(pattern=r"^https://[^\s]+$")]
Arch = Literal["amd64", "arm64"]


def _size(value: object) -> object:
    """A machine type's bare GPU count stands for {count: N}."""
    return {"count": value} if isinstance(value, int) and not isinstance(value, bool) else value


class MachineSize(_CamelData):
    """One machine type of a family: its GPU count, or a fraction of one GPU."""

    count: StrictInt = Field(ge=1)
    """GPUs of the machine type (1 for a fraction of one)."""
    partition: StrictStr | None = Field(default=None, pattern=r"^[0-9]+/[0-9]+$")
    """A fraction of one GPU, e.g. "1/6"."""
    unofficial: StrictBool = False
    """Facts from third-party sources: likely, not certain."""


SizeEntry = Annotated[
    MachineSize,
    BeforeValidator(_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "description": "the GPU count"},
                {
                    "type": "object",
                    "properties": {
                        "count": {"type": "integer", "minimum": 1},
                        "partition": {"type": "string", "pattern": r"^[0-9]+/[0-9]+$"},
                        "unofficial": {"type": "boolean"},
                    },
                    "required": ["count"],
                    "additionalProperties": False,
                },
            ]
        }
    ),
]


class MachineFamily(_CamelData):
    """One instance family: its GPU, and its machine types with their GPU counts."""

    source: SourceUrl
    """The provider's page that lists the family."""
    checked: CheckedDate
    """When the entry was checked against the source."""
    gpu: StrictStr = Field(min_length=1)
    """GPU model, e.g. L4, "A100 80GB", B200."""
    memory_gib: StrictInt = Field(ge=1)
    """Memory of one whole GPU, GiB."""
    compute_capability: StrictStr = Field(pattern=r"^[0-9]+\.[0-9]$")
    """CUDA compute capability ("8.9"); MPS serves 48 clients per GPU from 7.5 on, else 16."""
    mig: StrictBool
    """The GPU has Multi-Instance GPU (MIG)."""
    arch: Arch = "amd64"
    """The host CPU: amd64, or arm64 (AWS Graviton, NVIDIA Grace)."""
    vgpu_guest_driver: StrictBool = False
    """The VM gets a vGPU and needs NVIDIA's licensed vGPU guest (GRID) driver."""
    last_driver_branch: BranchOrVersion | None = None
    """The newest NVIDIA driver branch that supports the GPU (580 for Maxwell, Pascal, Volta)."""
    unofficial: StrictBool = False
    """The family's facts come from third-party sources: likely, not certain."""
    note: StrictStr = ""
    """Anything a reviewer should know about the entry."""
    types: dict[StrictStr, SizeEntry] = Field(min_length=1)
    """Machine type (node.kubernetes.io/instance-type) -> GPU count, or {count, partition}."""


class MachineTypesFile(RootModel[dict[StrictStr, dict[StrictStr, MachineFamily]]]):
    """values-rules/machine-types.yaml: provider -> instance family -> GPUs and machine types."""

    model_config = ConfigDict(frozen=True)

    def duplicate(self) -> tuple[str, str] | None:
        """(provider, machine type) of a machine type listed under two families, or None."""
        for provider, families in self.root.items():
            seen: set[str] = set()
            for family in families.values():
                again = seen & set(family.types)
                if again:
                    return provider, sorted(again)[0]
                seen |= set(family.types)
        return None


class ProviderFamilies(_CamelData):
    """The GPU instance families one provider lists today, as its documentation names them."""

    source: SourceUrl
    checked: CheckedDate
    families: list[StrictStr] = Field(min_length=1)
    """Families with NVIDIA GPUs; the registry must have each."""
    attached: list[StrictStr] = []
    """Families whose GPUs are attached to a general machine type (GCP n1): not in the machine
    type, so nodes opt in by label."""
    not_nvidia: list[StrictStr] = []
    """Accelerated families without NVIDIA GPUs (AMD, Gaudi, Inferentia, FPGAs): not listed."""


class GpuFamiliesFile(RootModel[dict[StrictStr, ProviderFamilies]]):
    """values-rules/gpu-families.yaml: provider -> the GPU families of its current list."""

    model_config = ConfigDict(frozen=True)


# --- nvidia-drivers.yaml ------------------------------------------------------------------


class PublishedDriver(_CamelData):
    """One driver version NVIDIA publishes as a driver container, and for which OSes."""

    version: VersionText
    os: list[StrictStr] = Field(min_length=1)
    """OS tags the image exists for (the tag is <version>-<os tag>, e.g. 580.126.20-ubuntu22.04)."""
    source: StrictStr = Field(min_length=1)
    """Where the entry comes from (a chart default, a release note, the NGC catalog)."""
    unofficial: StrictBool = False
    """Not confirmed on NVIDIA's own pages: likely, not certain."""


class NvidiaDriversFile(_CamelData):
    """values-rules/nvidia-drivers.yaml: the NVIDIA driver container images per OS."""

    repository: StrictStr
    """The image, without the tag (nvcr.io/nvidia/driver)."""
    source: SourceUrl
    checked: CheckedDate
    os_tag_parts: dict[OsFamilyName, StrictInt] = Field(min_length=1)
    """OS family -> how many parts of the OS version the NVIDIA operator puts in the tag
    (ubuntu22.04: 2; rhel9: 1). Families not listed get no driver container."""
    multi_arch: list[StrictStr] = []
    """OS tags whose images are published for arm64 too; the others are amd64 only."""
    drivers: list[PublishedDriver] = Field(min_length=1)


# --- charts/<version>.yaml ----------------------------------------------------------------


class ChartImage(_Data):
    """One image location in the chart values: <path>.repository (+ image or tag)."""

    path: StrictStr
    repository: StrictStr
    image: StrictStr | None = None
    version: StrictStr | None = None


class ChartFacts(_CamelData):
    """values-rules/charts/<version>.yaml: what the module knows of one chart version without
    downloading it (generated by `kyma-gpu chart-facts`)."""

    version: StrictStr
    default_driver_version: StrictStr
    stacks: tuple[Literal["DevicePlugin", "DRA"], ...] = ("DevicePlugin",)
    """The GPU stacks the chart deploys: DevicePlugin (ClusterPolicy), DRA (GPUCluster)."""
    images: tuple[ChartImage, ...]


# --- image-digests.yaml (a release's, not committed) ---------------------------------------

IMAGE_REFERENCE_PATTERN = r"^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
"""host[:port]/path:tag, no digest: an image as the chart facts and rules name it."""
IMAGE_DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"


class ImageDigestsFile(_Data):
    """values-rules/image-digests.yaml: the manifest digest of every operand image of a
    release, by the reference the chart facts and the rules give it. `hack/module.py release`
    asks the registry the release copies from and writes it into the release's image and
    folder; a source checkout has none, and the plan then names its images by tag only."""

    images: dict[
        Annotated[str, Field(pattern=IMAGE_REFERENCE_PATTERN)],
        Annotated[str, Field(pattern=IMAGE_DIGEST_PATTERN)],
    ] = Field(max_length=4096)
    """host/path:tag -> sha256:<64 hex> (an image index's digest for a multi-arch image)."""


# --- chart-rbac.yaml ----------------------------------------------------------------------

RbacWord = Annotated[StrictStr, Field(pattern=r"^[a-z0-9.*/-]*$")]
"""An API group, a resource or a verb as RBAC spells them (the core group is empty)."""
ChartVersion = Annotated[StrictStr, Field(pattern=r"^v[0-9]+\.[0-9]+\.[0-9]+$")]


class ChartRule(_CamelData):
    """A PolicyRule, in the order the chart's template writes its lists."""

    api_groups: tuple[RbacWord, ...] = Field(min_length=1)
    resources: tuple[RbacWord, ...] = Field(min_length=1)
    verbs: tuple[RbacWord, ...] = Field(min_length=1)


class RuleNarrowing(_CamelData):
    """One rule of a chart's ClusterRole that a Flux post-renderer narrows before Helm applies
    it: some verbs stay for every object, the others hold only for the named objects."""

    chart_versions: tuple[ChartVersion, ...] = Field(min_length=1)
    cluster_role: StrictStr = Field(min_length=1)
    index: StrictInt = Field(ge=0)
    """The rule's position in the rendered ClusterRole (hack/release_rbac.py checks it)."""
    rule: ChartRule
    """The rule as the chart renders it: the post-renderer fails the release if it differs."""
    unnamed_verbs: tuple[RbacWord, ...]
    """The verbs kept for every object (create, list and watch carry no name)."""
    resource_names: tuple[StrictStr, ...] = Field(min_length=1)
    """The objects the rule's other verbs still apply to."""
    why: StrictStr = Field(min_length=1)

    @model_validator(mode="after")
    def _verbs_of_the_rule(self) -> RuleNarrowing:
        extra = set(self.unnamed_verbs) - set(self.rule.verbs)
        if extra:
            raise ValueError(f"unnamedVerbs {sorted(extra)} are not verbs of the rule")
        if not self.named_verbs:
            raise ValueError("unnamedVerbs keep every verb of the rule: nothing is narrowed")
        return self

    @property
    def named_verbs(self) -> tuple[str, ...]:
        return tuple(v for v in self.rule.verbs if v not in self.unnamed_verbs)


class ChartRbacFile(_CamelData):
    """values-rules/chart-rbac.yaml: the chart rules the module narrows."""

    narrowings: tuple[RuleNarrowing, ...] = ()


# --- installer/<tag>/ ---------------------------------------------------------------------


def _default_arches(value: object) -> object:
    return value or ["amd64"]


def _no_list(value: object) -> object:
    return [] if value is None else value


class ExcludedCombination(_Published):
    """No image for drivers of this prefix on Garden Linux from this version on."""

    os_version_min: VersionText
    driver_version_prefix: StrictStr
    reason: StrictStr = ""


class InstallerVersions(_Published):
    """values-rules/installer/<tag>/versions.yaml: the release's build matrix, as published."""

    os_versions: list[VersionText] = Field(min_length=1)
    nvidia_drivers: list[VersionText] = Field(min_length=1)
    cpu_arch: Annotated[list[StrictStr], BeforeValidator(_default_arches)] = ["amd64"]
    excluded_combinations: Annotated[list[ExcludedCombination], BeforeValidator(_no_list)] = []
    kernel_flavour: list[StrictStr] = []
    gvisor_driver_pins: dict[StrictStr, StrictStr] = {}


class InstallerDriverValues(_Published):
    version: BranchOrVersion
    """The driver branch the release's images are built for by default."""


class InstallerValues(_Published):
    """values-rules/installer/<tag>/gpu-operator-values.yaml: the release's chart values
    (merged whole by a rule); the module reads driver.version."""

    driver: InstallerDriverValues


# --- errors -------------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], data: object, label: str) -> M:
    """Validate a file's data; a RuleError names the entry ("<label>: <path>: <problem>").

    label: the file's path below values-rules/."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise rule_error(model, err, label, data) from err


def rule_error(model: type[BaseModel], err: ValidationError, label: str, data: object) -> RuleError:
    errors = err.errors(include_url=False)
    first = errors[0]
    loc = tuple(k for k in first["loc"] if k != "[key]")  # a bad mapping key: at the key
    problem = _problem(model, first)
    parent = loc[:-1] if first["type"] in ("extra_forbidden", "missing") else loc
    path = _path(parent, data)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    message = f"{label}: {path + ': ' if path else ''}{problem}{more}"
    return RuleError(message, keys=loc, file=label)


def _problem(model: type[BaseModel], error: ErrorDetails) -> str:
    loc = tuple(k for k in error["loc"] if k != "[key]")
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(allowed_keys(model, loc[:-1]))
        return f"unknown key {loc[-1]!r}; allowed: {allowed}"
    if error["type"] == "missing":
        return f"missing key {loc[-1]!r}"
    if error["type"] in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping (got {_short(error['input'])})"
    if error["type"] == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    return f"{error['msg']} (got {_short(error['input'])})"


def _short(value: object) -> str:
    text = repr(value)
    return text[:60] + "..." if len(text) > 60 else text


def _path(loc: Sequence[str | int], data: object) -> str:
    """rules/2 ('precompiled-branch')/when: list items show their name."""
    parts: list[str] = []
    node = data
    for key in loc:
        node = _step(node, key)
        named = isinstance(key, int) and isinstance(node, Mapping) and "name" in node
        parts.append(
            f"{key} ({node['name']!r})" if named and isinstance(node, Mapping) else str(key)
        )
    return "/".join(parts)


def _step(node: object, key: str | int) -> object:
    if isinstance(node, Mapping):
        return node.get(key)
    if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
        return node[key]
    return None


def allowed_keys(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The keys (wire names) the model allows at loc, pydantic's location of the parent object:
    for "unknown key" errors, here and in `kyma-gpu plan` (kyma_gpu_tools/spec_errors.py)."""
    annotation: object = model
    for key in loc:
        annotation = _inner(_unwrap(annotation), key)
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return sorted(f.alias or name for name, f in annotation.model_fields.items())
    return []


def _unwrap(annotation: object) -> object:
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        elif isinstance(annotation, type) and issubclass(annotation, RootModel):
            annotation = annotation.model_fields["root"].annotation
        else:
            return annotation


def _inner(annotation: object, key: str | int) -> object:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if key in (name, field.alias):
                return field.annotation
        return None
    args = get_args(annotation)
    if get_origin(annotation) in (list, tuple) and args:
        return args[0]
    if get_origin(annotation) is dict and len(args) == 2:
        return args[1]
    return None
