"""Workload protection: a deletion of the Gpu waits while users' pods use GPUs, unless the Gpu
carries the annotation `gpu.kyma-project.io/skip-workload-protection: "true"`.

It observes users' GPU pods while such a deletion goes on (its list-watch on demand: pods.py
the facts, watch.py the list-watch), and holds the deletion back (phase
WaitingForWorkloads) before the module's Flux objects are deleted. The status's condition
WorkloadsProtected says why (its status.py)."""

from __future__ import annotations

from kyma_gpu.extensions.base import Extension, Watch
from kyma_gpu.extensions.workload_protection.conditions import Conditions, WorkloadsReason
from kyma_gpu.extensions.workload_protection.machine import ROWS, classify, protects
from kyma_gpu.extensions.workload_protection.pods import PODS
from kyma_gpu.extensions.workload_protection.status import protection, without_pod_names
from kyma_gpu.extensions.workload_protection.watch import pod_watch
from kyma_gpu.reconcile.machine import Point
from kyma_gpu.status.events import Report

EXTENSION = Extension(
    name="workload-protection",
    rows=ROWS,
    classify={Point.DELETING: classify},
    watch=Watch(PODS, pod_watch, protects),
    status=Report(
        protection, {Conditions.WORKLOADS_PROTECTED: WorkloadsReason}, redact=without_pod_names
    ),
)
