"""The rule context: the keys a rule's `when` and `${templates}` can use.

plan.py builds the context through these models (`RuleContext.checked`), and
values-rules/context.md is generated from them (`kyma-gpu rules-schema`:
kyma_gpu_tools/rules_schema.py), so that the keys the
rules can use and the keys the documentation lists are the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import ConfigDict

from kyma_gpu.api.base import Model
from kyma_gpu.api.models import ComponentsSpec


class _Section(Model):
    """The API models' base (camelCase, frozen, unknown keys refused), and strict: the context
    plan/rule_context.py builds must have the documented types exactly."""

    model_config = ConfigDict(strict=True)


class NameRef(_Section):
    """A Kubernetes LocalObjectReference."""

    name: str


class ClusterContext(_Section):
    """The cluster's GPU nodes."""

    gpu_nodes: int
    """How many GPU nodes were detected."""
    os_families: list[str]
    """The OS families of the GPU pools; [gardenlinux] when there is no GPU node yet."""


class DriverContext(_Section):
    """The driver the plan chose."""

    mode: Literal["Precompiled", "Preinstalled", "Upstream", "PerPool"]
    """The cluster's driver mode; PerPool when GPU pools with different OSes need drivers."""
    nvidia_driver_objects: bool
    """Drivers come from one NVIDIADriver object per OS pool (forEach pools), not from the
    ClusterPolicy: in a mixed fleet (PerPool), and on the DRA stack (which has no ClusterPolicy)
    whenever a pool needs a driver."""
    os: str
    """The single OS family of the GPU nodes, or "mixed"."""
    branch: str
    """The driver branch (spec.driver.version's, else the installer release's default)."""
    version: str | None
    """The full driver version: spec.driver.version, or the installer's newest of its branch;
    null when the spec names none."""


class InstallerContext(_Section):
    """The gardenlinux-nvidia-installer release."""

    release: str
    """spec.driver.installerRelease, else the pinned one (defaults.yaml)."""
    used: bool
    """Garden Linux nodes get precompiled drivers, or no GPU node is there yet and the module
    prepares for them."""
    repository: str
    """The release's image repository: installerRepository (defaults.yaml), "/", release."""


class NvidiaContext(_Section):
    """NVIDIA's own images."""

    repository: str
    """NVIDIA's driver image repository (defaults.yaml nvidiaDriverRepository)."""


class SourceContext(_Section):
    """Where images come from (spec.source)."""

    image_registry: str | None
    """The image mirror, or null."""
    image_pull_secrets: list[str]
    """The names of the pull secrets."""
    image_pull_secret_refs: list[NameRef]
    """The same as [{name: ...}] (Kubernetes LocalObjectReferences)."""


class WaitForCompletionValues(_Section):
    """spec.driver.upgradePolicy.waitForCompletion."""

    timeout_seconds: int
    pod_selector: str


class PodDeletionValues(_Section):
    """spec.driver.upgradePolicy.gpuPodDeletion."""

    force: bool
    timeout_seconds: int
    delete_empty_dir: bool


class DrainValues(_Section):
    """spec.driver.upgradePolicy.drain."""

    enable: bool
    force: bool
    pod_selector: str
    timeout_seconds: int
    delete_empty_dir: bool


class UpgradePolicyContext(_Section):
    """spec.driver.upgradePolicy, in the shape of the chart's driver.upgradePolicy (and of an
    NVIDIADriver's spec.upgradePolicy, which names gpuPodDeletion podDeletion)."""

    auto_upgrade: bool
    """Let the NVIDIA operator roll driver changes out."""
    max_parallel_upgrades: int
    """Nodes upgraded at once (0: no limit)."""
    max_unavailable: int | str
    """A number of nodes, or a percentage ("25%")."""
    wait_for_completion: WaitForCompletionValues
    """{timeoutSeconds, podSelector}."""
    pod_deletion: PodDeletionValues
    """{force, timeoutSeconds, deleteEmptyDir}."""
    drain: DrainValues
    """{enable, force, podSelector, timeoutSeconds, deleteEmptyDir}."""


class SharingContext(_Section):
    """spec.sharing, rendered into the device plugin's configuration (plan/sharing.py)."""

    configured: bool
    """spec.sharing sets a mode other than None, or profiles."""
    mode: Literal["None", "TimeSlicing", "MPS"]
    """The mode every GPU node gets unless its label picks a profile."""
    config_map: str
    """The ConfigMap the chart creates: kyma-gpu-device-plugin-config and a hash of its data,
    so that a change rolls the device plugin out."""
    default: str
    """The configuration nodes get without the label nvidia.com/device-plugin.config."""
    configs: dict[str, str]
    """Configuration name -> the device plugin's configuration file (YAML text)."""


class StackContext(_Section):
    """spec.stack."""

    mode: Literal["DevicePlugin", "DRA"]
    """DevicePlugin (ClusterPolicy) or DRA (GPUCluster)."""


class MigContext(_Section):
    """spec.components.migStrategy as the chart spells it."""

    strategy: Literal["none", "single", "mixed"]


class SandboxContext(_Section):
    """spec.components.sandboxWorkloads as the chart spells it."""

    enabled: bool
    mode: Literal["kubevirt", "kata"]
    """kubevirt also when sandbox workloads are off (the chart's default)."""


class VgpuContext(_Section):
    """spec.components.vgpuManagerImage, split as the chart wants it; null without one."""

    repository: str | None
    image: str | None
    version: str | None


class NfdContext(_Section):
    """node-feature-discovery's master and worker (plan/nfd.py)."""

    namespace: str
    """Where the chart runs NFD, its workers and GPU feature discovery (defaults.yaml
    targetNamespace): the only namespace whose NodeFeature objects NFD's master reads."""

    worker_affinity: dict[str, Any]
    """The worker's affinity for components.nodeFeatureDiscovery GpuNodes: the nodes where a
    GPU can be (a GPU machine type of the registry, NFD's NVIDIA PCI label, the label
    gpu.kyma-project.io/gpu=true, or no machine type label)."""


class RuleContext(_Section):
    """What every rule sees, as dotted keys: cluster.gpuNodes, driver.mode, ..."""

    cluster: ClusterContext
    driver: DriverContext
    installer: InstallerContext
    nvidia: NvidiaContext
    source: SourceContext
    components: ComponentsSpec
    """spec.components as they are (switches, the MIG strategy, the sandbox mode, the vGPU
    Manager image)."""
    upgrade_policy: UpgradePolicyContext
    sharing: SharingContext
    stack: StackContext
    mig: MigContext
    sandbox: SandboxContext
    vgpu: VgpuContext
    nfd: NfdContext

    @classmethod
    def checked(cls, flat: Mapping[str, Any]) -> dict[str, Any]:
        """The flat context, checked against the model (a key the model does not know, a
        missing key or a wrong type raise ValidationError)."""
        return cls.model_validate(_nest(flat)).flat()

    def flat(self) -> dict[str, Any]:
        return dict(_flatten(self.model_dump(by_alias=True, mode="json")))


class PoolContext(_Section):
    """Inside forEach: pools, also these keys, one set per GPU OS pool that needs a driver."""

    name: str
    """The NVIDIADriver's name: "gpu-" and the OS family."""
    os: str
    """The pool's OS family."""
    os_release_id: str
    """The OS's /etc/os-release ID (the nodeSelector's system-os_release.ID)."""
    mode: Literal["Precompiled", "Upstream"]
    """The pool's driver mode."""
    use_precompiled: bool
    """True for precompiled driver images."""
    repository: str
    """The driver image repository (mirrored when source.imageRegistry is set)."""
    image_pull_policy: Literal["Always", "IfNotPresent"]
    """Always for the installer's images (it re-publishes branch tags for new kernels)."""
    version: str
    """The driver branch (precompiled) or full version."""

    @classmethod
    def checked(cls, flat: Mapping[str, Any]) -> dict[str, Any]:
        """The flat pool context (keys pool.*), checked against the model."""
        return cls.model_validate(_nest(flat)["pool"]).flat()

    def flat(self) -> dict[str, Any]:
        return dict(_flatten({"pool": self.model_dump(by_alias=True, mode="json")}))


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        section, _, name = key.partition(".")
        nested.setdefault(section, {})[name] = value
    return nested


def _flatten(nested: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for section, values in nested.items():
        for name, value in values.items():
            yield f"{section}.{name}", value
