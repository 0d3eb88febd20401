"""GPU health's condition and its reasons: GpusHealthy, and the findings a GPU node may have
(also the reason of the Node condition KymaGpuUnhealthy). docs/crd-reference.md lists them
with the core's (kyma_gpu_tools/reference.py, from the registered extensions)."""

from __future__ import annotations

from enum import StrEnum


class Conditions(StrEnum):
    GPUS_HEALTHY = "GpusHealthy"


class HealthReason(StrEnum):
    """GpusHealthy, and (a GPU node's finding) the reason of the Node condition KymaGpuUnhealthy.
    The first four are a node's findings, worst first: a node shows the first it has."""

    DRIVER_FAILED = "DriverFailed"
    """The NVIDIA upgrade controller labelled the node upgrade-failed: its driver did not come
    up."""
    GPUS_MISSING = "GpusMissing"
    """The node has fewer GPUs than its machine type (or its gpu-count label) says: the kubelet's
    nvidia.com/gpu capacity, or the count GPU feature discovery saw, is lower."""
    GPUS_UNHEALTHY = "GpusUnhealthy"
    """The device plugin withdrew GPUs it found unhealthy (an XID error, a GPU off the bus):
    allocatable is below capacity."""
    WRONG_GPU_MODEL = "WrongGpuModel"
    """GPU feature discovery saw another GPU model than the machine type has (reported only:
    a new machine of the type would not differ)."""
    HEALTHY = "GpusHealthy"
    NO_GPU_NODES = "NoGpuNodes"
    NOT_ADVERTISED = "NotAdvertised"
    """Some GPU nodes advertise no GPUs yet (the device plugin starts there after the driver)."""


NODE_FINDINGS = (
    HealthReason.DRIVER_FAILED,
    HealthReason.GPUS_MISSING,
    HealthReason.GPUS_UNHEALTHY,
    HealthReason.WRONG_GPU_MODEL,
)
"""A node's health findings, worst first."""
REMEDIABLE = frozenset(NODE_FINDINGS[:3])
"""The findings a new machine of the same type cures: the ones spec.health.remediation marks."""
