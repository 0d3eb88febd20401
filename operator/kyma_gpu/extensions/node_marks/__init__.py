"""GPU health with node marks: spec.health.remediation marks (condition KymaGpuUnhealthy)
and cordons the GPU nodes whose GPUs are unhealthy, and a deletion clears the marks
(marks.py says which writes; names.py names the condition and the annotation the admission
policy lets the manager write; facts.py is what it keeps of each Node, its share of the Node
fold)."""

from __future__ import annotations

from kyma_gpu.extensions.base import Extension
from kyma_gpu.extensions.node_marks.conditions import Conditions, HealthReason
from kyma_gpu.extensions.node_marks.effects import mark
from kyma_gpu.extensions.node_marks.events import health_event
from kyma_gpu.extensions.node_marks.facts import node_fold
from kyma_gpu.extensions.node_marks.machine import ROWS, MarkNodes, left, to_mark
from kyma_gpu.extensions.node_marks.status import health
from kyma_gpu.reconcile.machine import Point
from kyma_gpu.status.events import Report

EXTENSION = Extension(
    name="node-marks",
    rows=ROWS,
    classify={Point.APPLIED: to_mark, Point.UNINSTALLED: left},
    node_fold=node_fold,
    effects={MarkNodes: mark},
    status=Report(health, {Conditions.GPUS_HEALTHY: HealthReason}, news=health_event),
)
