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
    g6e = registry.lookup("aws", "g6e.xlarge")
    assert g6e is not None
    assert (g6e.gpu, g6e.count, g6e.unofficial) == ("L40S", 1, True)
    nv6 = registry.lookup("azure", "Standard_NV6ads_A10_v5")
    assert nv6 is not None
    assert (nv6.gpu, nv6.partition, nv6.vgpu_guest_driver) == ("A10", "1/6", True)
    assert registry.lookup("aws", "g6.xlarge") == MachineType("L4", 1, compute_capability="8.9")


@pytest.mark.parametrize(
    ("provider", "machine_type", "gpu", "count", "arch", "mig"),
    [
        # The current generation, known before NFD labels a node.
        ("aws", "p6-b200.48xlarge", "B200", 8, "amd64", True),
        ("aws", "p6-b300.48xlarge", "B300", 8, "amd64", True),
        ("aws", "p6e-gb200.36xlarge", "GB200", 4, "arm64", True),
        ("aws", "g5g.xlarge", "T4G", 1, "arm64", False),
        ("aws", "g6f.large", "L4", 1, "amd64", False),
        ("aws", "gr6f.4xlarge", "L4", 1, "amd64", False),
        ("gcp", "a4-highgpu-8g", "B200", 8, "amd64", True),
        ("gcp", "a4x-highgpu-4g", "GB200", 4, "arm64", True),
        ("gcp", "g4-standard-48", "RTX PRO 6000", 1, "amd64", True),
        ("azure", "Standard_ND96isr_H200_v5", "H200", 8, "amd64", True),
        ("azure", "Standard_NCC40ads_H100_v5", "H100 NVL", 1, "amd64", False),
        ("azure", "Standard_ND128isr_NDR_GB200_v6", "GB200", 4, "arm64", True),
        ("azure", "Standard_ND40rs_v2", "V100", 8, "amd64", False),
        ("azure", "Standard_NV12s_v3", "M60", 1, "amd64", False),
    ],
)
def test_registry_knows_todays_gpus(
    registry: MachineTypeRegistry, provider: str, machine_type: str, gpu: str, count: int,
    arch: str, mig: bool,
) -> None:  # fmt: skip
    found = registry.lookup(provider, machine_type)
    assert found is not None, machine_type
    assert (found.gpu, found.count, found.arch) == (gpu, count, arch)
    (family,) = (f for f in _machine_types_data()[provider].values() if machine_type in f["types"])
    assert family["mig"] is mig
    assert family["memoryGib"]
    assert found.compute_capability


def test_registry_knows_what_the_drivers_cannot_serve(registry: MachineTypeRegistry) -> None:
    """Fractional GPUs need NVIDIA's vGPU guest driver; Volta and Maxwell end with branch 580."""
    for provider, name in (("azure", "Standard_NV18ads_A10_v5"), ("aws", "g6f.xlarge")):
        found = registry.lookup(provider, name)
        assert found is not None
        assert found.vgpu_guest_driver, name
    for provider, name in (("aws", "p3.2xlarge"), ("azure", "Standard_NV24s_v3")):
        found = registry.lookup(provider, name)
        assert found is not None
        assert found.last_driver_branch == "580", name
    plain = registry.lookup("aws", "g6.xlarge")
    assert plain is not None
    assert (plain.vgpu_guest_driver, plain.last_driver_branch) == (False, None)


def test_every_family_of_the_providers_lists_is_in_the_registry(catalog: Catalog) -> None:
    """gpu-families.yaml is each provider's current list of GPU families (with its source): a
    family there that the registry lacks is planned as "CPU-only" until NFD labels its nodes."""
    lists = catalog.gpu_families.root
    data = _machine_types_data()
    assert set(lists) == set(catalog.machine_types.types) == set(data) == {"aws", "gcp", "azure"}
    for provider, listed in lists.items():
        families = {name for name, family in data[provider].items() if family["types"]}
        missing = set(listed.families) - families
        assert not missing, f"{provider}: families of the provider's list not in the registry"
        unlisted = families - set(listed.families)
        assert not unlisted, f"{provider}: registry families the provider's list does not name"
        assert not set(listed.attached) & families


def _machine_types_data() -> dict[str, Any]:
    import yaml

    data: dict[str, Any] = yaml.safe_load(
        (REPO / "values-rules" / "machine-types.yaml").read_text("utf-8")
    )
    return data


def test_the_registry_says_where_each_family_comes_from() -> None:
    for provider, families in _machine_types_data().items():
        for name, family in families.items():
            assert family["source"].startswith("https://"), (provider, name)
            assert re.fullmatch(r"2026-1[12]-[0-9]{2}", family["checked"]), (provider, name)


def test_a_machine_type_listed_twice_is_refused() -> None:
    family = {"source": "https://x.example", "checked": "2026-12-01", "gpu": "L4",
              "memoryGib": 24, "computeCapability": "8.9", "mig": False}  # fmt: skip
    data = {"aws": {"g6": {**family, "types": {"g6.xlarge": 1}},
                    "gr6": {**family, "types": {"g6.xlarge": 1}}}}  # fmt: skip
    with pytest.raises(RuleError, match=r"machine type g6\.xlarge is listed under two families"):
        machine_type_registry(data)


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


_FAMILY = {"source": "https://aws.amazon.com/ec2/instance-types/g6/", "checked": "2026-12-01",
           "gpu": "L4", "memoryGib": 24, "computeCapability": "8.9", "mig": False}  # fmt: skip


def _family(**changes: Any) -> dict[str, Any]:
    return {"aws": {"g6": {**_FAMILY, "types": {"g6.xlarge": 1}, **changes}}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"aws": ["g6"]}, "aws: must be a mapping (got ['g6'])"),
        ({"aws": {"g6": "L4"}}, "aws/g6: must be a mapping (got 'L4')"),
        (_family(types={"g6.xlarge": {"partition": "1/2"}}), "g6/types/g6.xlarge: missing key"),
        (_family(gpu=None), "aws/g6/gpu: Input should be a valid string"),
        (_family(gpu=""), "gpu: String should have at least 1"),
        (_family(types={"g6.xlarge": 0}), "count: Input should be greater than"),
        (_family(types={"g6.xlarge": -1}), "count: Input should be greater"),
        (_family(types={"g6.xlarge": "1"}), "g6/types/g6.xlarge: must be a mapping (got '1')"),
        (_family(types={"g6.xlarge": {"count": 1.5}}), "count: Input should be a valid int"),
        (_family(types={"g6.xlarge": {"count": 1, "partition": "half"}}), "partition"),
        (_family(types={"g6.xlarge": {"count": 1, "unofficial": "yes"}}), "unofficial"),
        (_family(types={}), "aws/g6/types: Dictionary should have at least 1 item"),
        (_family(source="aws.amazon.com"), "aws/g6/source: String should match pattern"),
        (_family(checked="yesterday"), "aws/g6/checked: String should match pattern"),
        (_family(arch="x86"), "aws/g6/arch: Input should be 'amd64' or 'arm64'"),
        (_family(computeCapability=8.9), "computeCapability: Input should be a valid string"),
        (_family(gpus=2), "aws/g6: unknown key 'gpus'; allowed: arch, checked, computeCapability"),
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

    from kyma_gpu_tools.cli import main

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
        pytest.param("machine-types.yaml",
                     lambda t: t.replace("g4dn.12xlarge: 4", "g4dn.12xlarge: four", 1),
                     "machine-types.yaml: aws/g4dn/types/g4dn.12xlarge: must be a mapping "
                     "(got 'four')", "g4dn.12xlarge: four", id="machine-count"),
        pytest.param("machine-types.yaml",
                     lambda t: t.replace("    gpu: A10G\n", "    gpu: A10G\n    gpus: 2\n", 1),
                     "aws/g5: unknown key 'gpus'; allowed: arch, checked, computeCapability",
                     "gpus: 2", id="machine-typo"),
        pytest.param("nvidia-drivers.yaml",
                     lambda t: t.replace('version: "580.126.20"', 'version: "580.x"', 1),
                     "nvidia-drivers.yaml: drivers/3/version: '580.x' is not a version",
                     'version: "580.x"', id="nvidia-drivers"),
        pytest.param("gpu-families.yaml", lambda t: t.replace("families: [g4dn", "family: [g4dn"),
                     "gpu-families.yaml: aws: missing key 'families'", None,
                     id="gpu-families"),
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
    catalog = _broken(tmp_path, "machine-types.yaml",
                      lambda t: t.replace("g4dn.xlarge: 1", "g4dn.xlarge: 0"))  # fmt: skip
    env = {**os.environ, ENV_RULES_DIR: str(catalog.root), "KUBECONFIG": "/nonexistent"}
    result = subprocess.run(
        [sys.executable, "-m", "kyma_gpu", "--standalone"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "broken rule data" in result.stderr
    assert f"{catalog.root / 'machine-types.yaml'}:" in result.stderr
    assert "kopf" not in result.stderr.lower()  # stopped before the operator framework ran
