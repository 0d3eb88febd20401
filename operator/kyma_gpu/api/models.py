"""Spec and status of the `Gpu` resource (gpu.kyma-project.io/v1beta1).

These models are the single source of the API: the CRD in config/ is generated
from them (`make manifests`), the CRD reference in docs/ too. Field docstrings
become the schema descriptions that `kubectl explain gpu.spec` shows.

Python attributes are snake_case; the wire format is camelCase (aliases).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from kyma_gpu.api.base import DNS_NAME_PATTERN
from kyma_gpu.api.base import Model as _Model
from kyma_gpu.api.operations import (
    IMAGE_PATTERN,
    GpuStack,
    MigStrategy,
    NfdPlacement,
    SandboxMode,
    SharingMode,
    SharingSpec,
    UpgradePolicySpec,
)
from kyma_gpu.api.values import allowlist_of, values_error, without_nothing

API_GROUP = "gpu.kyma-project.io"
API_VERSION = "v1beta1"
KIND = "Gpu"
PLURAL = "gpus"
SINGLETON_NAME = "gpu"
STATUS_NODES_LIMIT = 100
"""status.nodes lists at most this many GPU nodes."""
STATUS_UNHEALTHY_LIMIT = 20
"""status.unhealthyNodes lists at most this many nodes (unhealthyNodeCount counts them all)."""
STATUS_POOLS_LIMIT = 64
"""status.pools lists at most this many worker pools."""
STATUS_COMPONENTS_LIMIT = 64
"""status.components lists at most this many DaemonSets: whoever may create DaemonSets in the
GPU operator's namespace must not grow the Gpu without bound (a chart renders about 15)."""
MAX_MARKED_PERCENT = 50
"""The most of a pool that spec.health may mark at once: half keeps a pool serving while
Gardener replaces machines, whatever a Gpu editor sets."""

# Patterns shared by the schema (admission) and the models (offline `plan`).
DRIVER_VERSION_PATTERN = r"^[0-9]{3}(\.[0-9]{1,3}){0,2}$"
INSTALLER_RELEASE_PATTERN = r"^[0-9]+\.[0-9]+\.[0-9]+$"
CHART_VERSION_PATTERN = r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"
CHART_REPOSITORY_PATTERN = r"^(https|oci|http)://[^\s/$.?#][^\s]*$"
IMAGE_REGISTRY_PATTERN = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._-]+)*$"


HTTP_NEEDS_INSECURE = (
    "spec.source.chartRepository is plain http://; use https:// or oci://, "
    "or set spec.source.insecure: true"
)
"""Said by the CEL rule on spec.source and by the model."""


VGPU_NEEDS_IMAGE = "spec.components.vgpuManager needs spec.components.vgpuManagerImage"
"""Said by the CEL rule on spec.components and by the model."""


SecretName = Annotated[str, StringConstraints(pattern=DNS_NAME_PATTERN, max_length=253)]


class DriverMode(StrEnum):
    """How the NVIDIA kernel driver reaches the GPU nodes."""

    AUTO = "Auto"
    PRECOMPILED = "Precompiled"
    PREINSTALLED = "Preinstalled"
    UPSTREAM = "Upstream"


class ClusterDriverMode(StrEnum):
    """The driver mode of the whole cluster, as the plan and the status report it."""

    PRECOMPILED = "Precompiled"
    PREINSTALLED = "Preinstalled"
    UPSTREAM = "Upstream"
    PER_POOL = "PerPool"
    """GPU pools with different OSes need drivers: one NVIDIADriver per pool."""


class DriverSpec(_Model):
    """The NVIDIA driver."""

    mode: DriverMode = DriverMode.AUTO
    """Auto picks per OS: Precompiled for Garden Linux and SUSE Linux Micro, Preinstalled where
    a host driver is present (Flatcar, Bottlerocket, Talos, or the node label
    gpu.kyma-project.io/driver-preinstalled=true), Upstream (NVIDIA's driver container) elsewhere.
    A fixed mode applies to every GPU node."""

    version: str | None = Field(default=None, pattern=DRIVER_VERSION_PATTERN, max_length=16)
    """Driver branch ("590") or full version ("590.48.01"). Precompiled images are built per
    branch; on Garden Linux a full version must be the one of its branch that the installer
    release builds (its versions.yaml in values-rules/installer/), any other is refused
    (UnknownDriverVersion). Upstream maps a branch to the newest full version NVIDIA publishes
    as a driver container for the nodes' OSes (values-rules/nvidia-drivers.yaml). Empty: the
    installer release's default branch (Precompiled), the chart's default driver (Upstream)."""

    installer_release: str | None = Field(
        default=None, pattern=INSTALLER_RELEASE_PATTERN, max_length=32
    )
    """gardenlinux-nvidia-installer release (tag, e.g. "1.17.0") whose images and recommended
    chart values are adopted whole. Empty: the module's pinned default."""

    upgrade_policy: UpgradePolicySpec = Field(default_factory=UpgradePolicySpec)
    """How a changed driver reaches the nodes: node by node, GPU pods moved away first."""


class SourceSpec(_Model):
    """Where the chart and the images come from: the public defaults, or mirrors for sovereign
    and air-gapped clouds."""

    chart_repository: str | None = Field(
        default=None, pattern=CHART_REPOSITORY_PATTERN, max_length=512
    )
    """Helm repository URL of the NVIDIA GPU Operator chart: https:// (a HelmRepository) or
    oci:// (an OCIRepository). http:// only with insecure: true. Empty: NVIDIA's repository.
    With chartName, operatorVersion, secretRef and insecure it must match a source a cluster
    administrator allows in the ConfigMap kyma-system/kyma-gpu-chart-sources (without it:
    NVIDIA's repository at the supported versions); otherwise nothing is applied."""

    chart_name: str = Field(default="gpu-operator", pattern=DNS_NAME_PATTERN, max_length=63)
    """Chart name in that repository."""

    insecure: StrictBool = False
    """Allow plain http:// chart repositories and OCI registries without TLS. For tests and
    closed networks only."""

    secret_ref: str | None = Field(default=None, pattern=DNS_NAME_PATTERN, max_length=253)
    """Name of a Secret in the module's namespace with the chart repository credentials
    (username/password, or .dockerconfigjson for OCI). Flux reads it; the module never does.
    Only a Secret the allowed source lists (kyma-system/kyma-gpu-chart-sources, secretRefs)."""

    image_registry: str | None = Field(default=None, pattern=IMAGE_REGISTRY_PATTERN, max_length=255)
    """Registry mirror (host[:port][/path], no scheme) that replaces the registry host of every
    operand image: nvcr.io/nvidia/driver becomes <mirror>/nvidia/driver. Only a mirror that a
    cluster administrator lists in the ConfigMap kyma-system/kyma-gpu-chart-sources (key
    registries); anything else is refused at admission. Empty: the charts' own registries, or
    the first listed mirror where the administrator does not allow those."""

    image_pull_secrets: list[SecretName] = Field(default_factory=list, max_length=8)
    """Names of Secrets in the GPU operator's namespace used to pull operand images, besides
    the ones the administrator lists with the mirror."""

    @model_validator(mode="after")
    def _http_needs_insecure(self) -> SourceSpec:
        repo = self.chart_repository
        if repo is not None and repo.startswith("http://") and not self.insecure:
            raise ValueError(HTTP_NEEDS_INSECURE)
        return self


class ComponentsSpec(_Model):
    """Optional parts of the GPU stack."""

    dcgm_exporter: StrictBool = True
    """DCGM exporter: GPU metrics for Prometheus."""

    service_monitor: StrictBool = False
    """A ServiceMonitor for the DCGM exporter (needs the Prometheus operator's CRDs)."""

    mig_manager: StrictBool = False
    """MIG manager: partitions A100/H100 GPUs into MIG instances."""

    gpu_feature_discovery: StrictBool = True
    """GPU feature discovery: node labels with GPU model, memory, driver and CUDA versions."""

    node_feature_discovery: NfdPlacement = NfdPlacement.GPU_NODES
    """Where node-feature-discovery's worker runs: GpuNodes (default: only where a GPU can be:
    known GPU machine types, nodes with an NVIDIA PCI device or the label
    gpu.kyma-project.io/gpu=true, nodes without a machine type label) or AllNodes (every node,
    as NVIDIA's chart does, for other consumers of NFD's labels)."""

    node_status_exporter: StrictBool = False
    """Node status exporter: metrics about the operator's validations."""

    mig_strategy: MigStrategy = MigStrategy.SINGLE
    """How MIG instances are advertised: None, Single (the chart's default) or Mixed. The MIG
    layout itself is the MIG manager's (migManager) or the node admin's."""

    vgpu_manager: StrictBool = False
    """NVIDIA vGPU Manager: the host driver that splits GPUs into vGPUs for virtual machines.
    Needs sandboxWorkloads and vgpuManagerImage (a licensed NVIDIA AI Enterprise image)."""

    vgpu_manager_image: str | None = Field(default=None, pattern=IMAGE_PATTERN, max_length=255)
    """The vGPU Manager image, registry/path/name:tag, built from NVIDIA's licensed sources.
    Only from a registry mirror a cluster administrator lists (kyma-system/kyma-gpu-chart-sources,
    key registries)."""

    sandbox_workloads: SandboxMode = SandboxMode.OFF
    """GPUs passed through to virtual machines: Off, KubeVirt or Kata. Nodes opt in with the
    label nvidia.com/gpu.workload.config=vm-passthrough (or vm-vgpu); others run containers."""

    confidential_computing: StrictBool = False
    """Confidential Computing manager: GPUs in CC mode for confidential VMs (Hopper and newer,
    with Kata)."""

    gpu_direct_storage: StrictBool = False
    """GPUDirect Storage (nvidia-fs): DMA between NVMe or RDMA storage and GPU memory."""

    gdrcopy: StrictBool = False
    """GDRCopy (gdrdrv): low-latency copies between CPU and GPU memory."""

    @model_validator(mode="after")
    def _vgpu_needs_image(self) -> ComponentsSpec:
        if self.vgpu_manager and self.vgpu_manager_image is None:
            raise ValueError(VGPU_NEEDS_IMAGE)
        return self


class Remediation(StrEnum):
    """What the manager does to a GPU node whose GPUs are unhealthy (spec.health)."""

    OFF = "Off"
    """Report only (Gpu.status, Events, metrics)."""
    MARK_NODES = "MarkNodes"
    """Also set the Node condition KymaGpuUnhealthy (True, reason: the finding); Gardener's
    machine-controller-manager replaces the machine when the worker pool lists the condition
    in machineControllerManager.nodeConditions."""
    MARK_AND_CORDON = "MarkAndCordon"
    """Also cordon the node, so no new pod lands there (it uncordons only what it cordoned)."""


class HealthSpec(_Model):
    """GPU health: what the manager does beyond reporting unhealthy GPUs."""

    remediation: Remediation = Remediation.OFF
    """Off (the default), MarkNodes or MarkAndCordon."""

    max_marked_percent: int = Field(default=20, ge=1, le=MAX_MARKED_PERCENT)
    """At most this share of a worker pool's nodes is marked at once (at least one node), and
    never more than half: a fault that hits a whole pool (a bad driver) must not have every
    machine replaced."""


class GpuSpec(_Model):
    """Desired state. The empty spec is valid and does the right thing."""

    driver: DriverSpec = Field(default_factory=DriverSpec)
    """The NVIDIA driver."""

    operator_version: str | None = Field(default=None, pattern=CHART_VERSION_PATTERN, max_length=64)
    """NVIDIA GPU Operator chart version (e.g. "v26.7.0"). Empty: the module's pinned default."""

    source: SourceSpec = Field(default_factory=SourceSpec)
    """Chart and image sources."""

    components: ComponentsSpec = Field(default_factory=ComponentsSpec)
    """Optional components."""

    sharing: SharingSpec = Field(default_factory=SharingSpec)
    """GPU sharing through the device plugin: time-slicing or MPS, per node pool."""

    health: HealthSpec = Field(default_factory=HealthSpec)
    """GPU health remediation: marking (and cordoning) nodes whose GPUs are unhealthy."""

    stack: GpuStack = GpuStack.DEVICE_PLUGIN
    """DevicePlugin (the ClusterPolicy) or DRA (the GPUCluster with the NVIDIA DRA driver; chart
    v26.7.0 and newer, experimental)."""

    values: dict[str, Any] | None = Field(default=None, json_schema_extra={"x-kyma-values": True})
    """Chart values beyond the typed fields, merged after every rule: only the values listed in
    values-rules/values-allowlist.yaml, each with its type (operands' resources, tolerations,
    priority and pull policy, the update strategy, the operator's log level, GPUDirect RDMA,
    the DCGM exporter's ServiceMonitor and metrics list, the MIG manager's layouts). Anything
    else is refused (strict field validation names it, kubectl apply's default; without it, as
    kubectl patch by default, the value is dropped with a warning). A null, an empty map, or
    the empty map the API server leaves where it dropped keys sets nothing: the module's own
    values stay. Images, commands, env, host paths, volumes and NFD's configuration are the
    module's."""

    @field_validator("values")
    @classmethod
    def _only_listed_values(
        cls, values: dict[str, Any] | None, info: ValidationInfo
    ) -> dict[str, Any] | None:
        """Held to the allowlist of the validation's context (api/values.py ValuesContext: the
        Catalog's), the default rules directory's without one."""
        bad = values_error(values, allowlist_of(info.context)) if values is not None else None
        if bad is not None:  # the message last: it may quote the user's text
            raise PydanticCustomError("spec_values", "{message}", {"message": bad.text})
        kept = without_nothing(values) if values is not None else None
        return kept or None


class GpuState(StrEnum):
    """Summary state, read by Kyma Lifecycle Manager and Busola."""

    READY = "Ready"
    PROCESSING = "Processing"
    WARNING = "Warning"
    ERROR = "Error"
    DELETING = "Deleting"


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(_Model):
    """A Kubernetes-style condition."""

    type: str
    """Ready, NodesDetected, Preflight, PoolsReady, ReleaseReady, SourceReady, DriverReady,
    ComponentsReady, FluxAvailable; during deletion WorkloadsProtected and Uninstalled."""

    status: ConditionStatus
    """True, False or Unknown."""

    reason: str
    """CamelCase reason, stable for machines."""

    message: str = ""
    """Human-readable details."""

    observed_generation: int | None = None
    """The Gpu generation this condition was computed for."""

    last_transition_time: str | None = None
    """When status last changed (RFC 3339)."""


class GpuNodeStatus(_Model):
    """A detected GPU node."""

    name: str
    """Node name."""

    provider: str
    """aws, gcp, azure, openstack, ... or unknown (from spec.providerID)."""

    machine_type: str | None = None
    """node.kubernetes.io/instance-type."""

    gpu_model: str | None = None
    """GPU model, from the machine-type registry or the node's labels."""

    gpu_count: int | None = None
    """GPUs on the node, when known."""

    os: str
    """OS family: gardenlinux, sl-micro, ubuntu, sles, rhel, flatcar, bottlerocket, talos,
    unknown."""

    os_version: str | None = None
    """OS version from status.nodeInfo.osImage."""

    arch: str | None = None
    """CPU architecture: amd64, or arm64 (AWS Graviton, NVIDIA Grace)."""

    driver_mode: str
    """Precompiled, Preinstalled or Upstream."""

    pool: str | None = None
    """Gardener worker pool."""


class ComponentStatus(_Model):
    """Readiness of one GPU operand DaemonSet."""

    name: str
    """DaemonSet name."""

    ready: bool
    """All desired pods are available and up to date."""

    desired: int = 0
    """Pods the DaemonSet wants."""

    available: int = 0
    """Pods available."""


class PoolHealth(_Model):
    """The GPUs of one Gardener worker pool."""

    name: str
    """Worker pool (worker.gardener.cloud/pool), or "(none)"."""

    nodes: int = 0
    """GPU nodes in the pool."""

    gpus_healthy: int = 0
    """GPUs that pods can use: present, advertised and not withdrawn by the device plugin."""

    gpu_total: int = 0
    """GPUs the pool's nodes must have (their machine types'), else as seen."""

    unhealthy_nodes: int = 0
    """Nodes with a health finding."""


class UnhealthyNode(_Model):
    """A GPU node with a health finding."""

    name: str
    """Node name."""

    pool: str
    """Worker pool."""

    reason: str
    """DriverFailed, GpusMissing, GpusUnhealthy or WrongGpuModel."""

    message: str = ""
    """What was seen, e.g. "1 of 2 GPUs withdrawn by the device plugin"."""

    marked: bool = False
    """The node carries the condition KymaGpuUnhealthy (spec.health.remediation)."""


class SharingStatus(_Model):
    """GPU sharing as the device plugin is told it."""

    mode: SharingMode
    """The configuration every GPU node gets: None, TimeSlicing or MPS."""

    replicas: int | None = None
    """Replicas per GPU of that configuration."""

    profiles: list[str] = Field(default_factory=list)
    """Profiles that nodes can pick with the label nvidia.com/device-plugin.config."""

    config_map: str | None = None
    """The device plugin's ConfigMap in the GPU operator's namespace."""

    active: bool = False
    """The NVIDIA operator runs the device plugin with this configuration (the ClusterPolicy
    names it, and the device plugin and MPS control daemon DaemonSets mount it and have rolled
    out)."""


class GpuStatus(_Model):
    """Observed state, written by the operator only."""

    state: GpuState = GpuState.PROCESSING
    """Ready, Processing, Warning, Error or Deleting."""

    message: str = ""
    """One line saying why the state is what it is."""

    observed_generation: int | None = None
    """The Gpu generation this status was computed for."""

    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Summary Ready and its inputs, at most one of each type."""

    gpu_node_count: int = 0
    """GPU nodes detected."""

    gpu_nodes_ready: int = 0
    """GPU nodes that can run GPU pods now: the ready pods of the NVIDIA device plugin DaemonSet
    (it starts on a node once the driver and the container toolkit there work), or, without
    one, of the driver DaemonSets. At most gpuNodeCount."""

    ready_nodes: str | None = None
    """gpuNodesReady/gpuNodeCount, e.g. "2/3": the READY NODES column of `kubectl get gpu`."""

    gpus: str | None = None
    """gpusHealthy/gpuTotal, e.g. "7/8": the GPUS column of `kubectl get gpu`."""

    gpus_healthy: int = 0
    """GPUs that pods can use, on all GPU nodes."""

    gpu_total: int = 0
    """GPUs the GPU nodes must have."""

    pools: list[PoolHealth] = Field(default_factory=list, max_length=STATUS_POOLS_LIMIT)
    """GPU health per worker pool, the first 64 by name."""

    unhealthy_nodes: list[UnhealthyNode] = Field(
        default_factory=list, max_length=STATUS_UNHEALTHY_LIMIT
    )
    """GPU nodes with a health finding, the first 20 by name (unhealthyNodeCount counts all)."""

    unhealthy_node_count: int = 0
    """GPU nodes with a health finding, all of them."""

    nodes: list[GpuNodeStatus] = Field(default_factory=list, max_length=STATUS_NODES_LIMIT)
    """The detected GPU nodes, the first 100 by name (gpuNodeCount counts them all): the whole
    Gpu must stay far below the API server's object size limit on clusters of any size."""

    components: list[ComponentStatus] = Field(
        default_factory=list, max_length=STATUS_COMPONENTS_LIMIT
    )
    """GPU operand DaemonSets and their readiness, the first 64 by name (componentCount counts
    them all): every DaemonSet of the GPU operator's namespace is one."""

    component_count: int = 0
    """GPU operand DaemonSets observed, all of them."""

    driver_mode: str | None = None
    """Cluster driver mode: Precompiled, Preinstalled, Upstream, or PerPool for mixed fleets."""

    driver_version: str | None = None
    """Driver version running on the GPU nodes, read from the images of the NVIDIA driver
    DaemonSets: a branch ("590") for precompiled images, a full version upstream. Several,
    comma-separated, in a mixed fleet or while a driver rollout replaces the pods. Empty while
    no driver pod runs (no GPU nodes, or the driver is preinstalled on the hosts)."""

    desired_driver_version: str | None = None
    """Driver branch or version the module asks the NVIDIA operator for (spec.driver.version,
    or the installer release's default)."""

    installer_release: str | None = None
    """gardenlinux-nvidia-installer release in use (precompiled Garden Linux)."""

    chart_version: str | None = None
    """Desired NVIDIA GPU Operator chart version."""

    installed_chart_version: str | None = None
    """Chart version of the last successful Flux release."""

    helm_release: str | None = None
    """namespace/name of the Flux HelmRelease."""

    stack: GpuStack | None = None
    """DevicePlugin (ClusterPolicy) or DRA (GPUCluster)."""

    sharing: SharingStatus | None = None
    """GPU sharing, when spec.sharing configures any."""


class GpuMeta(_Model):
    """The part of metadata the operator reads."""

    model_config = ConfigDict(extra="ignore")

    name: str
    uid: str | None = None
    generation: int | None = None
    deletion_timestamp: str | None = None


class Gpu(_Model):
    """The whole object, as parsed from a manifest or the API."""

    model_config = ConfigDict(extra="ignore")

    api_version: str
    kind: str
    metadata: GpuMeta
    spec: GpuSpec = Field(default_factory=GpuSpec)

    @model_validator(mode="after")
    def _is_a_gpu(self) -> Gpu:
        expected = f"{API_GROUP}/{API_VERSION}"
        if self.api_version != expected or self.kind != KIND:
            raise ValueError(
                f"expected apiVersion {expected} kind {KIND}, got "
                f"apiVersion {self.api_version} kind {self.kind}"
            )
        return self
