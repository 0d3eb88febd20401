"""Workload protection's situations, rows and list-watch on demand: when users' GPU pods are
observed, and when they hold a deletion back. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from kyma_gpu.api.models import API_GROUP, SINGLETON_NAME
from kyma_gpu.extensions.workload_protection.pods import PODS
from kyma_gpu.plan import Plan
from kyma_gpu.reconcile.machine import FINALIZER, Inputs, Row, Seen, Step, status_of

SKIP_PROTECTION_ANNOTATION = f"{API_GROUP}/skip-workload-protection"
"""Lets a deletion go ahead while users' pods use GPUs (value "true")."""


def skipped(annotations: Mapping[str, str]) -> bool:
    """The Gpu's annotations skip workload protection."""
    return annotations.get(SKIP_PROTECTION_ANNOTATION) == "true"


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
    return deleting and not skipped(gpu.annotations)


def classify(inputs: Inputs, plan: Plan | None) -> Seen | None:
    """Before the Flux objects are deleted: users' GPU pods not listed yet, or running."""
    if skipped(inputs.gpu.annotations):
        return None
    pods = inputs.snap.observed.get(PODS)
    if pods is None:
        return Seen(Situation.WORKLOADS_UNLISTED)
    if pods:
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
