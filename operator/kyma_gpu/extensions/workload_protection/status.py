"""Workload protection's part of the status: the condition WorkloadsProtected, the deletion's
first wait (status/deletion.py: the core's Uninstalled follows once it no longer holds), and
its part of the Events: they name no user's pod (without_pod_names). Pure."""

from __future__ import annotations

import re

from kyma_gpu.api.models import GpuState
from kyma_gpu.extensions.workload_protection.conditions import Conditions, WorkloadsReason
from kyma_gpu.extensions.workload_protection.machine import SKIP_PROTECTION_ANNOTATION, skipped
from kyma_gpu.extensions.workload_protection.pods import PODS
from kyma_gpu.facts.echo import listed
from kyma_gpu.plan import Plan
from kyma_gpu.status.aggregate import Evidence, StatusPart
from kyma_gpu.status.deletion import Wait

PODS_SHOWN = 10
_PODS_NAMED = re.compile(
    r"^(deletion waits for \d+ (?:pod that uses|pods that use) GPUs): [^ ,]+(?:, [^ ,]+)*"
    r"(?: and \d+ more)?(\. Delete (it|them))"
)
"""The pod names in workloads_wait's message: "namespace/name, ..." (DNS names: no spaces or
commas)."""


def _pods(count: int) -> tuple[str, str]:
    """("N pods that use GPUs", "them"), in the singular for one pod."""
    return ("1 pod that uses GPUs", "it") if count == 1 else (f"{count} pods that use GPUs", "them")


def protection(plan: Plan, observed: Evidence, generation: int | None) -> StatusPart:
    """While the Gpu is being deleted: users' GPU pods hold the deletion (unless skipped)."""
    if not observed.deleting:
        return StatusPart()
    skip = skipped(observed.annotations)
    pods = () if skip else tuple(str(pod) for pod in observed.observed.get(PODS) or ())
    return StatusPart(waits=(workloads_wait(pods, skip),), holds=bool(pods))


def workloads_wait(pods: tuple[str, ...], skipped: bool) -> Wait:
    if skipped:
        return Wait(
            Conditions.WORKLOADS_PROTECTED, "False", WorkloadsReason.PROTECTION_SKIPPED,
            f"skipped by the annotation {SKIP_PROTECTION_ANNOTATION}=true: the GPU stack is "
            "removed even while pods use GPUs", GpuState.DELETING,
        )  # fmt: skip
    if not pods:
        return Wait(Conditions.WORKLOADS_PROTECTED, "True", WorkloadsReason.NO_GPU_WORKLOADS,
                    "no user pod uses a GPU", GpuState.DELETING)  # fmt: skip
    waits, them = _pods(len(pods))
    return Wait(
        Conditions.WORKLOADS_PROTECTED, "False", WorkloadsReason.GPU_WORKLOADS_RUNNING,
        f"deletion waits for {waits}: {listed(pods, PODS_SHOWN)}. Delete {them}, or annotate "
        f"the Gpu with {SKIP_PROTECTION_ANNOTATION}=true to go ahead",
        GpuState.WARNING,
    )  # fmt: skip


def without_pod_names(message: str) -> str:
    """`message` without the names of users' pods that workloads_wait puts in it: what an Event
    in the module's namespace may say (docs/security.md, "Smaller rights"). Whoever reads the
    Gpu can list pods in every namespace anyway; a reader of kyma-system's Events need not."""
    return _PODS_NAMED.sub(
        lambda m: f"{m[1]} (the Gpu's condition WorkloadsProtected names {m[3]}){m[2]}", message
    )
