"""The built wheel carries values-rules/ and the own Flux's bundle and works outside the source
tree; built from the image's context (no release tooling) it is the runtime alone."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kyma_gpu.rules.catalog import ENV_RULES_DIR

REPO = Path(__file__).resolve().parents[2]
BUNDLE = "kyma_gpu/extensions/own_flux/flux.yaml"
"""The own Flux's bundle (hack/flux-bundle.sh), read by the extension when first needed."""

PROBE = """
import json, kyma_gpu
from kyma_gpu.extensions.own_flux.bundle import FluxBundle
from kyma_gpu.rules.catalog import Catalog
catalog = Catalog()
catalog.check()
print(json.dumps({"package": kyma_gpu.__file__, "rules": str(catalog.root),
                  "chart": catalog.defaults.chart_version,
                  "rule_count": len(catalog.rules.rules),
                  "flux_crds": len(FluxBundle().crds())}))
"""


def _build(source: Path, out: Path) -> Path:
    if importlib.util.find_spec("hatchling") is None:
        message = "hatchling not installed: the dev extra pins it (make setup)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--wheel-dir", str(out), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("kyma_gpu-*.whl")
    return built


def _scripts(wheel: Path) -> set[str]:
    archive = zipfile.ZipFile(wheel)
    (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    lines = archive.read(entry_points).decode().splitlines()
    return {line.split("=")[0].strip() for line in lines if "=" in line}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(REPO, tmp_path_factory.mktemp("wheel"))


def test_the_wheel_of_a_clone_has_the_cli(wheel: Path) -> None:
    """`pip install .` in a clone: the manager and the release tooling's `kyma-gpu`."""
    assert any(n.startswith("kyma_gpu_tools/") for n in zipfile.ZipFile(wheel).namelist())
    assert _scripts(wheel) == {"kyma-gpu", "kyma-gpu-manager"}


def test_the_image_wheel_is_the_runtime_alone(tmp_path: Path) -> None:
    """Built from what the Dockerfile copies (.dockerignore keeps operator/kyma_gpu_tools out):
    no tools package and no `kyma-gpu` script pointing at one."""
    context = tmp_path / "context"
    (context / "operator").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "hatch_build.py"):
        shutil.copy(REPO / name, context / name)
    shutil.copytree(REPO / "operator" / "kyma_gpu", context / "operator" / "kyma_gpu",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copytree(REPO / "values-rules", context / "values-rules")
    built = _build(context, tmp_path / "out")
    tops = {n.split("/")[0] for n in zipfile.ZipFile(built).namelist()}
    assert tops == {"kyma_gpu", built.name.split("-py")[0] + ".dist-info"}
    assert _scripts(built) == {"kyma-gpu-manager"}
    assert BUNDLE in zipfile.ZipFile(built).namelist()  # the own Flux's, package data


def test_the_wheel_ships_the_rule_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        n.removeprefix("kyma_gpu/values-rules/")
        for n in names
        if n.startswith("kyma_gpu/values-rules/")
    }
    in_tree = {
        p.relative_to(REPO / "values-rules").as_posix()
        for p in (REPO / "values-rules").rglob("*")
        if p.is_file()
    }
    assert shipped == in_tree


def test_the_installed_package_loads_its_rules_outside_the_tree(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what pip install does for a pure wheel
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != ENV_RULES_DIR}
    env["PYTHONPATH"] = str(site)  # before the venv's site-packages and its editable install
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert Path(found["package"]).is_relative_to(site)
    assert Path(found["rules"]) == site / "kyma_gpu" / "values-rules"
    assert found["chart"] == "v26.7.0"
    assert found["flux_crds"] == 7  # the bundle, read from the installed package
    # The environment still wins over the package data (the Dockerfile and tests use it).
    env[ENV_RULES_DIR] = str(REPO / "values-rules")
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rules"] == str(REPO / "values-rules")
