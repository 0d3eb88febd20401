"""The Gpu's Kyma dashboard extension (config/ui-extension, kyma_gpu_tools/dashboard.py): the
committed parts are what the generator makes from the CRD; every field a view reads and the
form writes is one the CRD has, read back from the committed YAML, not from the generator; the
form says what the CRD says of each field; the parts pass Busola's own schemas; and a field
renamed in the API fails the generator instead of leaving the extension behind."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu_tools.busola import Busola
from kyma_gpu_tools.crd import crd
from kyma_gpu_tools.dashboard import (
    CONFIG_MAP,
    EXTENSION_VERSION,
    NAMESPACE,
    PARTS,
    FieldError,
    Fields,
    gpu_fields,
    part_files,
    parts,
)

REPO = Path(__file__).resolve().parents[2]
EXTENSION = REPO / "config" / "ui-extension"
BUSOLA_SOURCES = REPO.parent / "shared" / "vendor" / "busola" / "busola-src.tar.gz"
FIELD = re.compile(r"(?:\$root\.)?((?:status|spec|metadata)(?:\.[A-Za-z][\w-]*|\[[^\]]*\])+)")
ITEM = re.compile(r"\$item\.([A-Za-z]\w*)")


@pytest.fixture(scope="module")
def busola() -> Busola:
    return Busola.read(BUSOLA_SOURCES)


def committed() -> dict[str, Any]:
    return {part: yaml.safe_load((EXTENSION / f"{part}.yaml").read_text(encoding="utf-8"))
            for part in PARTS}  # fmt: skip


def test_the_committed_parts_are_what_the_crd_makes() -> None:
    for name, text in part_files().items():
        assert (EXTENSION / name).read_text(encoding="utf-8") == text, (
            f"config/ui-extension/{name} is stale: run `make manifests`"
        )


def test_the_config_map_is_the_one_busola_reads() -> None:
    kustomization = yaml.safe_load((EXTENSION / "kustomization.yaml").read_text())
    labels = kustomization["generatorOptions"]["labels"]
    assert labels["busola.io/extension"] == "resource"
    assert labels["busola.io/extension-version"] == EXTENSION_VERSION
    (generator,) = kustomization["configMapGenerator"]
    assert (generator["name"], generator["namespace"]) == (CONFIG_MAP, NAMESPACE)
    assert sorted(entry.split("=")[0] for entry in generator["files"]) == sorted(PARTS)


def _fields_in(text: str) -> Iterator[str]:
    """The Gpu fields a JSONata expression names: filters become `[]`."""
    for found in FIELD.finditer(text):
        yield re.sub(r"\[[^\]]*\]", "[]", found.group(1)).replace("[].", "[].").rstrip(".")


def _view_fields(entry: Any, array: str | None = None) -> Iterator[str]:
    """Every field a list or details entry reads; `$item.x` under a table over ``array``."""
    if isinstance(entry, list):
        for item in entry:
            yield from _view_fields(item, array)
        return
    if not isinstance(entry, dict):
        return
    source = entry.get("source", "")
    inner = array
    if entry.get("widget") == "Table":
        inner = next(iter(_fields_in(source)))
    for key, value in entry.items():
        if isinstance(value, str) and key in ("source", "visibility", "description"):
            yield from _fields_in(value)
            for name in ITEM.findall(value):
                assert array is not None or inner is not None, f"$item outside a table: {value}"
                yield f"{array or inner}[].{name}"
        elif isinstance(value, (dict, list)):
            yield from _view_fields(value, inner)


@pytest.mark.parametrize("part", ["list", "details"])
def test_every_field_a_view_reads_is_in_the_crd(part: str) -> None:
    fields = gpu_fields()
    read = sorted(set(_view_fields(committed()[part])))
    assert read, part
    missing = []
    for path in read:
        try:
            fields.at(path.replace("[][]", "[]"))
        except FieldError as error:
            missing.append(str(error))
    assert not missing, missing


def _form_entries(entries: list[Any], prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for entry in entries:
        path = entry["path"]
        full = f"{prefix}{path}" if prefix else path
        full = full.replace(".[]", "[]")
        yield full, entry
        yield from _form_entries(entry.get("children") or [], f"{full}.")


def test_every_form_field_is_in_the_crd_and_says_what_the_crd_says() -> None:
    fields = gpu_fields()
    seen = 0
    for path, entry in _form_entries(committed()["form"], ""):
        schema = fields.at(path)
        if path.startswith("metadata."):
            continue
        seen += 1
        assert entry.get("description") == schema.get("description"), path
    assert seen > 100  # the whole spec, spec.values' allowlist included


def test_the_form_covers_the_typed_spec() -> None:
    spec = gpu_fields().at("spec")
    paths = {path for path, _ in _form_entries(committed()["form"], "")}
    assert {f"spec.{key}" for key in spec["properties"]} <= paths
    for wanted in ("spec.driver.upgradePolicy.drain.enable", "spec.sharing.profiles",
                   "spec.components.migManager", "spec.values.daemonsets.tolerations",
                   "spec.values.operator.resources.requests.cpu"):  # fmt: skip
        assert wanted in paths, wanted


def test_the_parts_pass_busolas_schemas(busola: Busola) -> None:
    assert EXTENSION_VERSION in busola.supported_versions()
    assert busola.problems(committed(), EXTENSION_VERSION) == []


@pytest.mark.parametrize(
    ("part", "plant"),
    [
        ("list", lambda p: p[0].update(widget="Gauge")),
        ("details", lambda p: p["body"][1].update(widget="Spreadsheet")),
        ("form", lambda p: p[1].update(widget="Slider")),
        ("general", lambda p: p.update(scope="galaxy")),
        ("details", lambda p: p["status"]["header"][0].update(copyable="yes")),
    ],
)
def test_busolas_schemas_catch_a_planted_mistake(busola: Busola, part: str, plant: Any) -> None:
    planted = copy.deepcopy(committed())
    plant(planted[part])
    found = busola.problems(planted, EXTENSION_VERSION, names=(part,))
    assert found, f"a planted mistake in {part} passed"


def test_an_unread_extension_version_is_caught(busola: Busola) -> None:
    assert busola.problems(committed(), "0.1", names=())


@pytest.mark.parametrize("field", ["gpus", "unhealthyNodes", "nodes", "chartVersion"])
def test_a_renamed_status_field_fails_the_generator(field: str) -> None:
    schema = copy.deepcopy(crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    status = schema["properties"]["status"]["properties"]
    status[f"{field}Renamed"] = status.pop(field)
    with pytest.raises(FieldError, match=field):
        parts(Fields(schema))


def test_a_renamed_spec_field_changes_the_form() -> None:
    schema = copy.deepcopy(crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    spec = schema["properties"]["spec"]["properties"]
    spec["sharingRenamed"] = spec.pop("sharing")
    form = parts(Fields(schema))["form"]
    assert form != committed()["form"]
    assert "spec.sharingRenamed" in {entry["path"] for entry in form}
