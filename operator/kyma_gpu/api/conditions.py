"""The conditions of Gpu.status and the reasons each may carry: one enum per condition.

Reasons mirrored from Flux (the HelmRelease's and the chart source's Ready condition) are
Flux's own and not listed here; `FluxMirrored` names that case. docs/crd-reference.md lists
these enums (api/reference.py).
"""

from __future__ import annotations

from enum import StrEnum


class ConditionType(StrEnum):
    READY = "Ready"
    NODES_DETECTED = "NodesDetected"
    PREFLIGHT = "Preflight"
    RELEASE_READY = "ReleaseReady"
    SOURCE_READY = "SourceReady"
    DRIVER_READY = "DriverReady"
    COMPONENTS_READY = "ComponentsReady"
    FLUX_AVAILABLE = "FluxAvailable"
    WORKLOADS_PROTECTED = "WorkloadsProtected"
    UNINSTALLED = "Uninstalled"


class ReadyReason(StrEnum):
    """The summary: True when the GPU stack is installed and every component is ready."""

    READY = "Ready"
    PROCESSING = "Processing"
    ERROR = "Error"
    DELETING = "Deleting"
    NOT_THE_SINGLETON = "NotTheSingleton"
    INVALID_SPEC = "InvalidSpec"
    FLUX_INCOMPATIBLE = "FluxIncompatible"


class NodesReason(StrEnum):
    GPU_NODES_FOUND = "GpuNodesFound"
    NO_GPU_NODES = "NoGpuNodes"


class PreflightReason(StrEnum):
    """PreflightPassed, or the worst finding's reason (the plan's findings: NoDriverImage,
    UnknownOs, ...)."""

    PASSED = "PreflightPassed"


class ReleaseReason(StrEnum):
    """The module's own reasons; otherwise the HelmRelease Ready reason (InstallSucceeded,
    InstallFailed, SourceNotReady, ...)."""

    NOT_APPLIED = "NotApplied"
    APPLY_FAILED = "ApplyFailed"
    RELEASE_PENDING = "ReleasePending"
    PROGRESSING = "Progressing"
    UNINSTALLING = "Uninstalling"
    NOT_READY = "NotReady"


class SourceReason(StrEnum):
    """The module's own reasons; otherwise the chart source's Ready reason (Succeeded,
    FetchFailed, ...)."""

    WAITING_FOR_SOURCE = "WaitingForSource"
    PROGRESSING = "Progressing"
    UNKNOWN = "Unknown"


class DriverReason(StrEnum):
    DAEMONSETS_READY = "DriverDaemonSetsReady"
    PREINSTALLED = "DriverPreinstalled"
    NOT_READY = "DriverNotReady"
    WAITING = "WaitingForDriver"
    NO_GPU_NODES = "NoGpuNodes"


class ComponentsReason(StrEnum):
    READY = "ComponentsReady"
    NOT_READY = "ComponentsNotReady"
    NODE_FEATURES_MISSING = "NodeFeaturesMissing"
    WAITING = "WaitingForComponents"


class FluxReason(StrEnum):
    MODULE_FLUX = "ModuleFlux"
    CLUSTER_FLUX = "ClusterFlux"
    INSTALLING = "InstallingFlux"
    INCOMPATIBLE = "FluxIncompatible"
    UNKNOWN = "Unknown"


class DeletionReason(StrEnum):
    """WorkloadsProtected and Uninstalled, during a deletion."""

    GPU_WORKLOADS_RUNNING = "GpuWorkloadsRunning"
    NO_GPU_WORKLOADS = "NoGpuWorkloads"
    PROTECTION_SKIPPED = "ProtectionSkipped"
    UNINSTALL_IN_PROGRESS = "UninstallInProgress"
    UNINSTALL_STALLED = "UninstallStalled"


REASONS: dict[ConditionType, type[StrEnum]] = {
    ConditionType.READY: ReadyReason,
    ConditionType.NODES_DETECTED: NodesReason,
    ConditionType.PREFLIGHT: PreflightReason,
    ConditionType.RELEASE_READY: ReleaseReason,
    ConditionType.SOURCE_READY: SourceReason,
    ConditionType.DRIVER_READY: DriverReason,
    ConditionType.COMPONENTS_READY: ComponentsReason,
    ConditionType.FLUX_AVAILABLE: FluxReason,
    ConditionType.WORKLOADS_PROTECTED: DeletionReason,
    ConditionType.UNINSTALLED: DeletionReason,
}
"""Each condition and the enum of the reasons the module itself gives it."""
