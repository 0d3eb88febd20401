"""The data of values-rules/: machine types, the catalog loader and its errors."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kyma_gpu.facts import MachineType, MachineTypeRegistry
from kyma_gpu.rules.catalog import ENV_RULES_DIR, Catalog, machine_type_registry
from kyma_gpu.rules.engine import RuleError

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"


@pytest.mark.parametrize(
    ("provider", "machine_type", "gpu", "count"),
    [
        # What Kyma offers today: AWS g4dn and g6, GCP g2-standard, Azure NC*as_T4_v3.
        ("aws", "g4dn.xlarge", "T4", 1),
        ("aws", "g4dn.12xlarge", "T4", 4),
        ("aws", "g4dn.metal", "T4", 8),
        ("aws", "g6.xlarge", "L4", 1),
        ("aws", "g6.12xlarge", "L4", 4),
        ("aws", "g6.48xlarge", "L4", 8),
        ("aws", "p4d.24xlarge", "A100 40GB", 8),
        ("gcp", "g2-standard-8", "L4", 1),
        ("gcp", "g2-standard-24", "L4", 2),
        ("gcp", "g2-standard-96", "L4", 8),
        ("gcp", "a2-megagpu-16g", "A100 40GB", 16),
        ("azure", "Standard_NC4as_T4_v3", "T4", 1),
        ("azure", "Standard_NC64as_T4_v3", "T4", 4),
        ("azure", "Standard_NC80adis_H100_v5", "H100 NVL", 2),
    ],
)
def test_registry_knows_the_offered_machine_types(
    registry: MachineTypeRegistry, provider: str, machine_type: str, gpu: str, count: int
) -> None:
    found = registry.lookup(provider, machine_type)
    assert found is not None
    assert (found.gpu, found.count) == (gpu, count)


def test_registry_flags(registry: MachineTypeRegistry) -> None:
    assert registry.lookup("aws", "g6e.xlarge") == MachineType("L40S", 1, unofficial=True)
    assert registry.lookup("azure", "Standard_NV6ads_A10_v5") == MachineType(
        "A10", 1, partition="1/6"
    )
    assert registry.lookup("aws", "g6.xlarge") == MachineType("L4", 1)


@pytest.mark.parametrize(
    ("provider", "machine_type"),
    [
        ("aws", None),
        ("aws", ""),
        ("aws", "m6i.large"),
        ("gcp", "n1-standard-8"),  # GPUs attached to n1 are not in the machine type
        ("gcp", "g6.xlarge"),  # an AWS type on GCP
        ("unknown", "g6.xlarge"),
        ("openstack", "g_c16_m64"),
    ],
)
def test_registry_misses(
    registry: MachineTypeRegistry, provider: str, machine_type: str | None
) -> None:
    assert registry.lookup(provider, machine_type) is None


def test_registry_matches_the_reference_table(registry: MachineTypeRegistry) -> None:
    """Every machine type named in shared/reference/machine-types.md rows we can parse is known."""
    reference = SHARED / "reference" / "machine-types.md"
    if not reference.is_file():
        pytest.fail("../shared/reference is missing: it is laid next to the checkout")
    text = reference.read_text(encoding="utf-8")
    for provider, names in {
        "aws": ["g4dn.xlarge", "g5.48xlarge", "g5g.metal", "p5.48xlarge", "p3dn.24xlarge"],
        "gcp": ["g2-standard-4", "g2-standard-96", "a3-ultragpu-8g", "a2-megagpu-16g"],
        "azure": ["Standard_ND96isr_H100_v5", "Standard_NV72ads_A10_v5", "Standard_NC6s_v3"],
    }.items():
        for name in names:
            assert name in text, name
            assert registry.lookup(provider, name) is not None, (provider, name)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"aws": ["g6.xlarge"]}, "aws: must be a mapping (got ['g6.xlarge'])"),
        ({"aws": {"g6.xlarge": "L4"}}, "aws/g6.xlarge: must be a mapping (got 'L4')"),
        ({"aws": {"g6.xlarge": {"gpu": "L4"}}}, "aws/g6.xlarge: missing key 'count'"),
        ({"aws": {"g6.xlarge": {"count": 1}}}, "aws/g6.xlarge: missing key 'gpu'"),
        ({"aws": {"g6.xlarge": {"gpu": "", "count": 1}}}, "gpu: String should have at least 1"),
        ({"aws": {"g6.xlarge": {"gpu": "L4", "count": 0}}}, "count: Input should be greater than"),
        ({"aws": {"g6.xlarge": {"gpu": "L4", "count": -1}}}, "count: Input should be greater"),
        ({"aws": {"g6.xlarge": {"gpu": "L4", "count": "1"}}}, "count: Input should be a valid int"),
        ({"aws": {"g6.xlarge": {"gpu": "L4", "count": 1.5}}}, "count: Input should be a valid int"),
        ({"aws": {"g6.xlarge": {"gpu": "L4", "count": True}}}, "count: Input should be a valid"),
        ({"aws": {"g6.xlarge": {"gpu": "L4", "count": 1, "partition": "half"}}}, "partition"),
        ({"aws": {"g6.xlarge": {"gpu": "L4", "count": 1, "unofficial": "yes"}}}, "unofficial"),
        ([], "machine-types.yaml: must be a mapping (got [])"),
    ],
)
def test_registry_errors(data: Any, message: str) -> None:
    with pytest.raises(RuleError, match=re.escape(message)):
        machine_type_registry(data)


def test_empty_registry() -> None:
    assert machine_type_registry({}).lookup("aws", "g6.xlarge") is None


def test_catalog_defaults(catalog: Catalog) -> None:
    defaults = catalog.defaults
    assert defaults.chart_version == "v26.7.0"
    assert defaults.installer_release == "1.17.0"
    assert defaults.installer_release in catalog.installer_releases()
    assert catalog.chart(defaults.chart_version) is not None
    assert set(defaults.auto_driver_mode) >= {"gardenlinux", "ubuntu", "unknown"}
    assert set(defaults.os_release_id) == set(defaults.auto_driver_mode)
    assert catalog.installer_releases() == ("1.17.0", "1.7.0")


def test_catalog_knows_both_charts(catalog: Catalog) -> None:
    for version in ("v26.3.3", "v26.7.0"):
        chart = catalog.chart(version)
        assert chart is not None
        assert chart.version == version
        paths = {i.path for i in chart.images}
        assert {"driver", "toolkit", "devicePlugin", "node-feature-discovery.image"} <= paths
    assert catalog.chart("v1.0.0") is None
    assert catalog.installer("9.9.9") is None


def test_installer_data_is_the_published_data(catalog: Catalog) -> None:
    """values-rules/installer/<tag>/ are the reference files plus a provenance header."""
    reference = SHARED / "reference" / "gardenlinux-nvidia-installer"
    if not reference.is_dir():
        pytest.fail("../shared/reference is missing: it is laid next to the checkout")
    for tag in catalog.installer_releases():
        for source in (reference / tag).iterdir():
            ours = (catalog.root / "installer" / tag / source.name).read_text(encoding="utf-8")
            body = "".join(line for line in ours.splitlines(True) if not line.startswith("#"))
            assert body == source.read_text(encoding="utf-8"), f"{tag}/{source.name}"


def _rules_dir(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_catalog_errors(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="does not exist"):
        Catalog(tmp_path / "missing")
    broken = Catalog(_rules_dir(tmp_path, **{"rules.yaml": "rules: [\n"}))
    with pytest.raises(RuleError, match="not valid YAML"):
        _ = broken.rules
    with pytest.raises(RuleError, match="missing data file"):
        _ = broken.defaults
    with pytest.raises(RuleError, match="outside"):
        broken.values_file("../etc/passwd")
    (tmp_path / "list.yaml").write_text("- 1\n", encoding="utf-8")
    with pytest.raises(RuleError, match="must be a mapping"):
        broken.values_file("list.yaml")


def test_catalog_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: Catalog
) -> None:
    monkeypatch.setenv("KYMA_GPU_RULES_DIR", str(tmp_path))
    assert Catalog().root == tmp_path
    monkeypatch.delenv("KYMA_GPU_RULES_DIR")
    assert Catalog().root == catalog.root == REPO / "values-rules"


@pytest.mark.parametrize("version", ["v26.3.3", "v26.7.0"])
def test_chart_facts_are_generated_from_the_charts(catalog: Catalog, version: str) -> None:
    """values-rules/charts/<version>.yaml is what `make chart-facts` writes."""
    import io

    from kyma_gpu.cli import main

    chart = SHARED / "charts" / f"gpu-operator-{version}.tgz"
    if not chart.is_file():
        pytest.fail("../shared/charts is missing: it is laid next to the checkout")
    out, err = io.StringIO(), io.StringIO()
    assert main(["chart-facts", str(chart)], stdout=out, stderr=err) == 0, err.getvalue()
    committed = catalog.root / "charts" / f"{version}.yaml"
    assert committed.read_text(encoding="utf-8") == out.getvalue(), (
        f"{committed} is stale: run `make chart-facts`"
    )


REPO_RULES = Path(__file__).resolve().parents[2] / "values-rules"


def _broken(tmp_path: Path, relative: str, edit: Any) -> Catalog:
    root = tmp_path / "values-rules"
    shutil.copytree(REPO_RULES, root)
    path = root / relative
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    return Catalog(root)


def test_the_shipped_rule_data_passes_the_start_check() -> None:
    Catalog(REPO_RULES).check()


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("relative", "edit", "message", "needle"),
    [
        pytest.param("rules.yaml", lambda t: t + "\n  - {name: [broken\n",
                     "is not valid YAML", None, id="yaml-syntax"),
        pytest.param("rules.yaml", lambda t: t.replace("    valuesFile:", "    valuesFiel:", 1),
                     "rules/0 ('garden-linux-installer-values'): unknown key 'valuesFiel'; "
                     "allowed: appendTo, forEach, item", "valuesFiel:", id="rule-typo"),
        pytest.param("rules.yaml",
                     lambda t: t.replace("name: upstream-driver-version", "name: upstream-driver"),
                     "rule 'upstream-driver' is defined twice",
                     "why: A driver version from the spec", id="rule-twice"),
        pytest.param("rules.yaml", lambda t: t.replace("{exists: true}}", "{exist: true}}", 1),
                     "/when/driver.version: a condition must be", "{exist: true}", id="condition"),
        pytest.param("rules.yaml", lambda t: t.replace("    forEach: pools", "    forEach: nodes"),
                     "rules/7 ('per-pool-driver-objects')/forEach: Input should be 'pools'",
                     "forEach: nodes", id="for-each"),
        pytest.param("machine-types.yaml", lambda t: t.replace("count: 1", "count: one", 1),
                     "machine-types.yaml: aws/g4dn.xlarge/count: Input should be a valid integer",
                     "count: one", id="machine-count"),
        pytest.param("machine-types.yaml",
                     lambda t: t.replace("count: 4}", "count: 4, gpus: 2}", 1),
                     "aws/g4dn.12xlarge: unknown key 'gpus'; allowed: count, gpu, partition, "
                     "unofficial", "gpus: 2", id="machine-typo"),
        pytest.param("defaults.yaml", lambda t: t.replace("  rhel: Upstream", "  rhel: Upstreem"),
                     "autoDriverMode/rhel: Input should be 'Precompiled', 'Preinstalled' or "
                     "'Upstream'", "rhel: Upstreem", id="defaults-mode"),
        pytest.param("defaults.yaml", lambda t: t.replace("  sles: sles", "  suse: sles"),
                     "osReleaseId/suse: unknown OS family 'suse'; known: gardenlinux", "suse: sles",
                     id="defaults-os"),
        pytest.param("defaults.yaml", lambda t: t.replace("timeout: 20m", "timeout: 20 minutes"),
                     "flux/timeout: String should match pattern", "20 minutes", id="defaults-flux"),
        pytest.param("installer/1.17.0/versions.yaml",
                     lambda t: t.replace("os_versions:", "os_version:", 1),
                     "installer/1.17.0/versions.yaml: missing key 'os_versions'", None,
                     id="installer-matrix"),
        pytest.param("installer/1.17.0/versions.yaml", lambda t: t.replace("'1877.20'", "1877.20"),
                     "os_versions/13: 1877.2 must be a quoted string", "- 1877.20",
                     id="installer-unquoted"),
        pytest.param("installer/1.17.0/gpu-operator-values.yaml",
                     lambda t: t.replace("version: 590", "version: latest"),
                     "driver/version: 'latest' is not a version", "version: latest",
                     id="installer-values"),
        pytest.param("charts/v26.7.0.yaml", lambda t: t.replace("images:", "imgs:", 1),
                     "charts/v26.7.0.yaml: missing key 'images' (and 1 more)", None,
                     id="chart-facts"),
        pytest.param("charts/v26.7.0.yaml",
                     lambda t: t.replace("  version: v0.20.0", "  version: 7"),
                     "images/3/version: Input should be a valid string (got 7)", "version: 7",
                     id="chart-image"),
    ],
)  # fmt: skip
def test_broken_rule_data_is_refused_with_file_and_line(
    tmp_path: Path, relative: str, edit: Any, message: str, needle: str | None
) -> None:
    catalog = _broken(tmp_path, relative, edit)
    with pytest.raises(RuleError) as caught:
        catalog.check()
    text = str(caught.value)
    assert message in text
    path = catalog.root / relative
    assert str(path) in text
    if needle is not None:  # the line points into the broken entry, at or before the needle
        line = int(text.split(f"{path}:", 1)[1].split(":", 1)[0])
        assert 1 < line <= _line_of(path.read_text(encoding="utf-8"), needle)


def test_the_operator_does_not_start_on_broken_rule_data(tmp_path: Path) -> None:
    catalog = _broken(tmp_path, "machine-types.yaml", lambda t: t.replace("count: 1", "count: 0"))
    env = {**os.environ, ENV_RULES_DIR: str(catalog.root), "KUBECONFIG": "/nonexistent"}
    result = subprocess.run(
        [sys.executable, "-m", "kyma_gpu.cli", "run", "--standalone"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "broken rule data" in result.stderr
    assert f"{catalog.root / 'machine-types.yaml'}:" in result.stderr
    assert "kopf" not in result.stderr.lower()  # stopped before the operator framework ran
