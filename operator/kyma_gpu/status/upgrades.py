"""The NVIDIA upgrade controller's driver rollout, as DriverReady shows it. Pure.

The controller (k8s-operator-libs) moves each GPU node through its states and keeps the state
in the node label nvidia.com/gpu-driver-upgrade-state; the module reads the label with the
node's other facts. A rollout takes minutes per node, so the Gpu says where it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kyma_gpu.facts import DriverUpgradeState
from kyma_gpu.facts.echo import listed

__all__ = ("NAMES_SHOWN", "Rollout", "failed_message", "progress_message", "rollout")

NAMES_SHOWN = 3
"""Node names a message lists per state; the rest are counted."""
_RESTING = (DriverUpgradeState.DONE, DriverUpgradeState.FAILED)


@dataclass(frozen=True, slots=True)
class Rollout:
    """Where the GPU nodes that the controller labelled are in the rollout."""

    total: int = 0
    done: int = 0
    failed: tuple[str, ...] = ()
    moving: tuple[tuple[DriverUpgradeState, tuple[str, ...]], ...] = ()
    """The nodes in each state between upgrade-required and upgrade-done, in the order a node
    passes the states; states without nodes are left out."""


def rollout(states: Sequence[tuple[str, DriverUpgradeState]]) -> Rollout:
    """(node, state) pairs -> the rollout; node names sorted within a state."""
    by_state: dict[DriverUpgradeState, list[str]] = {}
    for name, state in states:
        by_state.setdefault(state, []).append(name)
    moving = tuple(
        (state, tuple(sorted(by_state[state])))
        for state in DriverUpgradeState
        if state not in _RESTING and state in by_state
    )
    return Rollout(
        total=len(states),
        done=len(by_state.get(DriverUpgradeState.DONE, ())),
        failed=tuple(sorted(by_state.get(DriverUpgradeState.FAILED, ()))),
        moving=moving,
    )


def _names(names: Sequence[str]) -> str:
    return listed(names, NAMES_SHOWN)


def progress_message(r: Rollout) -> str:
    """`1/2 nodes upgrade-done; pod-restart-required: node-a` and so on."""
    parts = [f"{state}: {_names(names)}" for state, names in r.moving]
    if r.failed:
        parts.append(f"{DriverUpgradeState.FAILED}: {_names(r.failed)}")
    return (
        f"the NVIDIA upgrade controller replaces the driver node by node "
        f"({r.done}/{r.total} nodes {DriverUpgradeState.DONE}; "
        + "; ".join(parts)
        + "); it looks again every 2 minutes while a node waits for its new driver pod"
    )


def failed_message(r: Rollout) -> str:
    """The nodes whose driver upgrade failed, and where to look."""
    count = len(r.failed)
    nodes = "node" if count == 1 else "nodes"
    return (
        f"the NVIDIA driver upgrade failed on {count} {nodes}: {_names(r.failed)} (label "
        f"nvidia.com/gpu-driver-upgrade-state={DriverUpgradeState.FAILED}): the new driver pod "
        f"did not become ready there. Read its log (kubectl get pods -n gpu-operator -o wide "
        f"-l app.kubernetes.io/component=nvidia-driver); the controller retries once it runs. "
        f"{r.done}/{r.total} nodes {DriverUpgradeState.DONE}"
    )
