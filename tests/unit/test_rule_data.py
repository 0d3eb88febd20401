"""The typed rule data: the committed JSON Schemas and context docs are the generated ones,
every YAML file names its schema, and the rule context model covers what the rules use."""

from __future__ import annotations

import io
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.context import PoolContext, RuleContext
from kyma_gpu_tools.cli import main
from kyma_gpu_tools.rules_schema import FILES, SCHEMAS, generated, stale

REPO_RULES = Path(__file__).resolve().parents[2] / "values-rules"


def test_the_committed_schemas_and_docs_are_current() -> None:
    assert stale(REPO_RULES) == [], "run `make rules-schema`"


def test_rules_schema_check_and_write(tmp_path: Path) -> None:
    root = tmp_path / "values-rules"
    shutil.copytree(REPO_RULES, root)
    (root / "context.md").write_text("hand-written\n", encoding="utf-8")
    versions = root / "installer" / "1.17.0" / "versions.yaml"
    versions.write_text(versions.read_text("utf-8").split("\n", 1)[1], encoding="utf-8")
    (root / "schema" / "rules.json").unlink()

    out = io.StringIO()
    assert main(["rules-schema", "--check", "--rules", str(root)], stdout=out) == 1
    report = out.getvalue()
    assert "context.md is stale" in report
    assert "schema/rules.json is stale" in report
    assert (
        "installer/1.17.0/versions.yaml: the first line must be "
        "`# yaml-language-server: $schema=../../schema/installer-versions.json`"
    ) in report

    out = io.StringIO()
    assert main(["rules-schema", "--rules", str(root)], stdout=out) == 0
    assert main(["rules-schema", "--check", "--rules", str(root)], stdout=io.StringIO()) == 0
    assert (root / "context.md").read_text("utf-8") == generated()["context.md"]
    Catalog(root).check()  # the header lines are comments


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((REPO_RULES / "schema" / f"{name}.json").read_text("utf-8"))
    return schema


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schemas_are_json_schema_documents(name: str) -> None:
    schema = _schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(("pattern", "name"), FILES)
def test_the_schemas_accept_the_committed_files(pattern: str, name: str) -> None:
    """What an editor with the YAML language server says of the files: no error."""
    validator = Draft202012Validator(_schema(name))
    paths = sorted(REPO_RULES.glob(pattern))
    assert paths
    for path in paths:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text("utf-8")))]
        assert errors == [], path


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("rules", {"rules": [{"name": "x", "values": {}, "valuesFile": "f"}]}),
        ("rules", {"rules": [{"name": "x", "valuesFiel": "f"}]}),
        ("rules", {"rules": [{"name": "x", "values": {}, "when": {"a": {"equals": 1}}}]}),
        ("rules", {"rules": [{"name": "x", "item": {}, "forEach": "pools"}]}),
        ("machine-types", {"aws": {"g6.xlarge": {"gpu": "L4", "count": 0}}}),
        ("installer-versions", {"os_versions": [1877.2], "nvidia_drivers": ["590.48.01"]}),
        ("chart-facts", {"version": "v1", "defaultDriverVersion": "590", "imgs": []}),
    ],
)
def test_the_schemas_refuse_what_the_models_refuse(name: str, data: dict[str, Any]) -> None:
    assert list(Draft202012Validator(_schema(name)).iter_errors(data))
    with pytest.raises(ValidationError):
        SCHEMAS[name].model_validate(data)


def _used_keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for inner in value.values():
            yield from _used_keys(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _used_keys(inner)
    elif isinstance(value, str):
        yield from re.findall(r"\$\{([A-Za-z0-9_.-]+)\}", value)


def test_the_context_model_has_every_key_the_rules_use(catalog: Catalog) -> None:
    documented = set(generated()["context.md"].split("`"))
    used: set[str] = set(catalog.rules.mirror_when)
    for rule in catalog.rules.rules:
        used |= set(rule.when)
        used |= set(_used_keys([rule.values, rule.item, rule.values_file]))
    assert "nvidia.repository" in used
    assert used <= documented, used - documented


FLAT: dict[str, Any] = {
    "cluster.gpuNodes": 1,
    "cluster.osFamilies": ["gardenlinux"],
    "driver.mode": "Precompiled",
    "driver.nvidiaDriverObjects": False,
    "driver.os": "gardenlinux",
    "driver.branch": "590",
    "driver.version": None,
    "installer.release": "1.17.0",
    "installer.used": True,
    "installer.repository": "ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0",
    "nvidia.repository": "nvcr.io/nvidia",
    "source.imageRegistry": None,
    "source.imagePullSecrets": ["pull"],
    "source.imagePullSecretRefs": [{"name": "pull"}],
    "components.dcgmExporter": True,
    "components.serviceMonitor": False,
    "components.migManager": False,
    "components.gpuFeatureDiscovery": True,
    "components.nodeFeatureDiscovery": "GpuNodes",
    "components.nodeStatusExporter": False,
    "components.migStrategy": "Single",
    "components.vgpuManager": False,
    "components.vgpuManagerImage": None,
    "components.sandboxWorkloads": "Off",
    "components.confidentialComputing": False,
    "components.gpuDirectStorage": False,
    "components.gdrcopy": False,
    "upgradePolicy.autoUpgrade": True,
    "upgradePolicy.maxParallelUpgrades": 1,
    "upgradePolicy.maxUnavailable": "25%",
    "upgradePolicy.waitForCompletion": {"timeoutSeconds": 0, "podSelector": ""},
    "upgradePolicy.podDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
    "upgradePolicy.drain": {
        "enable": False,
        "force": False,
        "podSelector": "",
        "timeoutSeconds": 300,
        "deleteEmptyDir": False,
    },
    "sharing.configured": True,
    "sharing.mode": "TimeSlicing",
    "sharing.configMap": "kyma-gpu-device-plugin-config-0123abcd",
    "sharing.default": "default",
    "sharing.configs": {"default": "version: v1\n"},
    "stack.mode": "DevicePlugin",
    "mig.strategy": "single",
    "sandbox.enabled": False,
    "sandbox.mode": "kubevirt",
    "vgpu.repository": None,
    "vgpu.image": None,
    "vgpu.version": None,
    "nfd.namespace": "gpu-operator",
    "nfd.workerAffinity": {"nodeAffinity": {}},
}


def test_the_context_round_trips() -> None:
    checked = RuleContext.checked(FLAT)
    assert checked == FLAT
    assert list(checked) == list(FLAT)


@pytest.mark.parametrize(
    "change",
    [
        {"driver.flavour": "x"},  # a key nobody documented
        {"driver.mode": "Auto"},  # not a cluster mode
        {"cluster.gpuNodes": "1"},  # a string where an int belongs
        {"installer.used": 1},
    ],
)
def test_the_context_refuses_what_the_docs_do_not_say(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RuleContext.checked({**FLAT, **change})


def test_a_missing_context_key_is_refused() -> None:
    with pytest.raises(ValidationError):
        RuleContext.checked({k: v for k, v in FLAT.items() if k != "nvidia.repository"})


def test_the_pool_context() -> None:
    pool = {
        "pool.name": "gpu-ubuntu",
        "pool.os": "ubuntu",
        "pool.osReleaseId": "ubuntu",
        "pool.mode": "Upstream",
        "pool.usePrecompiled": False,
        "pool.repository": "nvcr.io/nvidia",
        "pool.imagePullPolicy": "IfNotPresent",
        "pool.version": "590.48.01",
    }
    assert PoolContext.checked(pool) == pool
    with pytest.raises(ValidationError):
        PoolContext.checked({**pool, "pool.mode": "Preinstalled"})
