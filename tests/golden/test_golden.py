"""Golden plans: for each scenario, `kyma-gpu plan -f gpu.yaml --nodes nodes.yaml -o yaml` (with
`--sources sources.yaml` where the scenario has one) must print exactly
scenarios/<name>/plan.yaml. Regenerate on purpose with UPDATE_GOLDEN=1 (README.md).
"""

from __future__ import annotations

import difflib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kyma_gpu_tools.cli import main

SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
SCENARIOS = sorted(p for p in SCENARIOS_DIR.iterdir() if p.is_dir())
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

# What each scenario is about, checked on the plan itself so that a regenerated golden cannot
# quietly enshrine a wrong plan: (driver mode, preflight verdict, finding reasons, source kind).
INTENT: dict[str, tuple[str, str, list[str], str | None]] = {
    "aws-gardenlinux-g6": ("Precompiled", "ok", [], "HelmRepository"),
    "gcp-gardenlinux-g2": ("Precompiled", "ok", [], "HelmRepository"),
    "azure-ubuntu-t4": ("Upstream", "ok", [], "HelmRepository"),
    "mixed-gardenlinux-ubuntu": ("PerPool", "ok", [], "HelmRepository"),
    "preinstalled-driver": ("Preinstalled", "ok", [], "HelmRepository"),
    "no-gpu-nodes": ("Precompiled", "warning", ["NoGpuNodes"], "HelmRepository"),
    "unknown-os": ("Upstream", "warning", ["UnknownOs"], "HelmRepository"),
    "gardenlinux-outside-matrix": (
        "Precompiled",
        "warning",
        ["NoDriverImage", "NoDriverImage"],
        "HelmRepository",
    ),
    "sovereign-mirror": ("Precompiled", "ok", [], "OCIRepository"),
    "user-values-override": ("Precompiled", "ok", [], "HelmRepository"),
    "gcp-n1-opt-in": ("Precompiled", "ok", ["UnknownMachineType"], "HelmRepository"),
    # spec.driver.upgradePolicy: every field away from its default
    "upgrade-policy": ("Precompiled", "ok", [], "HelmRepository"),
    # spec.sharing: a time-sliced default and two profiles (MPS, none)
    "time-slicing-and-mps": ("Upstream", "ok", [], "HelmRepository"),
    # the extras that build kernel modules, the MIG manager and strategy, where they can run
    "extras-on-ubuntu-a100": ("Upstream", "ok", [], "HelmRepository"),
    # ... and refused where they cannot: Garden Linux has no compilers, the installer no images
    "gds-on-gardenlinux": ("Precompiled", "error", ["NeedsDriverContainer"], None),
    # VMs: Kata, the vGPU Manager and Confidential Computing on H100 cloud VMs
    "sandbox-vgpu-confidential": (
        "Precompiled",
        "warning",
        ["NoVgpuImagesForGardenLinux", "SandboxNeedsBareMetal"],
        "HelmRepository",
    ),
    # spec.stack DRA: the GPUCluster and per-pool NVIDIADriver objects
    "dra-stack": ("Precompiled", "ok", ["DraExperimental"], "HelmRepository"),
    # today's GPUs, known from the machine type before NFD labels the nodes: 8x B200 on Garden
    # Linux, 8x H200 on Ubuntu 24.04 (NVIDIA's driver container for ubuntu24.04)
    "aws-gardenlinux-b200": ("Precompiled", "ok", [], "HelmRepository"),
    "azure-ubuntu-h200": ("Upstream", "ok", [], "HelmRepository"),
    # arm64 (NVIDIA Grace): the installer builds amd64 only, so the Garden Linux pool is blocked;
    # the Ubuntu pool gets NVIDIA's arm64 driver container and is served
    "arm64-grace-mixed": ("PerPool", "warning", ["NoDriverImage"], "HelmRepository"),
    # Gardener's maintenance moved one pool past the build matrix: that pool is blocked, the
    # other is still planned and applied
    "gardenlinux-pool-past-matrix": ("Precompiled", "warning", ["NoDriverImage"], "HelmRepository"),
    # MPS sharing on a pool whose GPUs a node admin put in MIG mode: that pool is blocked
    "mps-on-mig": ("Upstream", "warning", ["MpsOnMig"], "HelmRepository"),
    # ... refused with an old chart, with sharing and with ClusterPolicy-only operands
    "dra-refused": (
        "Precompiled",
        "error",
        [
            "SharingNeedsDevicePlugin",
            "NoMigCapableGpus",
            "StackNotInChart",
            "NotOnDraStack",
            "DraExperimental",
        ],
        None,
    ),
}

# The worker pools each scenario blocks (preflight.blockedPools), checked like INTENT.
BLOCKED_POOLS: dict[str, list[str]] = {
    "arm64-grace-mixed": ["grace-gl"],
    "gardenlinux-pool-past-matrix": ["l40s"],
    "mps-on-mig": ["h100-mig"],
    "gardenlinux-outside-matrix": ["gpu-new"],
}

# The chart values a typed field must produce, checked on the plan like INTENT: dotted paths
# into `values` (a number indexes a list) and what they must hold.
VALUES_INTENT: dict[str, dict[str, object]] = {
    "upgrade-policy": {
        "driver.upgradePolicy.maxParallelUpgrades": 2,
        "driver.upgradePolicy.maxUnavailable": 3,  # a number, not "3": an IntOrString
        "driver.upgradePolicy.waitForCompletion.podSelector": "app=training",
        "driver.upgradePolicy.gpuPodDeletion.force": True,
        "driver.upgradePolicy.gpuPodDeletion.deleteEmptyDir": True,
        "driver.upgradePolicy.drain.enable": True,
        "driver.upgradePolicy.drain.timeoutSeconds": 900,
    },
    "time-slicing-and-mps": {
        "devicePlugin.config.create": True,
        "devicePlugin.config.default": "default",
    },
    "extras-on-ubuntu-a100": {
        "gds.enabled": True,
        "gdrcopy.enabled": True,
        "migManager.enabled": True,
        "mig.strategy": "mixed",
        "nodeStatusExporter.enabled": True,
        "sandboxWorkloads.enabled": False,
        "kataSandboxDevicePlugin.enabled": False,  # every extra off, whatever the chart says
    },
    "sandbox-vgpu-confidential": {
        "sandboxWorkloads.enabled": True,
        "sandboxWorkloads.mode": "kata",
        "kataSandboxDevicePlugin.enabled": True,
        "vgpuManager.enabled": True,
        "vgpuManager.repository": "registry.corp.internal/nvidia",
        "vgpuManager.image": "vgpu-manager",
        "vgpuManager.version": "580.95.02",
        "ccManager.enabled": True,
    },
    "arm64-grace-mixed": {
        "extraObjects.0.metadata.name": "gpu-gardenlinux",
        "extraObjects.1.metadata.name": "gpu-ubuntu",
        "extraObjects.1.spec.version": "595.91.07",  # published for ubuntu24.04 on arm64
        "extraObjects.1.spec.repository": "nvcr.io/nvidia",
    },
    "gardenlinux-pool-past-matrix": {
        "driver.usePrecompiled": True,
        "driver.version": "590",  # the good pool's driver, as before the other pool moved on
    },
    "dra-stack": {
        "clusterPolicy.deployCR": False,
        "gpuCluster.deployCR": True,
        "driver.nvidiaDriverCRD.enabled": True,
        "driver.nvidiaDriverCRD.deployDefaultCR": False,
        "extraObjects.0.kind": "NVIDIADriver",
        "extraObjects.0.spec.imagePullPolicy": "Always",
        "extraObjects.0.spec.upgradePolicy.maxParallelUpgrades": 1,
        "extraObjects.0.spec.upgradePolicy.podDeletion.force": False,
    },
}


def _dig(values: object, path: str) -> object:
    for key in path.split("."):
        values = values[int(key)] if isinstance(values, list) else values[key]  # type: ignore[index]
    return values


def _plan(scenario: Path) -> str:
    out, err = io.StringIO(), io.StringIO()
    sources = scenario / "sources.yaml"  # the allowed chart sources' ConfigMap, if any
    extra = ["--sources", str(sources)] if sources.is_file() else []
    code = main(
        [
            "plan",
            "-f",
            str(scenario / "gpu.yaml"),
            "--nodes",
            str(scenario / "nodes.yaml"),
            *extra,
            "-o",
            "yaml",
        ],
        stdin=io.StringIO(),
        stdout=out,
        stderr=err,
    )
    verdict = yaml.safe_load(out.getvalue())["preflight"]["verdict"] if out.getvalue() else None
    assert code == (1 if verdict == "error" else 0), err.getvalue()  # plan gates a pipeline
    return out.getvalue()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_golden_plan(scenario: Path) -> None:
    actual = _plan(scenario)
    golden = scenario / "plan.yaml"
    if UPDATE:
        golden.write_text(actual, encoding="utf-8")
        return
    if not golden.is_file():
        pytest.fail(f"{golden} is missing: run `UPDATE_GOLDEN=1 pytest tests/golden`", False)
    expected = golden.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=f"{scenario.name}/plan.yaml (golden)",
                tofile=f"{scenario.name}/plan.yaml (kyma-gpu plan now)",
            )
        )
        pytest.fail(
            f"the plan of scenario {scenario.name} changed:\n{diff}\n"
            "Review the diff; if the change is intended, regenerate with "
            "`UPDATE_GOLDEN=1 .venv/bin/pytest tests/golden` and commit plan.yaml.",
            pytrace=False,
        )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_scenario_intent(scenario: Path) -> None:
    assert scenario.name in INTENT, f"say what {scenario.name} is about in INTENT"
    mode, verdict, reasons, source = INTENT[scenario.name]
    plan = yaml.safe_load(_plan(scenario))
    assert plan["driver"]["mode"] == mode
    assert plan["preflight"]["verdict"] == verdict
    assert [f["reason"] for f in plan["preflight"]["findings"]] == reasons
    assert (plan["objects"][0]["kind"] if plan["objects"] else None) == source
    assert plan["preflight"].get("blockedPools", []) == BLOCKED_POOLS.get(scenario.name, [])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_scenario_inputs(scenario: Path) -> None:
    gpu = yaml.safe_load((scenario / "gpu.yaml").read_text(encoding="utf-8"))
    assert gpu["kind"] == "Gpu"
    assert gpu["metadata"]["name"] == "gpu"
    assert gpu["metadata"]["uid"], "a fixed uid keeps owner references stable"
    nodes = yaml.safe_load((scenario / "nodes.yaml").read_text(encoding="utf-8"))
    assert nodes["kind"] == "List"
    for item in nodes["items"]:
        assert item["kind"] == "Node"
        assert item["spec"]["providerID"]
        info = item["status"]["nodeInfo"]
        assert {"osImage", "kernelVersion", "architecture", "kubeletVersion"} <= set(info)
        assert "node.kubernetes.io/instance-type" in item["metadata"]["labels"]
        assert "worker.gardener.cloud/pool" in item["metadata"]["labels"]


def test_the_console_script_prints_the_same() -> None:
    scenario = SCENARIOS_DIR / "mixed-gardenlinux-ubuntu"
    script = Path(sys.executable).parent / "kyma-gpu"
    result = subprocess.run(
        [str(script), "plan", "-f", "gpu.yaml", "--nodes", "nodes.yaml", "-o", "yaml"],
        cwd=scenario,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == _plan(scenario)


@pytest.mark.parametrize("scenario", sorted(VALUES_INTENT))
def test_scenario_values(scenario: str) -> None:
    plan = yaml.safe_load(_plan(SCENARIOS_DIR / scenario))
    actual = {path: _dig(plan["values"], path) for path in VALUES_INTENT[scenario]}
    assert actual == VALUES_INTENT[scenario]
