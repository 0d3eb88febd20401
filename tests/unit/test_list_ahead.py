"""adapter.list_pages asks for the next page while the current one is parsed: the continue
token comes from the raw page's head (adapter._continue_of). What the API server writes, and the
shapes where the token must come from the parsed page instead."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kyma_gpu.adapter import _continue_of


def _raw(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


ITEM = {"metadata": {"name": "n", "labels": {"a": "b"}}, "status": {}}


@pytest.mark.parametrize(
    ("page", "token"),
    [
        # as the API server encodes a list: kind, apiVersion, metadata, then the items
        ({"kind": "NodeList", "apiVersion": "v1",
          "metadata": {"resourceVersion": "9", "continue": "eyJ2Ijoi", "remainingItemCount": 7},
          "items": [ITEM]}, "eyJ2Ijoi"),
        ({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
          "items": [ITEM]}, None),  # the last page
        ({"kind": "NodeList", "metadata": {"resourceVersion": "9", "continue": ""},
          "items": []}, None),
        # items first: an item's flat metadata must not be taken for the list's
        ({"items": [{"metadata": {"name": "n", "continue": "no"}}],
          "metadata": {"continue": "yes"}}, None),
        ({"kind": "NodeList", "items": [ITEM]}, None),
    ],
)  # fmt: skip
def test_the_token_is_read_from_the_head(page: dict[str, Any], token: str | None) -> None:
    assert _continue_of(_raw(page)) == token


def test_a_head_without_the_metadata_is_left_to_the_parser() -> None:
    padded = {"kind": "NodeList", "apiVersion": "v1" + " " * 5000, "metadata": {"continue": "x"}}
    assert _continue_of(_raw(padded)) is None
    assert _continue_of(b'{"kind":"NodeList","metadata":{"continue":') is None
