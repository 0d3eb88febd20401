"""What `kyma-gpu images` lists (kyma_gpu_tools/inventory.py) and how it reads a reference
(kyma_gpu_tools/registry.py). Pure; the registry side is tests/integration/test_image_check.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from kyma_gpu import __version__
from kyma_gpu.facts import cluster_facts, node_facts
from kyma_gpu.plan import allowed_sources_of, make_plan
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu_tools.cli import load_gpu, load_nodes, main
from kyma_gpu_tools.inventory import MANAGER_REPOSITORY, module_images, plan_images
from kyma_gpu_tools.registry import Reference, parse_reference

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "golden" / "scenarios"


@pytest.mark.parametrize(
    ("reference", "parsed"),
    [
        ("nvcr.io/nvidia/driver:595.91.07-ubuntu22.04",
         Reference("nvcr.io", "nvidia/driver", "595.91.07-ubuntu22.04")),
        ("127.0.0.1:5000/a/b:v1", Reference("127.0.0.1:5000", "a/b", "v1")),
        ("localhost/a", Reference("localhost", "a", "latest")),
        ("r.example/a@sha256:" + "0" * 64, Reference("r.example", "a", "sha256:" + "0" * 64)),
        ("r.example:443/a/b", Reference("r.example:443", "a/b", "latest")),
        ("r.example/a:v1@sha256:" + "1" * 64, Reference("r.example", "a", "sha256:" + "1" * 64)),
        ("nvidia/driver:1", None),  # no registry host: the module always names one
        ("r.example/driver:590-<kernel>-gardenlinux0", None),  # a placeholder
    ],
)  # fmt: skip
def test_references(reference: str, parsed: Reference | None) -> None:
    assert parse_reference(reference) == parsed


def test_the_manager_image_is_the_deployments() -> None:
    deployment = yaml.safe_load((ROOT / "config" / "manager" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{MANAGER_REPOSITORY}:{__version__}"
    flux = {e["value"] for e in container["env"] if e["name"].startswith("KYMA_GPU_FLUX_")}
    assert {i.reference for i in module_images()[1:]} == flux


def _plan_images(scenario: str) -> list[str]:
    catalog = Catalog()
    folder = SCENARIOS / scenario
    spec, owner = load_gpu(str(folder / "gpu.yaml"), io.StringIO())
    nodes = load_nodes(str(folder / "nodes.yaml"), io.StringIO())
    sources = folder / "sources.yaml"
    allowed_sources = (
        allowed_sources_of(yaml.safe_load(sources.read_text())) if sources.exists() else None
    )
    facts = cluster_facts([node_facts(n, catalog.machine_types) for n in nodes])
    plan = make_plan(spec, facts, catalog, owner, allowed_sources)
    return [i.reference for i in plan_images(plan, catalog)]


def test_a_mixed_fleet_runs_a_driver_per_kernel_and_os() -> None:
    refs = _plan_images("mixed-gardenlinux-ubuntu")
    drivers = [r for r in refs if "/driver:" in r]
    assert drivers == [
        "ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0/driver:"
        "590-6.12.44-cloud-amd64-gardenlinux0",
        "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04",
    ]
    assert "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0" not in refs  # switched off
    assert "nvcr.io/nvidia/k8s-device-plugin:v0.20.0" in refs
    assert len(refs) == len(set(refs))


def test_a_sovereign_plan_names_the_mirror_for_every_operand() -> None:
    refs = _plan_images("sovereign-mirror")
    module = {i.reference for i in module_images()}
    operands = [r for r in refs if r not in module]
    assert operands, refs
    assert all(r.startswith("registry.sovereign.example/mirror/") for r in operands), operands


def test_images_cli_errors() -> None:
    err = io.StringIO()
    code = main(["images", "--installer-release", "9.9.9"], stdin=io.StringIO(),
                stdout=io.StringIO(), stderr=err)  # fmt: skip
    assert code == 2
    assert "installer release 9.9.9 is not adopted (known: " in err.getvalue()
    code = main(["images", "-f", str(SCENARIOS / "sovereign-mirror" / "gpu.yaml")],
                stdin=io.StringIO(), stdout=io.StringIO(), stderr=err)  # fmt: skip
    assert code == 2  # without the administrator's sources the plan refuses the chart source
    assert "the plan's verdict is error (ChartSourceNotAllowed)" in err.getvalue()
