"""The node list reader (kyma_gpu_tools/reading.py): SafeLoader's objects from libyaml's events,
JSON item by item, and memory that stays flat however long the list is."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kyma_gpu.rules.catalog import Catalog
from kyma_gpu_tools.inputs import fold_nodes
from kyma_gpu_tools.progress import EVERY, Progress
from kyma_gpu_tools.reading import NODES_ROLE, Document, Input, Item, UsageError, stream_objects

REPO = Path(__file__).resolve().parents[2]


def streamed(text: str) -> list[Any]:
    """The documents as the reader hands them on, each List's items put back in place."""
    docs: list[Any] = []
    pending: list[Any] = []
    for found in stream_objects(Input("-", io.StringIO(text), NODES_ROLE)):
        if isinstance(found, Item):
            pending.append(found.value)
            continue
        assert isinstance(found, Document)
        value = found.value
        if found.items is not None:
            value = {**value, "items": pending}
            assert found.items == len(pending)
        docs.append(value)
        pending = []
    return docs


def safe_loaded(text: str) -> list[Any]:
    return [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d is not None]


FILES = sorted(
    p.relative_to(REPO).as_posix()
    for pattern in (
        "tests/golden/scenarios/*/*.yaml",
        "tests/harness/fleets/*.yaml",
        "values-rules/**/*.yaml",
        "config/**/*.yaml",
    )
    for p in REPO.glob(pattern)
)


@pytest.mark.parametrize("name", FILES)
def test_every_yaml_file_of_the_repository_reads_as_safe_load_reads_it(name: str) -> None:
    text = (REPO / name).read_text(encoding="utf-8")
    expected = safe_loaded(text)
    if expected and all(isinstance(d, dict) for d in expected):
        assert streamed(text) == expected
        assert streamed(json.dumps(expected[0], indent=4, default=str)) == [
            json.loads(json.dumps(expected[0], default=str))
        ]


@pytest.mark.parametrize(
    "text",
    [
        "a: &x {b: 1}\nc: *x\n",
        "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n",
        "d:\n  <<: [{a: 1}, {a: 2, b: 2}]\n  c: 3\n",
        "a: !!str 5\nb: !!int '7'\nc: 2020-01-01\nd: 0x1f\ne: 1_000\nf: .inf\ng: ~\nh: yes\n",
        "i: ''\nj:\n'#': x\n\"a b\": 1\n",
        "items:\n- 1\n- &z {a: 1}\n- *z\nkind: List\n",
        "---\n---\na: 1\n---\n",
        "{a: [1, 2, {b: c}], items: [{x: 1}]}\n",
        "apiVersion: v1\nkind: List\nitems: []\n",
        "a: 'quoted: yes'\nb: \"0x10\"\nc: |\n  line\n  line\n",
    ],
)
def test_yaml_features_read_as_safe_load_reads_them(text: str) -> None:
    assert streamed(text) == safe_loaded(text)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("? [1, 2]\n: x\n", "found unhashable key"),
        ("a: !foo x\n", "could not determine a constructor for the tag '!foo'"),
        ("a: *nowhere\n", "found undefined alias"),
        ("a: {b: [}\n", "not valid YAML (line 1)"),
        ("a: !!set {x, y}\n", "the tag tag:yaml.org,2002:set is not read here"),
        ("a: 2020-13-45\n", "month must be in 1..12"),
    ],
)
def test_what_safe_load_refuses_is_refused_in_one_line(text: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        streamed(text)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=12)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.text(max_size=8), VALUES, max_size=5), items=st.lists(VALUES))
def test_any_document_reads_as_safe_load_reads_it(doc: dict[str, Any], items: list[Any]) -> None:
    whole = {**doc, "items": items}
    for style in (False, None, True):
        text = yaml.safe_dump(whole, default_flow_style=style, sort_keys=False)
        assert streamed(text) == safe_loaded(text), text
    assert streamed(json.dumps(whole, indent=4)) == [whole]


def test_flow_yaml_that_starts_like_json_is_read_as_yaml() -> None:
    assert streamed("{apiVersion: v1, items: [{kind: Node}]}\n") == [
        {"apiVersion": "v1", "items": [{"kind": "Node"}]}
    ]


# -- memory -----------------------------------------------------------------------------------


def _node(index: int) -> dict[str, Any]:
    labels = {f"example.com/label-{i}": f"value-{index}-{i}" for i in range(20)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"node-{index:05d}", "labels": labels},
            "status": {"nodeInfo": {"osImage": "Garden Linux 1877.21", "architecture": "amd64"},
                       "images": [{"names": [f"registry.example/image-{index}-{i}:v1"],
                                   "sizeBytes": 1000 + i} for i in range(10)]}}  # fmt: skip


def _peak(tmp_path: Path, form: str, count: int) -> tuple[int, int]:
    """(peak of Python's allocations while `count` Nodes are folded, the file's size)."""
    data = {"apiVersion": "v1", "kind": "List", "items": [_node(i) for i in range(count)]}
    path = tmp_path / f"nodes-{count}.{form}"
    text = yaml.safe_dump(data) if form == "yaml" else json.dumps(data, indent=4)
    path.write_text(text, encoding="utf-8")
    registry = Catalog().machine_types
    del data, text
    tracemalloc.start()
    try:
        fleet = fold_nodes(str(path), io.StringIO(), registry, lambda source, count: None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(fleet.facts) == count
    return peak, path.stat().st_size


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_memory_stays_flat_however_many_nodes(tmp_path: Path, form: str) -> None:
    """Three times the Nodes, about the same peak of Python's allocations (each Node's facts
    are kept, about 1 kB, no body), and well below the file: the whole file parsed at once
    took several times its size."""
    small, _ = _peak(tmp_path, form, 500)
    big, size = _peak(tmp_path, form, 1500)
    assert big < small + 1500 * 2048, (small, big)
    assert big < size / 2, (big, size)


# -- progress ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_is_silent_while_quick_then_speaks_every_few_seconds() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, "kyma-gpu plan", clock=clock)
    progress.note(lambda: "early")
    clock.now += EVERY - 0.1
    progress.note(lambda: "still early")
    progress.done("done")
    assert out.getvalue() == ""
    clock.now += 0.2
    progress.note(lambda: "reading")
    clock.now += 1.0
    progress.note(lambda: "too soon")
    clock.now += EVERY
    progress.note(lambda: "reading on")
    progress.done("done")
    assert out.getvalue().splitlines() == [
        "kyma-gpu plan: [  2.1s] reading",
        "kyma-gpu plan: [  5.1s] reading on",
        "kyma-gpu plan: [  5.1s] done",
    ]


def test_quiet_progress_says_nothing() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, "kyma-gpu plan", enabled=False, clock=clock)
    clock.now += 10 * EVERY
    progress.note(lambda: "reading")
    progress.done("done")
    assert out.getvalue() == ""
