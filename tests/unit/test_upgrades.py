"""The NVIDIA driver rollout in DriverReady: the node label becomes a fact, the facts a
rollout, the rollout a condition (docs/troubleshooting.md, "A driver upgrade takes long")."""

from __future__ import annotations

import pytest

from kyma_gpu.facts import DriverUpgradeState, observe_node
from kyma_gpu.facts.node import LABEL_DRIVER_UPGRADE
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status.upgrades import failed_message, progress_message, rollout
from tests.unit.builders import node

S = DriverUpgradeState


@pytest.mark.parametrize(
    ("label", "state"),
    [
        (None, None),
        ("", None),
        ("upgrade-done", S.DONE),
        ("pod-restart-required", S.POD_RESTART_REQUIRED),
        ("upgrade-failed", S.FAILED),
        ("a-state-of-a-newer-controller", S.OTHER),
    ],
)
def test_the_label_becomes_a_fact(
    catalog: Catalog, label: str | None, state: DriverUpgradeState | None
) -> None:
    labels = {} if label is None else {LABEL_DRIVER_UPGRADE: label}
    observed = observe_node(node("gl-1", labels=labels), catalog.machine_types)
    assert observed.driver_upgrade is state


def test_a_rollout_counts_and_orders_the_states() -> None:
    r = rollout([("c", S.UPGRADE_REQUIRED), ("a", S.DONE), ("d", S.POD_RESTART_REQUIRED),
                 ("b", S.UPGRADE_REQUIRED), ("e", S.FAILED)])  # fmt: skip
    assert (r.total, r.done, r.failed) == (5, 1, ("e",))
    # the order a node passes the states, not the order seen
    assert r.moving == ((S.UPGRADE_REQUIRED, ("b", "c")), (S.POD_RESTART_REQUIRED, ("d",)))


def test_a_finished_rollout_moves_nothing() -> None:
    r = rollout([("a", S.DONE), ("b", S.DONE)])
    assert (r.total, r.done, r.failed, r.moving) == (2, 2, (), ())


def test_the_progress_message_says_how_far_and_who_waits() -> None:
    message = progress_message(rollout([("a", S.DONE), ("b", S.POD_RESTART_REQUIRED)]))
    assert "(1/2 nodes upgrade-done; pod-restart-required: b)" in message
    assert "every 2 minutes" in message


def test_a_message_names_a_few_nodes_and_counts_the_rest() -> None:
    names = [f"n{i}" for i in range(7)]
    message = progress_message(rollout([(n, S.UPGRADE_REQUIRED) for n in names]))
    assert "upgrade-required: n0, n1, n2 and 4 more" in message
    assert "n3" not in message


def test_the_failure_message_names_the_node_and_where_to_look() -> None:
    message = failed_message(rollout([("a", S.DONE), ("b", S.FAILED)]))
    assert message.startswith("the NVIDIA driver upgrade failed on 1 node: b ")
    assert "nvidia.com/gpu-driver-upgrade-state=upgrade-failed" in message
    assert "1/2 nodes upgrade-done" in message
