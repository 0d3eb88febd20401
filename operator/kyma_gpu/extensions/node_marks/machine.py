"""Node marks' situations, rows and action. Pure.

Node marks for GPU health (spec.health.remediation): once the plan's objects are applied, the
manager sets or clears the Node condition KymaGpuUnhealthy and cordons or uncordons the GPU
nodes whose GPUs are unhealthy (marks.py); a deletion, once Flux uninstalled the release,
clears every mark of the module's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from kyma_gpu.api.models import HealthSpec, Remediation
from kyma_gpu.extensions.node_marks.facts import any_marked, mark_of
from kyma_gpu.extensions.node_marks.health import Health, plan_health
from kyma_gpu.extensions.node_marks.marks import marks_key, node_writes
from kyma_gpu.extensions.node_marks.names import NodeWrite
from kyma_gpu.facts import ObservedNode
from kyma_gpu.plan import Plan
from kyma_gpu.reconcile.machine import ExtensionAction, Inputs, Row, Seen, Step, status_of


class Situation(StrEnum):
    NODES_TO_MARK = "NodesToMark"
    MARKS_LEFT = "MarksLeft"


class Phase(StrEnum):
    MARKING_NODES = "MarkingNodes"


@dataclass(frozen=True, slots=True)
class MarkNodes(ExtensionAction):
    """Set or clear the Node condition KymaGpuUnhealthy, cordon or uncordon (spec.health)."""

    writes: tuple[NodeWrite, ...]


@dataclass(frozen=True, slots=True)
class Marks(Seen):
    """A situation of node marks, with the Nodes' writes."""

    marks: tuple[NodeWrite, ...] = ()


def to_mark(inputs: Inputs, plan: Plan | None) -> Seen | None:
    """Applied: the node marks' writes; none (and no work) while they are off and no
    node carries a mark of the manager's."""
    nodes = inputs.snap.nodes
    if plan is None or (plan.health.remediation is Remediation.OFF and not any_marked(nodes)):
        return None
    gpu_nodes = [n for n in nodes if n.is_gpu]
    marks = node_writes(plan_health(plan, gpu_nodes), plan.health, nodes)
    return Marks(Situation.NODES_TO_MARK, plan, marks=marks) if marks else None


def left(inputs: Inputs, plan: Plan | None) -> Seen | None:
    """Uninstalled: a deletion leaves no mark of the module's behind, its conditions False,
    its cordons lifted (with remediation off, node_writes clears every mark)."""
    cleared = _cleared(inputs.snap.nodes)
    return Marks(Situation.MARKS_LEFT, marks=cleared) if cleared else None


def _cleared(nodes: Sequence[ObservedNode]) -> tuple[NodeWrite, ...]:
    marks = (mark_of(n) for n in nodes)
    if not any(m is not None and (m.unhealthy or m.cordoned) for m in marks):
        return ()
    return node_writes(Health(), HealthSpec(), nodes)


def _marking_nodes(seen: Seen, inputs: Inputs) -> Step:
    assert isinstance(seen, Marks)
    # while running, the status follows the marks (it shows them): written by the next step
    status = status_of(inputs, seen.plan) if seen.plan is not None else None
    return Step(Phase.MARKING_NODES, MarkNodes(seen.marks), key=marks_key(seen.marks),
                status_if_failed=status)  # fmt: skip


S = Situation
ROWS: Mapping[StrEnum, Row] = MappingProxyType({
    S.NODES_TO_MARK: Row(
        "applied; node marks (`spec.health.remediation`) want a Node's condition "
        "`KymaGpuUnhealthy` or cordon changed", Phase.MARKING_NODES,
        "patch the Nodes' status and spec; the status follows in the next step", True,
        _marking_nodes),
    S.MARKS_LEFT: Row(
        "being deleted, uninstalled, a Node still carries a mark of the module's",
        Phase.MARKING_NODES, "clear the condition `KymaGpuUnhealthy`, lift our cordons",
        True, _marking_nodes),
})  # fmt: skip
del S
