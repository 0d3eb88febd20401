"""The typed GPU operations of the Gpu spec: the driver upgrade policy, GPU sharing, the
extras' switches and the stack (device plugin or DRA). Each maps to chart values through
values-rules/rules.yaml; what a chart, OS or driver mode cannot do is a preflight finding
(plan/preflight.py), what is contradictory in itself is refused here and by CEL
(kyma_gpu_tools/crd.py).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, StrictBool, StrictInt, model_validator

from kyma_gpu.api.base import DNS_LABEL_PATTERN, Model
from kyma_gpu.api.selectors import LabelSelector

MAX_UNAVAILABLE_PATTERN = r"^(0|[1-9][0-9]{0,4}|([1-9]?[0-9]|100)%)$"
IMAGE_PATTERN = r"^[a-z0-9][a-z0-9.:-]*(/[a-z0-9._-]+)+:[A-Za-z0-9._-]{1,128}$"
SHARING_CONFIG_MAP = "kyma-gpu-device-plugin-config"
"""The ConfigMap the chart creates from spec.sharing (a content hash is appended, so that a
change rolls the device plugin: the NVIDIA operator does not watch the ConfigMap's data)."""
DEFAULT_PROFILE = "default"
"""The device plugin configuration every GPU node gets unless its label picks a profile."""
PROFILE_LABEL = "nvidia.com/device-plugin.config"
"""The node label that picks a sharing profile (read by the device plugin's config manager)."""


# -- driver upgrades ---------------------------------------------------------------------


class WaitForCompletionSpec(Model):
    """Before a node's driver is replaced: wait for the jobs that podSelector selects."""

    pod_selector: LabelSelector = ""
    """Label selector of pods (e.g. batch jobs) to wait for, as kubectl get pods -l takes it
    ("app=batch,tier in (train,eval)"); empty: wait for none."""

    timeout_seconds: StrictInt = Field(default=0, ge=0, le=604800)
    """How long to wait for them; 0: as long as they run."""


class GpuPodDeletionSpec(Model):
    """Deleting the pods that use the node's GPUs, before its driver is replaced."""

    force: StrictBool = False
    """Also delete GPU pods that no controller (Deployment, Job, ...) would recreate. Off:
    such a pod stops the node's upgrade until it ends or is deleted by hand."""

    timeout_seconds: StrictInt = Field(default=300, ge=0, le=86400)
    """How long to wait for their deletion; 0: forever."""

    delete_empty_dir: StrictBool = False
    """Also delete pods with emptyDir volumes (their data is lost)."""


class DrainSpec(Model):
    """Draining the node (every pod, not only GPU pods), when deleting the GPU pods does not
    free the driver."""

    enable: StrictBool = False
    """Drain nodes before their driver is replaced."""

    force: StrictBool = False
    """Also evict pods that no controller would recreate."""

    pod_selector: LabelSelector = ""
    """Label selector of the pods to drain, as kubectl get pods -l takes it; empty: all of
    them."""

    timeout_seconds: StrictInt = Field(default=300, ge=0, le=86400)
    """How long a drain may take; 0: forever (not recommended: a stuck drain never ends)."""

    delete_empty_dir: StrictBool = False
    """Also evict pods with emptyDir volumes (their data is lost)."""


class UpgradePolicySpec(Model):
    """How the NVIDIA operator replaces the driver on GPU nodes when it changes (a new branch,
    installer release or chart): node by node, cordoned, GPU pods moved away first. The
    defaults are production-safe: one node at a time, no pod is deleted that a controller
    would not recreate, no emptyDir data is lost, no full drain. docs/operations.md#driver-upgrades
    shows it node by node."""

    auto_upgrade: StrictBool = True
    """Let the NVIDIA operator roll new drivers out. Off: the driver DaemonSets change, but a
    node keeps its old driver until its driver pod is deleted by hand."""

    max_parallel_upgrades: StrictInt = Field(default=1, ge=0, le=10000)
    """Nodes upgraded at the same time; 0: no limit (only maxUnavailable)."""

    max_unavailable: str = Field(default="25%", pattern=MAX_UNAVAILABLE_PATTERN, max_length=6)
    """GPU nodes that may be unavailable (cordoned, or not ready) at once, counting nodes that are
    unavailable for other reasons: a number ("2") or a percentage ("25%", rounded up)."""

    wait_for_completion: WaitForCompletionSpec = Field(default_factory=WaitForCompletionSpec)
    """Wait for selected jobs to finish before touching a node."""

    gpu_pod_deletion: GpuPodDeletionSpec = Field(default_factory=GpuPodDeletionSpec)
    """Deleting the GPU pods of a node before its driver is replaced."""

    drain: DrainSpec = Field(default_factory=DrainSpec)
    """Draining a node before its driver is replaced."""


# -- GPU sharing -------------------------------------------------------------------------


class SharingMode(StrEnum):
    """How pods share a GPU through the NVIDIA device plugin."""

    NONE = "None"
    """One pod per GPU."""
    TIME_SLICING = "TimeSlicing"
    """Replicas of a GPU take turns; no memory or fault isolation."""
    MPS = "MPS"
    """NVIDIA Multi-Process Service: replicas run at once, each with an equal share of memory
    and compute."""


REPLICAS_NEEDED = "replicas is required when mode is TimeSlicing or MPS"
TIME_SLICING_ONLY = "failRequestsGreaterThanOne applies to mode TimeSlicing only"


class SharingConfig(Model):
    """One device plugin sharing configuration."""

    mode: SharingMode = SharingMode.NONE
    """None, TimeSlicing or MPS."""

    replicas: StrictInt | None = Field(default=None, ge=2, le=128)
    """Each GPU is advertised as this many nvidia.com/gpu (required with TimeSlicing or MPS)."""

    rename_by_default: StrictBool = False
    """Advertise the replicas as nvidia.com/gpu.shared instead of nvidia.com/gpu, so that pods
    opt into a shared GPU by asking for it."""

    fail_requests_greater_than_one: StrictBool = False
    """TimeSlicing only: refuse a container that asks for more than one replica (two replicas are
    not twice the GPU)."""

    @model_validator(mode="after")
    def _consistent(self) -> SharingConfig:
        if self.mode is not SharingMode.NONE and self.replicas is None:
            raise ValueError(REPLICAS_NEEDED)
        if self.fail_requests_greater_than_one and self.mode is not SharingMode.TIME_SLICING:
            raise ValueError(TIME_SLICING_ONLY)
        return self


class SharingProfile(SharingConfig):
    """A named sharing configuration that nodes pick with the label
    nvidia.com/device-plugin.config=<name> (a worker pool label, set in the Gardener shoot)."""

    name: str = Field(pattern=DNS_LABEL_PATTERN, max_length=63)
    """The profile's name, the value of the node label. Not "default"."""


PROFILE_NAME_RESERVED = f"a sharing profile may not be named '{DEFAULT_PROFILE}'"
PROFILE_NAMES_UNIQUE = "the names of the sharing profiles must be unique"


class SharingSpec(SharingConfig):
    """GPU sharing: the configuration of every GPU node, and profiles that worker pools pick by
    node label. Rendered into the device plugin's configuration (the chart's
    devicePlugin.config); docs/gpu-sharing.md compares the options."""

    fail_on_init_error: StrictBool = True
    """The device plugin fails (and restarts) when it cannot initialise NVML, instead of
    advertising no GPUs."""

    profiles: list[SharingProfile] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Named configurations for worker pools that share differently (at most 16)."""

    @model_validator(mode="after")
    def _profile_names(self) -> SharingSpec:
        names = [p.name for p in self.profiles]
        if DEFAULT_PROFILE in names:
            raise ValueError(PROFILE_NAME_RESERVED)
        if len(set(names)) < len(names):  # the API server: the list is a map keyed by name
            raise ValueError(PROFILE_NAMES_UNIQUE)
        return self

    @property
    def configured(self) -> bool:
        """Whether the device plugin gets a configuration from the module at all."""
        return self.mode is not SharingMode.NONE or bool(self.profiles)


# -- switches and the stack ----------------------------------------------------------------


class SandboxMode(StrEnum):
    """GPUs passed through to virtual machines (sandbox workloads)."""

    OFF = "Off"
    KUBE_VIRT = "KubeVirt"
    """KubeVirt VMs; nodes opt in with nvidia.com/gpu.workload.config=vm-passthrough."""
    KATA = "Kata"
    """Kata Containers; nodes opt in with nvidia.com/gpu.workload.config=vm-passthrough."""


class NfdPlacement(StrEnum):
    """Where node-feature-discovery's worker runs (spec.components.nodeFeatureDiscovery)."""

    GPU_NODES = "GpuNodes"
    """Only where a GPU can be: nodes of a GPU machine type the module knows, nodes NFD found
    an NVIDIA PCI device on, nodes labelled gpu.kyma-project.io/gpu=true, and nodes without a
    machine type label. No worker on the CPU nodes of known machine types."""
    ALL_NODES = "AllNodes"
    """On every node, as NVIDIA's chart does: for other consumers of NFD's labels."""


class MigStrategy(StrEnum):
    """How MIG instances are advertised (device plugin and GPU feature discovery)."""

    NONE = "None"
    """MIG is ignored."""
    SINGLE = "Single"
    """Every GPU of a node has the same MIG layout; instances are nvidia.com/gpu."""
    MIXED = "Mixed"
    """Instances are advertised per profile, e.g. nvidia.com/mig-1g.10gb."""


class GpuStack(StrEnum):
    """Which NVIDIA stack serves GPUs to pods."""

    DEVICE_PLUGIN = "DevicePlugin"
    """The ClusterPolicy: device plugin, nvidia.com/gpu resources (the default)."""
    DRA = "DRA"
    """The GPUCluster (chart v26.7.0 and newer, experimental): the NVIDIA DRA driver; pods
    claim GPUs with ResourceClaims of the DeviceClass gpu.nvidia.com. Needs Kubernetes with
    resource.k8s.io (1.34 and newer)."""
