"""`kyma-gpu plan`'s summary: worker pools with their driver, findings, GPU health with the node
marks of spec.health, and what would be written, short enough to read; -o yaml has the rest."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from kyma_gpu_tools.cli import main
from tests.harness.nodes import DEMO_FLEET

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "tests" / "golden" / "scenarios"
GPU = "apiVersion: gpu.kyma-project.io/v1beta1\nkind: Gpu\nmetadata: {name: gpu}\nspec: "
BROKEN = "ip-10-250-0-11.eu-central-1.compute.internal"


def plan(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", *args], stdin=io.StringIO(), stdout=out, stderr=err)
    assert err.getvalue() == ""
    return code, out.getvalue()


def _gpu(tmp_path: Path, spec: str) -> str:
    path = tmp_path / "gpu.yaml"
    path.write_text(GPU + spec + "\n", encoding="utf-8")
    return str(path)


def _broken_fleet(tmp_path: Path) -> str:
    """The demo fleet with one GPU withdrawn by the device plugin (allocatable below capacity)."""
    fleet = yaml.safe_load(DEMO_FLEET.read_text(encoding="utf-8"))
    for node in fleet["items"]:
        if node["metadata"]["name"] == BROKEN:
            node["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump(fleet), encoding="utf-8")
    return str(path)


def test_the_demo_fleet_in_a_screen() -> None:
    code, out = plan("--nodes", str(DEMO_FLEET))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) < 40, out
    assert lines[1] == "Verdict: ok (exit code 0)"
    pool = next(line.split() for line in lines if line.startswith("  gpu-l4 "))
    assert pool[:5] == ["gpu-l4", "2", "ok", "g6.xlarge", "(1x"]
    assert "  gpu-l4  2      ok     g6.xlarge (1x L4)  gardenlinux 1877.21  Precompiled 590 " \
        "(the default of installer 1.17.0)" in lines  # fmt: skip
    assert "Findings: none" in lines
    assert "  2 of 2 GPUs healthy on 2 GPU nodes" in lines
    assert "  no Node: node marks are off (spec.health.remediation Off)" in lines
    release = "  HelmRelease     kyma-system/gpu-operator  chart gpu-operator v26.7.0 into"
    assert any(line.startswith(release) for line in lines)
    assert "values:" not in out
    assert "- The chart values with the rule that set each, and the objects in full: add -o " \
        "yaml" in out  # fmt: skip


def test_a_blocked_pool_and_its_finding() -> None:
    scenario = SCENARIOS / "gardenlinux-pool-past-matrix"
    code, out = plan("-f", str(scenario / "gpu.yaml"), "--nodes", str(scenario / "nodes.yaml"))
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("  l40s "))
    assert row.split()[:3] == ["l40s", "3", "blocked"]
    assert row.endswith("none (blocked)")
    assert "  error NoDriverImage (worker pool l40s, 3 nodes)" in out.splitlines()


def test_an_unhealthy_gpu_with_node_marks_names_the_node_write(tmp_path: Path) -> None:
    spec = "{health: {remediation: MarkAndCordon}}"
    code, out = plan("-f", _gpu(tmp_path, spec), "--nodes", _broken_fleet(tmp_path))
    assert code == 0
    assert "GPU health (spec.health: remediation MarkAndCordon, at most 20 % of a worker pool " \
        "marked)" in out  # fmt: skip
    assert "  1 of 2 GPUs healthy on 2 GPU nodes" in out
    assert f"  {BROKEN} (worker pool gpu-l4): GpusUnhealthy: " in out
    assert f"  Node {BROKEN}: condition KymaGpuUnhealthy True (GpusUnhealthy), cordon" in out


def test_an_unhealthy_gpu_without_node_marks_says_what_they_would_do(tmp_path: Path) -> None:
    code, out = plan("-f", _gpu(tmp_path, "{}"), "--nodes", _broken_fleet(tmp_path))
    assert code == 0
    words = " ".join(out.split())
    assert "no Node: node marks are off (spec.health.remediation Off)" in words
    assert f"with spec.health.remediation MarkNodes the manager would mark {BROKEN} for " \
        "Gardener to replace" in words  # fmt: skip


def test_an_error_verdict_writes_nothing(tmp_path: Path) -> None:
    code, out = plan("-f", _gpu(tmp_path, "{components: {gdrcopy: true}}"),
                     "--nodes", str(DEMO_FLEET))  # fmt: skip
    assert code == 1
    assert "Verdict: error (exit code 1)" in out
    assert "On the cluster: nothing is written (verdict error); the Gpu's state is Error" in out
    assert "  error NeedsDriverContainer" in out


def test_the_rollout_of_a_changed_driver_is_said() -> None:
    _, out = plan("--nodes", str(DEMO_FLEET))
    words = " ".join(out.split())
    assert "is rolled out node by node: the NVIDIA upgrade controller cordons each node while " \
        "its driver is replaced (spec.driver.upgradePolicy)" in words  # fmt: skip


def test_yaml_is_the_whole_plan_and_the_golden_one() -> None:
    scenario = SCENARIOS / "aws-gardenlinux-g6"
    args = ["-f", str(scenario / "gpu.yaml"), "--nodes", str(scenario / "nodes.yaml")]
    _, out = plan(*args, "-o", "yaml")
    assert out == (scenario / "plan.yaml").read_text(encoding="utf-8")


def _release(tmp_path: Path, change: dict[str, object]) -> str:
    """The demo plan's own HelmRelease, as a cluster runs it, with `change` in its values."""
    _, out = plan("--nodes", str(DEMO_FLEET), "-o", "yaml")
    release = yaml.safe_load(out)["objects"][1]
    release["spec"]["values"].update(change)
    release["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    path = tmp_path / "release.yaml"
    path.write_text(yaml.safe_dump(release), encoding="utf-8")
    return str(path)


def test_against_the_running_release_nothing_changes(tmp_path: Path) -> None:
    code, out = plan("--nodes", str(DEMO_FLEET), "--release", _release(tmp_path, {}))
    assert code == 0
    assert "no change; Flux has nothing to upgrade" in out
    assert "--release release.yaml" not in out


def test_a_toleration_change_says_the_driver_rolls(tmp_path: Path) -> None:
    """A spec.values change that reaches the driver DaemonSets: the summary says the driver is
    replaced node by node, with a cordon each (what a newcomer met without a word)."""
    spec = "{values: {daemonsets: {tolerations: [{key: dedicated, operator: Exists}]}}}"
    code, out = plan("-f", _gpu(tmp_path, spec), "--nodes", str(DEMO_FLEET),
                     "--release", _release(tmp_path, {}))  # fmt: skip
    assert code == 0
    assert '  daemonsets.tolerations: added ([{"key":"dedicated","operator":"Exists"}])' in out
    words = " ".join(out.split())
    rolls = (
        "These reach the driver DaemonSets: Flux upgrades the release, then the NVIDIA "
        "upgrade controller replaces the driver node by node, cordoning each node"
    )
    assert rolls in words


def test_a_change_beside_the_driver_cordons_nothing(tmp_path: Path) -> None:
    spec = "{values: {operator: {logging: {level: debug}}}}"
    code, out = plan("-f", _gpu(tmp_path, spec), "--nodes", str(DEMO_FLEET),
                     "--release", _release(tmp_path, {}))  # fmt: skip
    assert code == 0
    assert "  operator.logging.level: added (debug)" in out
    assert "no value reaches the driver DaemonSets: no node is cordoned." in " ".join(out.split())


def test_a_release_file_that_is_no_helm_release_is_named(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", "--release", str(DEMO_FLEET)], stdin=io.StringIO(), stdout=out,
                stderr=err)  # fmt: skip
    assert code == 2
    assert "a node list (3 Nodes), not what --release takes: did you mean --nodes" in err.getvalue()


def test_without_release_the_summary_says_how_to_compare() -> None:
    _, out = plan("--nodes", str(DEMO_FLEET))
    assert "kubectl get helmrelease -n kyma-system gpu-operator -o yaml > release.yaml, then " \
        "add --release release.yaml" in " ".join(out.split())  # fmt: skip
