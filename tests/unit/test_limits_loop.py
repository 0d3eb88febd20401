"""A Gpu whose spec.values is past the limits (one written before the values policy existed)
reaches the loop as it is: it must become Invalid with the reason in its status, once, and
its deletion must still go on (issue 20, finding 5: at 300 levels every pass used to raise)."""

from __future__ import annotations

from typing import Any

from kyma_gpu.api.values import NOT_LISTED
from kyma_gpu.reconcile.machine import Phase
from kyma_gpu.rules.catalog import Catalog
from tests.unit.test_loop import new_world


def _deep(levels: int) -> Any:
    node: Any = "x"
    for _ in range(levels):
        node = {"a": node}
    return node


def test_a_deep_spec_from_before_the_policy_is_invalid_with_a_reason(catalog: Catalog) -> None:
    world = new_world(catalog, spec={"values": _deep(300)})
    assert world.run() is Phase.INVALID
    status = world.api.gpu["status"]
    ready = status["conditions"][0]
    assert status["state"] == "Error"
    assert ready["reason"] == "InvalidSpec"
    assert "spec.values.a" in ready["message"]
    assert NOT_LISTED in ready["message"]
    assert not [w for w in world.api.writes() if w.startswith("apply")]
    # A second pass finds nothing new to say: no write, no exception.
    assert world.run() is Phase.INVALID
    assert world.api.writes() == []


def test_a_deep_spec_does_not_stop_its_deletion(catalog: Catalog) -> None:
    world = new_world(catalog, spec={"values": _deep(300)})
    world.run()
    world.edit(deletionTimestamp="2026-12-02T00:00:00Z")
    assert world.run() is not Phase.INVALID
