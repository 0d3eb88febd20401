"""Workload protection's situations and rows. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from kyma_gpu.api.models import SINGLETON_NAME
from kyma_gpu.plan import Plan
from kyma_gpu.reconcile.machine import FINALIZER, Inputs, Row, Seen, Step, status_of


class Situation(StrEnum):
    WORKLOADS_UNLISTED = "WorkloadsUnlisted"
    WORKLOADS_RUNNING = "WorkloadsRunning"


class Phase(StrEnum):
    WAITING_FOR_WORKLOADS = "WaitingForWorkloads"


def protects(inputs: Inputs) -> bool:
    """The Gpu is being deleted with our finalizer and no skip annotation: users' GPU pods are
    observed (and hold the deletion back)."""
    gpu = inputs.gpu
    deleting = gpu.name == SINGLETON_NAME and gpu.deleting and FINALIZER in gpu.finalizers
    return deleting and not gpu.skip_protection


def classify(inputs: Inputs, plan: Plan | None) -> Seen | None:
    """Before the Flux objects are deleted: users' GPU pods not listed yet, or running."""
    if inputs.gpu.skip_protection:
        return None
    if inputs.snap.gpu_workloads is None:
        return Seen(Situation.WORKLOADS_UNLISTED)
    if inputs.snap.gpu_workloads:
        return Seen(Situation.WORKLOADS_RUNNING, plan)
    return None


def _waiting_for_workloads(seen: Seen, inputs: Inputs) -> Step:
    status = status_of(inputs, seen.plan) if seen.plan is not None else None
    return Step(Phase.WAITING_FOR_WORKLOADS, status=status)


S = Situation
ROWS: Mapping[StrEnum, Row] = MappingProxyType({
    S.WORKLOADS_UNLISTED: Row(
        "being deleted, users' GPU pods not listed yet (skipped with the annotation "
        "`gpu.kyma-project.io/skip-workload-protection=true`, as the next row)",
        Phase.WAITING_FOR_WORKLOADS, "observe pods", False, _waiting_for_workloads),
    S.WORKLOADS_RUNNING: Row(
        "being deleted, users' GPU pods running (skipped with the annotation)",
        Phase.WAITING_FOR_WORKLOADS,
        "status names them, an Event (in kyma-system) counts them", False,
        _waiting_for_workloads),
})  # fmt: skip
del S
