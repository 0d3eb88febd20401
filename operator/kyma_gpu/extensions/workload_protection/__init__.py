"""Workload protection: a deletion of the Gpu waits while users' pods use GPUs, unless the Gpu
carries the annotation `gpu.kyma-project.io/skip-workload-protection: "true"`.

It observes users' GPU pods while such a deletion goes on, and holds the deletion back (phase
WaitingForWorkloads) before the module's Flux objects are deleted. The status's condition
WorkloadsProtected says why (status/deletion.py)."""

from __future__ import annotations

from kyma_gpu.extensions.base import Extension
from kyma_gpu.extensions.workload_protection.machine import ROWS, Situation, classify, protects
from kyma_gpu.extensions.workload_protection.status import EVENTS, protection
from kyma_gpu.reconcile.machine import Point

EXTENSION = Extension(
    name="workload-protection",
    situations=Situation,
    classify={Point.DELETING: classify},
    rows=ROWS,
    events=EVENTS,
    status=protection,
    watches_pods=protects,
)
