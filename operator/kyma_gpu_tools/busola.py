"""The Gpu's dashboard extension against Busola's own schemas, read from Busola's sources.

Busola describes what each part of a resource extension may hold in
`public/schemas/schema-{general,list,details,form}.yaml` (JSON Schema draft 07) and says which
`busola.io/extension-version`s it reads in `src/components/Extensibility/migration.js`. Both
come from the source tarball of the version the tests run (../shared/vendor/busola), read at
check time and never copied into the project. `make check` runs this
(`kyma-gpu dashboard-extension --check --busola ...`), tests/unit/test_dashboard.py too.
`Busola.read(tarball)` reads what the check needs in one pass over the archive.

Busola writes each widget's own fields as `if: {properties: {widget: {const: X}}} then: ...`.
JSON Schema's `if` also holds for an entry that names no widget (its `properties` check what is
there), which would make every plain entry an Alert, a ResourceLink and a ResourceList at once;
the check reads those rules as Busola's widgets do, for the entries that name the widget: each
`if` gets `required: [widget]` (`_as_busola_reads`). Nothing else of the schemas changes.

Busola's details schema validates `header` and `body`; its `status` section (a header and a body,
where Busola also takes the ConditionList widget its schema does not list) each entry but a
ConditionList is checked against the same component schema here.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

SCHEMA_PARTS = ("general", "list", "details", "form")
"""The parts Busola has a schema for (translations and presets have none)."""
ROOT = "busola"
"""The one folder the tarball unpacks to."""
_VERSIONS = re.compile(r"SUPPORTED_VERSIONS\s*=\s*\[([^\]]*)\]")


READ = (*(f"public/schemas/schema-{part}.yaml" for part in SCHEMA_PARTS),
        "src/components/Extensibility/migration.js")  # fmt: skip
"""The files of Busola's sources the check reads."""


@dataclass(frozen=True)
class Busola:
    """What the check reads of one Busola source tarball: READ's files, by path."""

    files: Mapping[str, str]

    @classmethod
    def read(cls, tarball: Path) -> Busola:
        """READ's files in one pass over the archive (a gzip stream is read from its start
        for each member asked for)."""
        wanted = {f"{ROOT}/{path}": path for path in READ}
        found: dict[str, str] = {}
        with tarfile.open(tarball, "r|gz") as archive:
            for member in archive:
                handle = archive.extractfile(member) if member.name in wanted else None
                if handle is not None:
                    found[wanted[member.name]] = handle.read().decode("utf-8")
        missing = sorted(set(READ) - set(found))
        if missing:
            raise FileNotFoundError(f"{tarball}: no {', '.join(missing)} under {ROOT}/")
        return cls(MappingProxyType(found))

    def schemas(self) -> dict[str, Any]:
        """Busola's schema of each part, its widget rules as Busola applies them."""
        return {part: _as_busola_reads(yaml.safe_load(
                    self.files[f"public/schemas/schema-{part}.yaml"]))
                for part in SCHEMA_PARTS}  # fmt: skip

    def supported_versions(self) -> list[str]:
        """The extension versions Busola reads (its migration.js)."""
        found = _VERSIONS.search(self.files["src/components/Extensibility/migration.js"])
        if found is None:
            raise ValueError("Busola's migration.js no longer says SUPPORTED_VERSIONS")
        return re.findall(r"['\"]([^'\"]+)['\"]", found.group(1))

    def problems(
        self, parts: Mapping[str, Any], version: str, names: Iterable[str] = SCHEMA_PARTS
    ) -> list[str]:
        """What Busola's schemas and its supported versions say against the parts (those of
        ``names``); [] when nothing."""
        found: list[str] = []
        if version not in self.supported_versions():
            found.append(f"extension version {version} is not one Busola reads "
                         f"({', '.join(self.supported_versions())})")  # fmt: skip
        validators = self._validators()
        for part in names:
            for error in validators[part].iter_errors(parts[part]):
                where = "/".join(str(step) for step in error.absolute_path)
                found.append(f"{part}: {where}: {error.message}")
        if "details" in names:
            for where, entry in _status_entries(parts["details"]):
                found.extend(f"details: {where}: {error.message}"
                             for error in validators["status"].iter_errors(entry))  # fmt: skip
        return found

    def _validators(self) -> dict[str, Any]:
        """A validator per part, and "status" for the details' status entries (a component)."""
        from jsonschema import Draft7Validator  # a dev dependency: only `make check` needs it

        loaded = self.schemas()
        details = loaded["details"]
        component = {**details["$defs"]["component"], "$defs": details["$defs"],
                     "$widgets": details["$widgets"]}  # fmt: skip
        return {**{part: Draft7Validator(schema) for part, schema in loaded.items()},
                "status": Draft7Validator(component)}  # fmt: skip


def _as_busola_reads(schema: dict[str, Any]) -> dict[str, Any]:
    """Each widget's `if` holds only for an entry that names a widget (see the module doc)."""
    for rule in (schema.get("$widgets") or {}).values():
        condition = rule.get("if")
        if isinstance(condition, dict) and "widget" in (condition.get("properties") or {}):
            condition.setdefault("required", ["widget"])
    return schema


def _status_entries(details: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    status = details.get("status") or {}
    for section in ("header", "body"):
        for index, entry in enumerate(status.get(section) or []):
            if entry.get("widget") != "ConditionList":
                yield f"status.{section}[{index}]", entry


def problems(parts: Mapping[str, Any], tarball: Path, version: str) -> list[str]:
    """Busola.read(tarball).problems(parts, version): the CLI's one call."""
    return Busola.read(tarball).problems(parts, version)
