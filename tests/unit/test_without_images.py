"""The Node informer cuts status.images from the raw JSON before parsing (adapter.without_images):
the facts must be the same as from the whole body, and an odd body must still parse whole."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.scale import scale_node
from kyma_gpu.adapter import NODE_JSON, without_images
from kyma_gpu.facts import node_facts
from kyma_gpu.rules.catalog import Catalog


def _raw(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def test_a_page_of_nodes_loses_only_the_images() -> None:
    nodes = [scale_node(i, gpu=i % 2 == 0) for i in range(4)]
    page = {"kind": "NodeList", "metadata": {"continue": "x"}, "items": nodes}
    raw = _raw(page)
    cut = without_images(raw)
    assert len(cut) < len(raw) / 3
    for node in nodes:
        node["status"]["images"] = []
    assert json.loads(cut) == page


def test_the_facts_do_not_change() -> None:
    registry = Catalog().machine_types
    node = scale_node(7, gpu=True)
    assert node_facts(NODE_JSON.page(_raw(node)), registry) == node_facts(node, registry)


def test_bodies_without_images_are_left_alone() -> None:
    event = _raw({"type": "MODIFIED", "object": {"metadata": {"name": "n"}, "status": {}}})
    assert without_images(event) == event
    empty = _raw({"status": {"images": []}})
    assert without_images(empty) == empty


def test_an_image_name_with_brackets_is_parsed_whole() -> None:
    node = {"metadata": {"name": "n"}, "status": {"images": [{"names": ['a"}]b']}, {"x": 1}]}}
    assert NODE_JSON.page(_raw(node)) == node


def test_the_word_images_in_a_string_is_not_cut() -> None:
    node = {"metadata": {"annotations": {"note": '"images":[{"names":[]}]'}}, "status": {}}
    assert NODE_JSON.page(_raw(node)) == node
