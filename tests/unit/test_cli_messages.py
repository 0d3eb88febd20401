"""`kyma-gpu`'s messages name the file, what it holds and what to do: one test per message a
newcomer met that said less (a file given to the wrong flag, an empty field path, a hidden
second error, a plan of no nodes said nowhere, a chart source refused offline without a word
about --sources, the exit codes of --help)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from kyma_gpu_tools.cli import main, parser
from tests.harness.nodes import DEMO_FLEET

SAMPLE = Path(__file__).resolve().parents[2] / "config" / "samples" / "gpu.yaml"
SOURCES = Path(__file__).resolve().parents[2] / "config" / "samples" / "chart_sources.yaml"
GPU_HEAD = "apiVersion: gpu.kyma-project.io/v1beta1\nkind: Gpu\nmetadata: {name: gpu}\n"


def run(args: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(args, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def refused(args: list[str]) -> str:
    """The one line of a refusal (exit code 2, nothing on stdout)."""
    code, out, err = run(args)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1, err
    return err


# -- a file given to the wrong flag ---------------------------------------------------------


def test_a_node_list_given_to_f_says_nodes() -> None:
    err = refused(["plan", "-f", str(DEMO_FLEET)])
    assert f"{DEMO_FLEET}: a node list (3 Nodes), not what -f takes: did you mean --nodes" in err


def test_a_gpu_given_to_nodes_says_f() -> None:
    err = refused(["plan", "--nodes", str(SAMPLE)])
    assert "expected the output of `kubectl get nodes -o json`" in err
    assert f"(a Gpu manifest: did you mean -f {SAMPLE}?)" in err


def test_a_gpu_list_given_to_nodes_says_f(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems:\n- " + GPU_HEAD.replace("\n", "\n  "))
    err = refused(["plan", "--nodes", str(path)])
    assert "item 0: expected kind Node, got kind 'Gpu': a Gpu manifest goes to -f" in err


def test_the_sources_config_map_given_to_f_says_sources() -> None:
    err = refused(["plan", "-f", str(SOURCES)])
    assert "the ConfigMap kyma-gpu-chart-sources, not what -f takes: did you mean --sources" in err


def test_a_gpu_given_to_sources_names_what_it_is() -> None:
    err = refused(["plan", "--sources", str(SAMPLE)])
    assert "a Gpu manifest, not what --sources takes: did you mean -f" in err


def test_another_kind_given_to_f_names_its_kind_and_no_empty_path(tmp_path: Path) -> None:
    path = tmp_path / "wrongkind.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gpu\n")
    err = refused(["plan", "-f", str(path)])
    assert ": : " not in err
    assert "kind ConfigMap (apiVersion v1), not a Gpu; -f takes a Gpu manifest" in err
    assert "(config/samples/gpu.yaml)" in err


def test_a_wrong_api_version_is_named(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(GPU_HEAD.replace("v1beta1", "v1alpha1"))
    err = refused(["plan", "-f", str(path)])
    assert "kind Gpu (apiVersion gpu.kyma-project.io/v1alpha1), not a Gpu" in err
    assert "apiVersion gpu.kyma-project.io/v1beta1, kind Gpu" in err


# -- field errors: every one, the way to fix them -------------------------------------------


def test_two_unquoted_numbers_are_both_named_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(GPU_HEAD + "spec:\n  driver: {version: 590}\n  operatorVersion: 26.7\n")
    err = refused(["plan", "-f", str(path)])
    assert "more)" not in err
    assert 'spec.driver.version: Invalid value: "integer"' in err
    assert 'spec.operatorVersion: Invalid value: "number"' in err
    assert "a int" not in err
    assert (
        "YAML read spec.driver.version: 590 as an integer and spec.operatorVersion: 26.7 as a "
        'number; these fields take text: quote them as you mean them (version: "590", '
        'operatorVersion: "26.7")'
    ) in err


def test_every_error_of_a_spec_is_named(tmp_path: Path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(GPU_HEAD + "spec:\n  driver: {mode: Foo}\n  stack: Bar\n")
    err = refused(["plan", "-f", str(path)])
    assert 'spec.driver.mode: Unsupported value: "Foo"' in err
    assert 'spec.stack: Unsupported value: "Bar"' in err
    assert "more)" not in err


# -- files that are no YAML, or too big: refused before they are read ------------------------


def test_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    """A sparse file of 2 GiB: reading it would take seconds and memory; the size says no."""
    path = tmp_path / "huge.yaml"
    with path.open("wb") as out:
        out.truncate(2 * 1024**3)
    err = refused(["plan", "--nodes", str(path)])
    assert "2147.5 MB, more than --nodes takes (1 GiB holds more than 50,000 Nodes" in err


def test_a_node_list_too_big_for_f_says_nodes(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "x": "y" * 1000}
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node] * 4000},
                               indent=4))  # fmt: skip
    err = refused(["plan", "-f", str(path)])
    assert "more than -f takes (the API server takes no object larger than 3 MiB)" in err
    assert "it holds Nodes: did you mean --nodes?" in err


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("aGVsbG8gd29ybGQ=\n" * 100, "not YAML or JSON: line 1 ('aGVsbG8gd29ybGQ=') is no"),
        ("# a comment\n\nplain words\n", "not YAML or JSON: line 3 ('plain words')"),
        ("x" * 200_000, "not YAML or JSON: line 1 ('xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...')"),
        ("apiVersion: v1\n\x00\x01", "not UTF-8 text (a binary file?)"),
    ],
    ids=["base64", "words", "one-long-line", "nul"],
)
def test_text_that_is_no_yaml_is_refused_at_its_head(
    tmp_path: Path, content: str, said: str
) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(content)
    err = refused(["plan", "--nodes", str(path)])
    assert said in err
    assert "expected the output of `kubectl get nodes -o json`" in err


def test_a_broken_json_node_list_names_its_line(tmp_path: Path) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
    text = json.dumps({"apiVersion": "v1", "items": [node, node]}, indent=4)
    path = tmp_path / "nodes.json"
    path.write_text(text.replace('"name": "n"\n            }\n        },', '"name": "n"}}\n  ;', 1))
    err = refused(["plan", "--nodes", str(path)])
    assert "not valid JSON (line 9): expected ',' or ']', found ';'" in err


def test_a_broken_yaml_node_list_names_its_line_and_problem(tmp_path: Path) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata: {name: [}\n")
    err = refused(["plan", "--nodes", str(path)])
    assert "not valid YAML (line 5): " in err


# -- a plan of what was not given says so ----------------------------------------------------


def test_a_plan_without_nodes_says_so() -> None:
    code, out, err = run(["plan"])
    assert (code, err) == (0, "")
    assert "for no nodes (no --nodes: the plan of a cluster without GPU nodes)" in out
    assert "kubectl get nodes -o json > nodes.json, then add --nodes nodes.json" in out


def test_a_plan_without_nodes_as_yaml_says_so_on_stderr() -> None:
    code, out, err = run(["plan", "-o", "yaml"])
    assert code == 0
    assert yaml.safe_load(out)["nodes"] == []
    assert err.startswith("kyma-gpu plan: note: Plan for your cluster's nodes: kubectl get nodes")


def _mirror_gpu(tmp_path: Path) -> str:
    path = tmp_path / "gpu.yaml"
    path.write_text(
        GPU_HEAD + "spec:\n  source: {chartRepository: 'oci://mirror.example/nvidia'}\n"
    )
    return str(path)


def test_a_source_refused_offline_suggests_sources(tmp_path: Path) -> None:
    code, out, _ = run(["plan", "-f", _mirror_gpu(tmp_path), "--nodes", str(DEMO_FLEET)])
    assert code == 1
    assert "error ChartSourceNotAllowed" in out
    words = " ".join(out.split())
    assert "Without --sources only NVIDIA's repository and registries are allowed" in words
    assert "kubectl get configmap -n kyma-system kyma-gpu-chart-sources -o yaml > sources.yaml, " \
        "then add --sources sources.yaml" in words  # fmt: skip
    _, _, err = run(["plan", "-f", _mirror_gpu(tmp_path), "--nodes", str(DEMO_FLEET), "-o", "yaml"])
    assert "kyma-gpu plan: note: Without --sources only NVIDIA's repository" in err


def test_with_sources_no_such_hint(tmp_path: Path) -> None:
    args = ["plan", "-f", _mirror_gpu(tmp_path), "--nodes", str(DEMO_FLEET), "--sources"]
    code, out, _ = run([*args, str(SOURCES)])
    assert "Without --sources" not in out
    assert code in (0, 1)


# -- help and chart-facts --------------------------------------------------------------------


def test_the_top_help_lists_every_commands_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["--help"])
    said = capsys.readouterr().out
    assert "Exit codes (2 is always bad input, one line on stderr):" in said
    for command in ("plan", "crd", "chart-facts", "images", "rules-schema", "run"):
        assert f"\n  {command}: 0: " in said, command
    assert "1: the verdict is error" in said


def test_chart_facts_help_says_what_bad_input_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["chart-facts", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "2: bad input (the file is no packaged chart), one line on stderr" in said
    assert ") (not a chart)" not in said


def test_chart_facts_says_what_it_expects(tmp_path: Path) -> None:
    (tmp_path / "chart.tgz").write_bytes(b"not a tarball")
    err = refused(["chart-facts", str(tmp_path / "chart.tgz")])
    assert "not a packaged chart (not a gzip file); expected gpu-operator-<version>.tgz" in err
