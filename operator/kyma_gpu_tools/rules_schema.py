"""Files generated from the models of the rule data: a JSON Schema per kind of file in
values-rules/schema/ (editors validate the YAML files with them: each file names its schema in
a `# yaml-language-server: $schema=...` first line) and the rule context's documentation,
values-rules/context.md. `kyma-gpu rules-schema` writes them; `--check` says what is stale.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal, Union, get_args, get_origin

from pydantic import BaseModel

from kyma_gpu.api.values import AllowlistFile
from kyma_gpu.rules.context import PoolContext, RuleContext
from kyma_gpu.rules.data_models import (
    ChartFacts,
    ChartRbacFile,
    Defaults,
    GpuFamiliesFile,
    ImageDigestsFile,
    InstallerValues,
    InstallerVersions,
    MachineTypesFile,
    NvidiaDriversFile,
    RulesFile,
)

SCHEMAS: Mapping[str, type[BaseModel]] = types.MappingProxyType({
    "rules": RulesFile,
    "defaults": Defaults,
    "machine-types": MachineTypesFile,
    "gpu-families": GpuFamiliesFile,
    "nvidia-drivers": NvidiaDriversFile,
    "chart-facts": ChartFacts,
    "chart-rbac": ChartRbacFile,
    "installer-versions": InstallerVersions,
    "installer-values": InstallerValues,
    "values-allowlist": AllowlistFile,
    "image-digests": ImageDigestsFile,
})  # fmt: skip
"""Schema name (values-rules/schema/<name>.json) -> the model of its files."""

FILES: tuple[tuple[str, str], ...] = (
    ("rules.yaml", "rules"),
    ("defaults.yaml", "defaults"),
    ("machine-types.yaml", "machine-types"),
    ("gpu-families.yaml", "gpu-families"),
    ("nvidia-drivers.yaml", "nvidia-drivers"),
    ("charts/*.yaml", "chart-facts"),
    ("chart-rbac.yaml", "chart-rbac"),
    ("installer/*/versions.yaml", "installer-versions"),
    ("installer/*/gpu-operator-values.yaml", "installer-values"),
    ("values-allowlist.yaml", "values-allowlist"),
)
"""Which committed files (globs below values-rules/) each schema describes. image-digests.yaml
is a release's (hack/module.py writes it with its header), never committed."""


def json_schema(name: str) -> str:
    """values-rules/schema/<name>.json."""
    schema = SCHEMAS[name].model_json_schema(by_alias=True, mode="validation")
    document = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def generated() -> dict[str, str]:
    """Path below values-rules/ -> content, for every generated file."""
    files = {f"schema/{name}.json": json_schema(name) for name in SCHEMAS}
    files["context.md"] = context_markdown()
    return files


def header(relative: str, name: str) -> str:
    """The first line of a YAML file below values-rules/ that names its schema."""
    up = "../" * relative.count("/")
    return f"# yaml-language-server: $schema={up}schema/{name}.json"


def _headless(root: Path) -> list[tuple[Path, str]]:
    """YAML files whose first line does not name their schema, with the line they need."""
    found = []
    for pattern, name in FILES:
        for path in sorted(root.glob(pattern)):
            wanted = header(path.relative_to(root).as_posix(), name)
            if path.read_text("utf-8").split("\n", 1)[0] != wanted:
                found.append((path, wanted))
    return found


def stale(root: Path) -> list[str]:
    """Generated files that differ from what the models give, and YAML files whose first line
    does not name their schema (empty: all current)."""
    problems = [
        f"{relative} is stale"
        for relative, text in generated().items()
        if not (root / relative).is_file() or (root / relative).read_text("utf-8") != text
    ]
    problems += [
        f"{path.relative_to(root).as_posix()}: the first line must be `{wanted}`"
        for path, wanted in _headless(root)
    ]
    return problems


def write(root: Path) -> list[str]:
    """Write the generated files and the YAML files' schema lines; the paths that changed."""
    written = []
    for relative, text in generated().items():
        path = root / relative
        if not path.is_file() or path.read_text("utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, "utf-8")
            written.append(relative)
    for path, wanted in _headless(root):
        lines = path.read_text("utf-8").split("\n")
        if lines[0].startswith("# yaml-language-server:"):
            lines = lines[1:]
        path.write_text("\n".join([wanted, *lines]), "utf-8")
        written.append(path.relative_to(root).as_posix())
    return written


# --- values-rules/context.md ----------------------------------------------------------------


def _type_name(annotation: object) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = annotation.model_fields.items()
        return (
            "{" + ", ".join(f"{f.alias or n}: {_type_name(f.annotation)}" for n, f in fields) + "}"
        )
    return getattr(annotation, "__name__", str(annotation))


def _rows(prefix: str, model: type[BaseModel]) -> Iterator[str]:
    for name, field in model.model_fields.items():
        key = f"{prefix}.{field.alias or name}"
        doc = " ".join((field.description or "").split()).replace("|", "\\|")
        yield f"| `{key}` | {_type_name(field.annotation)} | {doc} |"


def context_markdown() -> str:
    """values-rules/context.md."""
    lines = [
        "# Rule context",
        "",
        "<!-- Generated by `kyma-gpu rules-schema` from operator/kyma_gpu/rules/context.py."
        " Do not edit. -->",
        "",
        "The keys a rule's `when` and its `${key}` templates can use (values-rules/rules.yaml)."
        " An unknown key is an error, not a silent false.",
        "",
        "| Key | Type | Meaning |",
        "|---|---|---|",
    ]
    for name, field in RuleContext.model_fields.items():
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            lines.extend(_rows(field.alias or name, section))
    lines += ["", f"{' '.join((PoolContext.__doc__ or '').split())}", ""]
    lines += ["| Key | Type | Meaning |", "|---|---|---|", *_rows("pool", PoolContext), ""]
    return "\n".join(lines)
