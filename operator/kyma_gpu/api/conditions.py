"""The core's conditions of Gpu.status and the reasons each may carry: one enum per condition.
An extension's conditions and reasons are its own (its folder's conditions.py).

Reasons mirrored from Flux (the HelmRelease's and the chart source's Ready condition) are
Flux's own and not listed here; `FluxMirrored` names that case. `Reason` is every reason a
condition may carry: `status/judge.py`'s `cond` takes nothing else, so a literal string
where a reason belongs fails mypy. docs/crd-reference.md lists these enums
(kyma_gpu_tools/reference.py).
"""

from __future__ import annotations

from enum import StrEnum
from typing import NewType


class ConditionType(StrEnum):
    READY = "Ready"
    NODES_DETECTED = "NodesDetected"
    PREFLIGHT = "Preflight"
    POOLS_READY = "PoolsReady"
    RELEASE_READY = "ReleaseReady"
    SOURCE_READY = "SourceReady"
    DRIVER_READY = "DriverReady"
    COMPONENTS_READY = "ComponentsReady"
    FLUX_AVAILABLE = "FluxAvailable"
    UNINSTALLED = "Uninstalled"


class ReadyReason(StrEnum):
    """The summary: True when the GPU stack is installed and every component is ready."""

    READY = "Ready"
    PROCESSING = "Processing"
    ERROR = "Error"
    DELETING = "Deleting"
    NOT_THE_SINGLETON = "NotTheSingleton"
    INVALID_SPEC = "InvalidSpec"
    PLAN_FAILED = "PlanFailed"
    """The module could not plan a spec the model accepted (a defect of the module)."""
    FLUX_INCOMPATIBLE = "FluxIncompatible"
    DEGRADED = "Degraded"
    """The stack serves the GPU nodes of every worker pool but the blocked or degraded ones
    (PoolsReady False): the state is Warning."""


class NodesReason(StrEnum):
    GPU_NODES_FOUND = "GpuNodesFound"
    NO_GPU_NODES = "NoGpuNodes"


class PoolsReason(StrEnum):
    """PoolsReady: does every GPU worker pool get a working GPU stack from the plan?"""

    SERVED = "PoolsServed"
    BLOCKED = "PoolBlocked"
    """No node of a worker pool gets a working GPU (its findings are errors); the other pools
    are planned and applied."""
    DEGRADED = "PoolDegraded"
    """Some nodes of a worker pool get no working GPU."""
    NO_GPU_NODES = "NoGpuNodes"


class PreflightReason(StrEnum):
    """PreflightPassed, or the worst finding's reason: every reason a preflight finding
    (plan/preflight.py, plan/features.py) can carry."""

    PASSED = "PreflightPassed"
    # detection and the driver
    NO_GPU_NODES = "NoGpuNodes"
    UNKNOWN_OS = "UnknownOs"
    UPSTREAM_ON_GARDEN_LINUX = "UpstreamOnGardenLinux"
    UNKNOWN_MACHINE_TYPE = "UnknownMachineType"
    UNKNOWN_INSTALLER_RELEASE = "UnknownInstallerRelease"
    UNKNOWN_DRIVER_VERSION = "UnknownDriverVersion"
    UNKNOWN_CHART_VERSION = "UnknownChartVersion"
    NO_DRIVER_IMAGE = "NoDriverImage"
    PREINSTALLED_NODE_NOT_EXCLUDED = "PreinstalledNodeNotExcluded"
    NO_DRIVER_FOR_UNKNOWN_OS = "NoDriverForUnknownOs"
    MIRROR_NEEDS_CHART_FACTS = "MirrorNeedsChartFacts"
    TEMPLATE_IN_EXTRA_OBJECTS = "TemplateInExtraObjects"
    """A string of the module's extraObjects holds {{: the chart runs them through tpl."""
    CHART_SOURCE_NOT_ALLOWED = "ChartSourceNotAllowed"
    """spec.source names a repository, chart, version, Secret or http:// that the ConfigMap
    kyma-system/kyma-gpu-chart-sources does not allow (a cluster administrator's list)."""
    IMAGE_REGISTRY_NOT_ALLOWED = "ImageRegistryNotAllowed"
    """spec.source.imageRegistry or spec.components.vgpuManagerImage names a registry that the
    ConfigMap kyma-system/kyma-gpu-chart-sources (key registries) does not list, or the charts'
    own registries are not allowed and no mirror is listed."""
    NEEDS_VGPU_GUEST_DRIVER = "NeedsVgpuGuestDriver"
    GPU_NOT_SUPPORTED_BY_DRIVER = "GpuNotSupportedByDriver"
    # the typed operations (spec.driver.upgradePolicy, spec.sharing, the extras, spec.stack)
    AUTO_UPGRADE_OFF = "AutoUpgradeOff"
    UPGRADE_POLICY_IGNORED = "UpgradePolicyIgnored"
    SHARING_NEEDS_DEVICE_PLUGIN = "SharingNeedsDevicePlugin"
    MPS_WITH_MIG = "MpsWithMig"
    MPS_ON_MIG = "MpsOnMig"
    MPS_WITH_MIXED_STRATEGY = "MpsWithMixedStrategy"
    MPS_REPLICAS_ABOVE_LIMIT = "MpsReplicasAboveLimit"
    UNKNOWN_SHARING_PROFILE = "UnknownSharingProfile"
    NO_MIG_CAPABLE_GPUS = "NoMigCapableGpus"
    NEEDS_DRIVER_CONTAINER = "NeedsDriverContainer"
    VGPU_NEEDS_SANDBOX = "VgpuNeedsSandbox"
    NO_VGPU_IMAGES_FOR_GARDEN_LINUX = "NoVgpuImagesForGardenLinux"
    CONFIDENTIAL_COMPUTING_NEEDS_KATA = "ConfidentialComputingNeedsKata"
    NO_CONFIDENTIAL_COMPUTING_GPUS = "NoConfidentialComputingGpus"
    SANDBOX_NEEDS_BARE_METAL = "SandboxNeedsBareMetal"
    STACK_NOT_IN_CHART = "StackNotInChart"
    NOT_ON_DRA_STACK = "NotOnDraStack"
    DRA_EXPERIMENTAL = "DraExperimental"


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
    UPGRADING = "DriverUpgrading"
    """GPU nodes are on their way through the NVIDIA upgrade controller's driver rollout."""
    UPGRADE_FAILED = "DriverUpgradeFailed"
    """The controller labelled a node upgrade-failed: its new driver pod did not get ready."""
    VERSION_PENDING = "DriverVersionPending"
    """A driver DaemonSet's template still names another driver than the plan: the NVIDIA
    operator has not yet rendered the version the Gpu asks for."""


class ComponentsReason(StrEnum):
    READY = "ComponentsReady"
    NOT_READY = "ComponentsNotReady"
    NODE_FEATURES_MISSING = "NodeFeaturesMissing"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    """Pods of the GPU operator's namespace cannot pull their images: the message names them
    (a mirror that lacks one, a wrong pull Secret)."""
    WAITING = "WaitingForComponents"
    STACK_CONFLICT = "StackConflict"
    """The other stack's custom resource is still there (the GPUCluster after spec.stack went
    back to DevicePlugin): the NVIDIA operator runs neither next to the other."""


class FluxReason(StrEnum):
    MODULE_FLUX = "ModuleFlux"
    CLUSTER_FLUX = "ClusterFlux"
    INSTALLING = "InstallingFlux"
    INCOMPATIBLE = "FluxIncompatible"
    UNKNOWN = "Unknown"


class UninstallReason(StrEnum):
    """Uninstalled, during a deletion."""

    UNINSTALL_IN_PROGRESS = "UninstallInProgress"
    UNINSTALL_STALLED = "UninstallStalled"


FluxMirrored = NewType("FluxMirrored", str)
"""A reason as Flux gave it on one of its objects' conditions (Ready, Reconciling), mirrored
into ReleaseReady or SourceReady: InstallSucceeded, UpgradeFailed, Succeeded, FetchFailed..."""

Reason = (
    ReadyReason
    | NodesReason
    | PoolsReason
    | PreflightReason
    | ReleaseReason
    | SourceReason
    | DriverReason
    | ComponentsReason
    | FluxReason
    | UninstallReason
    | FluxMirrored
)
"""The reason of a condition of Gpu.status: one of the module's enums, or Flux's own word."""
