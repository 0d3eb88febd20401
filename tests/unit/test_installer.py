"""The gardenlinux-nvidia-installer build matrix: which node gets an image for which branch."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.engine import RuleError
from kyma_gpu.rules.installer import InstallerRelease, branch_of, parse_version


@pytest.fixture(scope="module")
def release(catalog: Catalog) -> InstallerRelease:
    found = catalog.installer("1.17.0")
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("a", "b"),
    [("1877.21", "1877.21.0"), ("2150.8", "2150.8.0"), ("2150.0.0", "2150"), ("590", "590.0")],
)
def test_versions_equal(a: str, b: str) -> None:
    assert parse_version(a) == parse_version(b)


@pytest.mark.parametrize(
    ("older", "newer"),
    [("2150.9.0", "2150.10.0"), ("1592.18", "1877.8"), ("1877.9", "1877.10"), ("1877.23", "2150")],
)
def test_version_order(older: str, newer: str) -> None:
    older_v, newer_v = parse_version(older), parse_version(newer)
    assert older_v is not None
    assert newer_v is not None
    assert older_v < newer_v


@pytest.mark.parametrize("text", ["1877.\u00b2", "", "1877..21", "garden"])
def test_no_version(text: str) -> None:
    """A superscript two is no version part (and must not raise)."""
    assert parse_version(text) is None


@pytest.mark.parametrize(
    ("version", "branch"), [("590.48.01", "590"), ("590", "590"), ("580.178.04", "580")]
)
def test_branch_of(version: str, branch: str) -> None:
    assert branch_of(version) == branch


def test_release_facts(release: InstallerRelease) -> None:
    assert release.tag == "1.17.0"
    assert release.default_branch == "590"  # the published values say `version: 590` (an int)
    assert release.arches == ("amd64",)
    assert release.drivers == ("590.48.01", "580.178.04", "570.211.01")
    assert "1877.21" in release.os_versions
    assert "2150.9.0" in release.os_versions
    assert len(release.exclusions) == 1
    assert release.exclusions[0].os_version_min == "2150.8.0"
    assert release.exclusions[0].driver_prefix == "570"


@pytest.mark.parametrize(
    ("wanted", "full"),
    [
        ("590", "590.48.01"),
        ("580", "580.178.04"),
        ("570", "570.211.01"),
        ("550", None),
        ("590.48.01", "590.48.01"),
        ("590.48.02", None),
        ("58", None),
    ],
)
def test_full_version(release: InstallerRelease, wanted: str, full: str | None) -> None:
    assert release.full_version(wanted) == full


@pytest.mark.parametrize(
    ("os_version", "branch", "arch", "problem"),
    [
        ("1877.21", "590", "amd64", None),
        ("1877.21.0", "590", "amd64", None),  # the Shoot spec spelling of the same version
        ("1592.18", "590", "amd64", None),
        ("2150.9.0", "590", "amd64", None),
        ("2150.9", "580", "amd64", None),
        ("1877.21", "590", "x86_64", None),
        ("1877.21", "590.48.01", "amd64", None),
        ("2150.7.0", "570", "amd64", None),  # just below the exclusion
        ("1877.23", "570", "amd64", None),
        ("2150.8.0", "570", "amd64", "excludes driver 570.211.01 on Garden Linux 2150.8.0"),
        ("2150.8", "570", "amd64", "excludes driver 570.211.01 on Garden Linux 2150.8"),
        ("2150.9.0", "570", "amd64", "excludes driver 570.211.01"),
        ("2150.9.0", "570.211.01", "amd64", "excludes driver 570.211.01"),
        ("2150.8.0", "580", "amd64", None),
        ("1877.18", "590", "amd64", "Garden Linux 1877.18 is not in installer release 1.17.0"),
        ("1877.7", "590", "amd64", "26 versions from 1592.18 to 2150.9.0"),
        ("2150.10.0", "590", "amd64", "not in installer release 1.17.0's build matrix"),
        ("1877.21", "550", "amd64", "builds no driver of branch 550"),
        ("1877.21", "590.48.02", "amd64", "builds no driver of branch 590.48.02"),
        ("1877.21", "590", "arm64", "builds no images for architecture arm64"),
        ("1877.21", "590", "aarch64", "builds no images for architecture arm64"),
        (None, "590", "amd64", "the Garden Linux version is unknown"),
        ("1877.\u00b2", "590", "amd64", "not in installer release 1.17.0's build matrix"),
    ],
)
def test_problem(
    release: InstallerRelease, os_version: str | None, branch: str, arch: str, problem: str | None
) -> None:
    found = release.problem(os_version, branch, arch)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


def test_older_release(catalog: Catalog) -> None:
    old = catalog.installer("1.7.0")
    assert old is not None
    assert old.exclusions == ()
    assert old.problem("1877.21", "590", "amd64") is not None
    assert old.problem("1877.14", "580", "amd64") is None
    assert old.full_version("580") == "580.159.03"


VALUES = {"driver": {"version": 590}}
MATRIX = {"os_versions": ["1877.21"], "nvidia_drivers": ["590.48.01"]}


@pytest.mark.parametrize(
    ("versions", "values", "message"),
    [
        ({"nvidia_drivers": ["590.48.01"]}, VALUES, "versions.yaml: missing key 'os_versions'"),
        ({"os_versions": ["1877.21"]}, VALUES, "versions.yaml: missing key 'nvidia_drivers'"),
        ({**MATRIX, "os_versions": "1877.21"}, VALUES, "os_versions: Input should be a valid list"),
        (
            {**MATRIX, "os_versions": [1877.2]},
            VALUES,
            "os_versions/0: 1877.2 must be a quoted string",
        ),
        ({**MATRIX, "nvidia_drivers": ["latest"]}, VALUES, "'latest' is not a version"),
        (
            {**MATRIX, "excluded_combinations": [{"os_version_min": "2150.8.0"}]},
            VALUES,
            "excluded_combinations/0: missing key 'driver_version_prefix'",
        ),
        (MATRIX, {}, "gpu-operator-values.yaml: missing key 'driver'"),
        (MATRIX, {"driver": {}}, "gpu-operator-values.yaml: driver: missing key 'version'"),
        (MATRIX, {"driver": {"version": True}}, "driver/version: Input should be a valid string"),
    ],
)
def test_release_errors(versions: dict[str, Any], values: dict[str, Any], message: str) -> None:
    with pytest.raises(RuleError, match=re.escape(message)) as caught:
        InstallerRelease.from_mapping("0.0.1", versions, values)
    assert caught.value.keys  # the catalog turns them into a line


def test_release_defaults() -> None:
    """Keys upstream may leave out or set to null; keys we do not read are allowed."""
    release = InstallerRelease.from_mapping(
        "0.0.1",
        {**MATRIX, "cpu_arch": None, "excluded_combinations": None, "new_upstream_key": 1},
        {"driver": {"version": "590.48.01"}, "toolkit": {"installDir": "/opt"}},
    )
    assert release.arches == ("amd64",)
    assert release.exclusions == ()
    assert release.default_branch == "590"
