"""Workload protection's condition and its reasons: WorkloadsProtected, during a deletion.
docs/crd-reference.md lists them with the core's (kyma_gpu_tools/reference.py, from the
registered extensions)."""

from __future__ import annotations

from enum import StrEnum


class Conditions(StrEnum):
    WORKLOADS_PROTECTED = "WorkloadsProtected"


class WorkloadsReason(StrEnum):
    """WorkloadsProtected, during a deletion."""

    GPU_WORKLOADS_RUNNING = "GpuWorkloadsRunning"
    NO_GPU_WORKLOADS = "NoGpuWorkloads"
    PROTECTION_SKIPPED = "ProtectionSkipped"
