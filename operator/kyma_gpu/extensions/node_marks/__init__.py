"""GPU health with node marks: spec.health.remediation marks (condition KymaGpuUnhealthy)
and cordons the GPU nodes whose GPUs are unhealthy, and a deletion clears the marks
(marks.py says which writes; names.py names the condition and the annotation the admission
policy lets the manager write; facts.py is what it keeps of each Node, its share of the Node
fold)."""

from __future__ import annotations

from kyma_gpu.extensions.base import Extension, Grant
from kyma_gpu.extensions.node_marks.effects import mark
from kyma_gpu.extensions.node_marks.events import EVENTS
from kyma_gpu.extensions.node_marks.facts import node_fold
from kyma_gpu.extensions.node_marks.machine import ROWS, MarkNodes, Situation, left, to_mark
from kyma_gpu.extensions.node_marks.status import health
from kyma_gpu.reconcile.machine import Point

EXTENSION = Extension(
    name="node-marks",
    situations=Situation,
    classify={Point.APPLIED: to_mark, Point.UNINSTALLED: left},
    rows=ROWS,
    node_fold=node_fold,
    events=EVENTS,
    status=health,
    actions={MarkNodes: mark},
    grants=frozenset({Grant.NODES}),
)
