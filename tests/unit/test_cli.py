"""`kyma-gpu`: bad input is one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kyma_gpu_tools.cli import main, parser
from kyma_gpu_tools.crd import crd_yaml

GPU = """\
apiVersion: gpu.kyma-project.io/v1beta1
kind: Gpu
metadata:
  name: gpu
  uid: 0b5a8c1e-5f7d-4c2b-9a41-6d2f0e7b9c11
spec: {}
"""

NODES = """\
apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: gpu-1
    labels:
      node.kubernetes.io/instance-type: g6.xlarge
      worker.gardener.cloud/pool: gpu
  spec:
    providerID: aws:///eu-central-1a/i-0a1b2c3d4e5f60001
  status:
    nodeInfo:
      architecture: amd64
      osImage: Garden Linux 1877.21
"""


def run(args: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(args, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "gpu.yaml").write_text(GPU, encoding="utf-8")
    (tmp_path / "nodes.yaml").write_text(NODES, encoding="utf-8")
    return tmp_path


def test_plan(files: Path) -> None:
    code, out, err = run(
        ["plan", "-f", str(files / "gpu.yaml"), "--nodes", str(files / "nodes.yaml"), "-o", "yaml"]
    )
    assert (code, err) == (0, "")
    doc = yaml.safe_load(out)
    assert doc["preflight"]["verdict"] == "ok"
    assert [n["name"] for n in doc["nodes"]] == ["gpu-1"]
    assert [o["kind"] for o in doc["objects"]] == ["HelmRepository", "HelmRelease"]
    owner = doc["objects"][0]["metadata"]["ownerReferences"][0]
    assert owner["uid"] == "0b5a8c1e-5f7d-4c2b-9a41-6d2f0e7b9c11"


def test_plan_from_stdin(files: Path) -> None:
    yml = ["-o", "yaml"]
    by_file = run(
        ["plan", "-f", str(files / "gpu.yaml"), "--nodes", str(files / "nodes.yaml"), *yml]
    )
    assert run(["plan", "-f", "-", "--nodes", str(files / "nodes.yaml"), *yml], GPU) == by_file
    assert run(["plan", "-f", str(files / "gpu.yaml"), "--nodes", "-", *yml], NODES) == by_file


def test_plan_without_input_plans_the_default_gpu_for_no_nodes() -> None:
    code, out, _ = run(["plan", "-o", "yaml"])
    assert code == 0
    assert yaml.safe_load(out)["preflight"]["findings"][0]["reason"] == "NoGpuNodes"


def test_plan_without_a_cluster_writes_no_owner_references() -> None:
    _, out, _ = run(["plan", "-o", "yaml"])
    assert "ownerReferences" not in yaml.safe_load(out)["objects"][0]["metadata"]


def test_plan_takes_a_single_node_object() -> None:
    single = NODES.split("items:\n- ", 1)[1].replace("\n  ", "\n")
    code, out, _ = run(["plan", "--nodes", "-", "-o", "yaml"], single)
    assert code == 0
    assert [n["name"] for n in yaml.safe_load(out)["nodes"]] == ["gpu-1"]


def test_plan_refuses_an_empty_node_list() -> None:
    code, _, err = run(["plan", "--nodes", "-"], "")
    assert code == 2  # an empty node list is a failed `kubectl get nodes`, not zero nodes
    assert "empty" in err


def test_plan_takes_a_list_of_zero_nodes() -> None:
    code, _, _ = run(["plan", "--nodes", "-"], "apiVersion: v1\nkind: List\nitems: []\n")
    assert code == 0  # zero nodes said so


GPU_HEAD = "apiVersion: gpu.kyma-project.io/v1beta1\nkind: Gpu\nmetadata: {name: gpu}\n"


@pytest.mark.parametrize(
    ("gpu", "nodes", "message"),
    [
        pytest.param("a: [\n", None, "not valid YAML (line 2)", id="bad-yaml"),
        pytest.param("- 1\n", None, "expected a Gpu manifest (a mapping), got list", id="list"),
        pytest.param("just text\n", None, "expected a Gpu manifest", id="scalar"),
        pytest.param(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gpu}\n",
            None,
            "kind ConfigMap (apiVersion v1), not a Gpu; -f takes a Gpu manifest: apiVersion "
            "gpu.kyma-project.io/v1beta1, kind Gpu",
            id="wrong-kind",
        ),
        pytest.param(
            "apiVersion: gpu.kyma-project.io/v1beta1\nkind: Gpu\n",
            None,
            "metadata: Required value",
            id="no-metadata",
        ),
        pytest.param(
            GPU_HEAD + "spec: {driver: {mode: Foo}}\n",
            None,
            'spec.driver.mode: Unsupported value: "Foo": supported values: "Auto", "Precompiled"',
            id="bad-mode",
        ),
        pytest.param(
            GPU_HEAD + "spec: {source: {chartRepository: 'http://charts.example/nvidia'}}\n",
            None,
            "spec.source.chartRepository is plain http://; use https:// or oci://",
            id="http-without-insecure",
        ),
        pytest.param(
            GPU_HEAD + "spec: {driver: {version: 590}}\n",
            None,
            'spec.driver.version in body must be of type string: "integer"',
            id="version-as-number",
        ),
        pytest.param(
            GPU_HEAD + "spec: {colour: blue}\n",
            None,
            'unknown field "spec.colour"',
            id="unknown-field",
        ),
        pytest.param(
            None,
            "- a\n- b\n",
            "expected the output of `kubectl get nodes -o json`",
            id="nodes-not-a-list-object",
        ),
        pytest.param(
            None, "kind: Pod\nmetadata: {name: p}\n", "expected the output of", id="a-pod"
        ),
        pytest.param(
            None,
            "kind: List\nitems:\n- kind: Node\n  metadata: {}\n",
            "item 0: a Node without metadata.name",
            id="node-without-name",
        ),
        pytest.param(
            None,
            "kind: List\nitems:\n- 5\n",
            "item 0: expected a Node object, got int",
            id="node-is-a-number",
        ),
        pytest.param(
            None,
            "kind: List\nitems:\n- kind: Pod\n  metadata: {name: p}\n",
            "item 0: expected kind Node, got kind 'Pod'",
            id="pod-in-list",
        ),
        pytest.param(
            None,
            "kind: List\nitems:\n- kind: Node\n  metadata: {name: a, labels: [1]}\n",
            "item 0: Node a: metadata.labels must be a mapping, got list",
            id="labels-as-list",
        ),
        pytest.param(
            None,
            "kind: List\nitems:\n- metadata: {name: a}\n  status: {capacity: []}\n",
            "status.capacity must be a mapping",
            id="capacity-as-list",
        ),
        pytest.param(None, "items: [\n", "not valid YAML", id="nodes-bad-yaml"),
    ],
)
def test_bad_input(tmp_path: Path, gpu: str | None, nodes: str | None, message: str) -> None:
    args = ["plan"]
    if gpu is not None:
        (tmp_path / "gpu.yaml").write_text(gpu, encoding="utf-8")
        args += ["-f", str(tmp_path / "gpu.yaml")]
    if nodes is not None:
        (tmp_path / "nodes.yaml").write_text(nodes, encoding="utf-8")
        args += ["--nodes", str(tmp_path / "nodes.yaml")]
    code, out, err = run(args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("kyma-gpu plan: error: ")
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["plan", "-f", "-", "--nodes", "-"],
            "only one of -f, --nodes, --sources and --release can read standard input",
        ),
        (["plan", "-f", "/nonexistent/gpu.yaml"], "/nonexistent/gpu.yaml: cannot read"),
        (["plan", "--nodes", "/nonexistent/nodes.yaml"], "cannot read"),
        (["plan", "--rules", "/nonexistent"], "values rules directory /nonexistent does not exist"),
        (["images", "--chart-version", "v0.0.1"], "chart version v0.0.1: no facts"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    code, out, err = run(args, GPU)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert message in err


def test_crd() -> None:
    assert run(["crd"]) == (0, crd_yaml(), "")


def _images() -> list[str]:
    code, out, err = run(["images"])
    assert (code, err) == (0, "")
    return out.splitlines()


def test_images_succeeds_quietly() -> None:
    code, _, err = run(["images"])
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    "ref",
    [
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
        "registry.k8s.io/nfd/node-feature-discovery:v0.19.0",
        "nvcr.io/nvidia/gpu-operator:v26.7.0",
    ],
)
def test_images_lists_the_charts_images(ref: str) -> None:
    assert ref in _images()


def test_images_lists_nvidias_driver_container_per_os() -> None:
    # NVIDIA's driver container per OS it is published for, the tag as the NVIDIA operator forms it
    drivers = [r for r in _images() if r.startswith("nvcr.io/nvidia/driver:")]
    assert drivers == [f"nvcr.io/nvidia/driver:595.91.07-{os}"
                       for os in ("rhel8", "rhel9", "ubuntu22.04", "ubuntu24.04")]  # fmt: skip


def test_images_lists_each_image_once() -> None:
    refs = _images()
    assert len(refs) == len(set(refs))


def test_images_lists_the_garden_linux_installer_per_kernel() -> None:
    assert (
        "ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0/driver:590-<kernel>-gardenlinux0"
        in _images()
    )


def test_images_lists_the_modules_own_images() -> None:
    refs = _images()
    assert "europe-docker.pkg.dev/kyma-project/prod/gpu-manager:0.1.0" in refs  # the module too
    assert "europe-docker.pkg.dev/kyma-project/prod/external/fluxcd/helm-controller:v1.6.4" in refs


def test_images_follows_the_installer_release_asked_for() -> None:
    _, out, _ = run(["images", "--installer-release", "1.7.0"])
    assert "gardenlinux-nvidia-installer/1.17.0" not in out
    assert "gardenlinux-nvidia-installer/1.7.0" in out


def test_chart_facts_error(tmp_path: Path) -> None:
    (tmp_path / "chart.tgz").write_bytes(b"not a tarball")
    code, _, err = run(["chart-facts", str(tmp_path / "chart.tgz")])
    assert code == 2
    assert "not a packaged chart" in err
    assert err.count("\n") == 1


def _gpu(tmp_path: Path, spec: str) -> str:
    path = tmp_path / "gpu.yaml"
    path.write_text(GPU.replace("spec: {}", f"spec: {spec}"), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("spec", "nodes", "code", "verdict"),
    [
        ("{}", NODES, 0, "ok"),
        ("{}", "kind: List\nitems: []\n", 0, "warning"),  # no GPU nodes: prepared, a warning
        ("{driver: {installerRelease: '9.9.9'}}", NODES, 1, "error"),
        ("{components: {gdrcopy: true}}", NODES, 1, "error"),
    ],
)
def test_plan_gates_a_pipeline(
    tmp_path: Path, spec: str, nodes: str, code: int, verdict: str
) -> None:
    """Exit code 0 for ok or warning, 1 for an error verdict (nothing would be written), 2 for
    bad input; the plan is printed in both of the first cases."""
    (tmp_path / "nodes.yaml").write_text(nodes, encoding="utf-8")
    args = [
        "plan",
        "-f",
        _gpu(tmp_path, spec),
        "--nodes",
        str(tmp_path / "nodes.yaml"),
        "-o",
        "yaml",
    ]
    got, out, err = run(args)
    assert (got, err) == (code, "")
    assert yaml.safe_load(out)["preflight"]["verdict"] == verdict


def test_a_blocked_pool_next_to_a_good_one_passes_the_gate(tmp_path: Path) -> None:
    past = NODES.replace("gpu-1", "gpu-2").replace("Garden Linux 1877.21", "Garden Linux 2150.10.0")
    past = past.replace("worker.gardener.cloud/pool: gpu", "worker.gardener.cloud/pool: gpu-new")
    both = NODES + past.split("items:\n", 1)[1]
    (tmp_path / "nodes.yaml").write_text(both, encoding="utf-8")
    nodes = str(tmp_path / "nodes.yaml")
    got, out, err = run(["plan", "-f", _gpu(tmp_path, "{}"), "--nodes", nodes, "-o", "yaml"])
    plan = yaml.safe_load(out)
    assert (got, err, plan["preflight"]["verdict"]) == (0, "", "warning")
    assert plan["preflight"]["blockedPools"] == ["gpu-new"]
    assert [p["verdict"] for p in plan["pools"]] == ["ok", "blocked"]
    assert plan["objects"], "the good pool is still served"


def test_every_unknown_field_with_the_closest_name(tmp_path: Path) -> None:
    spec = "{driver: {verison: '590', mod: Auto}, colour: blue, sharing: {replica: 2}}"
    got, out, err = run(["plan", "-f", _gpu(tmp_path, spec)])
    assert (got, out) == (2, "")
    assert err.count("\n") == 1
    for said in (
        'unknown field "spec.driver.verison" (did you mean "version"?)',
        'unknown field "spec.driver.mod" (did you mean "mode"?)',
        'unknown field "spec.sharing.replica" (did you mean "replicas"?)',
        'unknown field "spec.colour"',
    ):
        assert said in err
    assert "more)" not in err


def test_unknown_fields_and_another_error(tmp_path: Path) -> None:
    got, _, err = run(["plan", "-f", _gpu(tmp_path, "{driver: {mode: Foo, verison: '590'}}")])
    assert got == 2
    assert 'unknown field "spec.driver.verison" (did you mean "version"?); ' in err
    assert 'spec.driver.mode: Unsupported value: "Foo"' in err


def _deep_gpu(levels: int) -> str:
    """A Gpu whose spec.values nests `levels` maps deep, in block style."""
    lines = [GPU.replace("spec: {}\n", "spec:"), "  values:"]
    lines += ["  " * (i + 2) + "a:" for i in range(levels)]
    return "\n".join([*lines, "  " * (levels + 2) + "x", ""])


@pytest.mark.parametrize("levels", [21, 300, 340, 1000, 5000])
def test_deep_values_are_refused_in_one_line(tmp_path: Path, levels: int) -> None:
    """Deep values once killed `kyma-gpu plan` with a RecursionError traceback (issue 20)."""
    path = tmp_path / "gpu.yaml"
    path.write_text(_deep_gpu(levels), encoding="utf-8")
    code, out, err = run(["plan", "-f", str(path)])
    assert code == 2, err
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    # so deep that the file outgrows what the API server takes for an object: refused unread
    big = path.stat().st_size > 3 * 1024 * 1024
    assert ("more than -f takes" if big else "values-rules/values-allowlist.yaml") in err
    assert "Traceback" not in err


BAD_FILES = [
    ("binary", b"\x7fELF\x02\x01\x01\x00\xd0\xff", "not UTF-8 text"),
    ("empty", b"", "is empty"),
    ("two Gpus", (GPU_HEAD + "---\n" + GPU_HEAD).encode(), "holds 2 objects"),
    ("a bad date", b"a: 2020-13-45\n", "not valid YAML"),
]


@pytest.mark.parametrize(("case", "content", "said"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_gpu_files_are_one_line_errors(
    tmp_path: Path, case: str, content: bytes, said: str
) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_bytes(content)
    code, out, err = run(["plan", "-f", str(path)])
    assert (code, out) == (2, ""), case
    assert said in err
    assert len(err.splitlines()) == 1


def test_what_kubectl_prints_is_read_as_kubectl_writes_it(tmp_path: Path) -> None:
    """A trailing ---, a List of one Gpu (`kubectl get gpu -o yaml`), JSON, Node documents."""
    listed = "apiVersion: v1\nkind: List\nitems:\n- " + GPU_HEAD.replace("\n", "\n  ").rstrip()
    for text in (GPU_HEAD + "---\n", listed + "\n", json.dumps(yaml.safe_load(GPU_HEAD))):
        (tmp_path / "gpu.yaml").write_text(text, encoding="utf-8")
        assert run(["plan", "-f", str(tmp_path / "gpu.yaml")])[0] == 0, text
    docs = NODES.split("items:\n- ", 1)[1].replace("\n  ", "\n")
    (tmp_path / "nodes.yaml").write_text(docs + "---\n" + docs.replace("gpu-1", "gpu-2"))
    code, out, _ = run(["plan", "--nodes", str(tmp_path / "nodes.yaml"), "-o", "yaml"])
    assert code == 0
    assert [n["name"] for n in yaml.safe_load(out)["nodes"]] == ["gpu-1", "gpu-2"]


def test_an_unquoted_number_says_quote_it(tmp_path: Path) -> None:
    (tmp_path / "gpu.yaml").write_text(GPU_HEAD + "spec: {operatorVersion: 26.7}\n")
    code, _, err = run(["plan", "-f", str(tmp_path / "gpu.yaml")])
    assert code == 2
    assert (
        "spec.operatorVersion: 26.7 as a number; the field takes text: quote it as you mean " in err
    )
    assert '(operatorVersion: "26.7")' in err


def test_rules_that_are_no_directory_or_empty(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in run(["plan", "--rules", str(tmp_path / "file")])[2]
    (tmp_path / "empty").mkdir()
    code, _, err = run(["plan", "--rules", str(tmp_path / "empty")])
    assert code == 2
    assert "missing data file" in err


def test_version_and_exit_codes_in_every_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("kyma-gpu ")
    for command in ("plan", "crd", "chart-facts", "images", "rules-schema", "run"):
        with pytest.raises(SystemExit):
            parser().parse_args([command, "--help"])
        said = " ".join(capsys.readouterr().out.split())
        assert "Exit codes: 0: " in said, command
        assert "; 2: bad input (" in said, command


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_no_input_ends_in_a_traceback(content: bytes) -> None:
    """Whatever bytes -f or --nodes holds: exit 0, 1 or 2, never an exception."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.yaml"
        path.write_bytes(content)
        for args in (["plan", "-f", str(path)], ["plan", "--nodes", str(path)]):
            code, _, err = run(args)
            assert code in (0, 1, 2)
            assert "Traceback" not in err
