"""Preflight of the typed operations: what the chart, the OS, the driver mode or the GPUs
cannot do with spec.driver.upgradePolicy, spec.sharing, the extras and spec.stack. Pure.

Each check returns findings (plan/preflight.py's Finding); errors stop the plan, so nothing is
written that would fail on the nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from kyma_gpu.api.conditions import PreflightReason as R
from kyma_gpu.api.models import ClusterDriverMode, ComponentsSpec, DriverMode
from kyma_gpu.api.operations import GpuStack, SandboxMode, SharingMode, UpgradePolicySpec
from kyma_gpu.facts.node import NodeFacts
from kyma_gpu.plan.driver import Resolved
from kyma_gpu.plan.preflight import Check, Finding, Severity

MIG_CAPABLE = ("A100", "A30", "H100", "H200", "H20", "H800", "B200", "B300", "GB200", "GB300")
"""GPU models (registry names start with one of these) that have MIG."""
CC_CAPABLE = ("H100", "H200", "H20", "H800", "B200", "B300", "GB200", "GB300")
"""GPU models with Confidential Computing (Hopper and Blackwell)."""
CLOUD_VM_PROVIDERS = frozenset({"aws", "gcp", "azure", "alicloud"})
"""Providers whose GPU machines are VMs (bare-metal types carry "metal" in their name)."""
DRA_ONLY_COMPONENTS = ("dcgm_exporter", "service_monitor", "gpu_feature_discovery", "mig_strategy")
"""spec.components that are not switches of ClusterPolicy operands on the DRA stack."""


def _alias(name: str) -> str:
    field = ComponentsSpec.model_fields[name]
    return f"spec.components.{field.alias or name}"


def _models(nodes: Sequence[NodeFacts]) -> list[str] | None:
    """The GPU models of the nodes, None when a node's model is unknown (no judgement then)."""
    models = [n.gpu_model for n in nodes]
    return None if not models or any(m is None for m in models) else [str(m) for m in models]


def _has(models: Sequence[str], families: tuple[str, ...]) -> bool:
    return any(m.upper().startswith(families) for m in models)


# -- driver upgrades -----------------------------------------------------------------------


def auto_upgrade_off(r: Resolved) -> list[Finding]:
    if r.spec.driver.upgrade_policy.auto_upgrade or r.mode is ClusterDriverMode.PREINSTALLED:
        return []
    message = (
        "spec.driver.upgradePolicy.autoUpgrade is off: a changed driver reaches a node only "
        "when its driver pod is deleted by hand (kubectl delete pod -n gpu-operator -l "
        "app.kubernetes.io/component=nvidia-driver --field-selector spec.nodeName=NODE), and GPU "
        "pods on it are not moved away first"
    )
    return [Finding(Severity.INFO, R.AUTO_UPGRADE_OFF, message)]


def upgrade_policy_ignored(r: Resolved) -> list[Finding]:
    if r.spec.driver.upgrade_policy == UpgradePolicySpec():
        return []
    if r.mode is ClusterDriverMode.PREINSTALLED:
        message = (
            "spec.driver.upgradePolicy has no effect: the nodes' own driver is used, so the "
            "NVIDIA operator never replaces one"
        )
        return [Finding(Severity.INFO, R.UPGRADE_POLICY_IGNORED, message)]
    if r.spec.components.sandbox_workloads is not SandboxMode.OFF:
        message = (
            "spec.driver.upgradePolicy has no effect with spec.components.sandboxWorkloads: the "
            "NVIDIA operator runs no driver upgrades then (delete driver pods node by node)"
        )
        return [Finding(Severity.WARNING, R.UPGRADE_POLICY_IGNORED, message)]
    return []


# -- GPU sharing ---------------------------------------------------------------------------


def sharing_needs_device_plugin(r: Resolved) -> list[Finding]:
    if r.spec.stack is not GpuStack.DRA or not r.spec.sharing.configured:
        return []
    message = (
        "spec.sharing configures the NVIDIA device plugin, which the DRA stack does not run; "
        "with DRA, pods share GPUs through their ResourceClaims (docs/gpu-sharing.md)"
    )
    return [Finding(Severity.ERROR, R.SHARING_NEEDS_DEVICE_PLUGIN, message)]


def mps_with_mig(r: Resolved) -> list[Finding]:
    """The MIG manager may give nodes a MIG layout later: they must not pick MPS then. Nodes in
    MIG mode now are judged one by one (plan/node_checks.py, MpsOnMig)."""
    sharing = r.spec.sharing
    modes = {sharing.mode, *(p.mode for p in sharing.profiles)}
    if SharingMode.MPS not in modes or not r.spec.components.mig_manager:
        return []
    if any(n.mig_mode for n in r.facts.gpu_nodes):
        return []
    message = (
        "spec.sharing uses MPS and spec.components.migManager is on: the device plugin and GPU "
        "feature discovery refuse MPS on GPUs in MIG mode, so a worker pool whose nodes get a MIG "
        "layout (nvidia.com/mig.config) must pick a TimeSlicing or None profile"
    )
    return [Finding(Severity.WARNING, R.MPS_WITH_MIG, message)]


def no_mig_capable_gpus(r: Resolved) -> list[Finding]:
    models = _models(r.facts.gpu_nodes)
    if not r.spec.components.mig_manager or models is None or _has(models, MIG_CAPABLE):
        return []
    message = (
        f"spec.components.migManager is on, but no GPU node has a GPU with MIG (models: "
        f"{', '.join(sorted(set(models)))}; MIG needs A100, A30, H100, H200 or newer)"
    )
    return [Finding(Severity.WARNING, R.NO_MIG_CAPABLE_GPUS, message)]


# -- the extras ----------------------------------------------------------------------------


def _kernel_module_extras(components: ComponentsSpec) -> list[str]:
    names = []
    if components.gpu_direct_storage:
        names.append("gpuDirectStorage (nvidia-fs)")
    if components.gdrcopy:
        names.append("gdrcopy (gdrdrv)")
    return names


def needs_driver_container(r: Resolved) -> list[Finding]:
    """GDS and GDRCopy build a kernel module next to the driver container, on the node."""
    extras = _kernel_module_extras(r.spec.components)
    if not extras:
        return []
    what = " and ".join(f"spec.components.{e}" for e in extras)
    findings = []
    if r.wants(DriverMode.PRECOMPILED):
        on = "Garden Linux nodes" if r.uses_installer else "Nodes with precompiled drivers"
        message = (
            f"{what}: these build a kernel module on the node, next to NVIDIA's driver container. "
            f"{on} have no compilers and the gardenlinux-nvidia-installer publishes driver "
            "images only, no nvidia-fs or gdrdrv ones; use GPU nodes with the Upstream driver "
            "(e.g. Ubuntu)"
        )
        findings.append(Finding(Severity.ERROR, R.NEEDS_DRIVER_CONTAINER, message))
    if r.wants(DriverMode.PREINSTALLED):
        message = (
            f"{what}: the NVIDIA operator loads these next to its own driver container; on nodes "
            "with a preinstalled driver, install them on the host image instead"
        )
        findings.append(Finding(Severity.ERROR, R.NEEDS_DRIVER_CONTAINER, message))
    return findings


def vgpu_manager(r: Resolved) -> list[Finding]:
    components = r.spec.components
    if not components.vgpu_manager:
        return []
    findings = []
    if components.sandbox_workloads is SandboxMode.OFF:
        message = (
            "spec.components.vgpuManager serves vGPUs to virtual machines: it needs "
            "spec.components.sandboxWorkloads (KubeVirt or Kata) and nodes labelled "
            "nvidia.com/gpu.workload.config=vm-vgpu"
        )
        findings.append(Finding(Severity.ERROR, R.VGPU_NEEDS_SANDBOX, message))
    if r.uses_installer:
        message = (
            "spec.components.vgpuManager on Garden Linux: the gardenlinux-nvidia-installer "
            "publishes no vGPU Manager images; spec.components.vgpuManagerImage must be built "
            "for the nodes' Garden Linux kernel"
        )
        findings.append(Finding(Severity.WARNING, R.NO_VGPU_IMAGES_FOR_GARDEN_LINUX, message))
    return findings


def confidential_computing(r: Resolved) -> list[Finding]:
    components = r.spec.components
    if not components.confidential_computing:
        return []
    findings = []
    if components.sandbox_workloads is not SandboxMode.KATA:
        message = (
            "spec.components.confidentialComputing runs GPUs for confidential VMs: it needs "
            "spec.components.sandboxWorkloads Kata"
        )
        findings.append(Finding(Severity.ERROR, R.CONFIDENTIAL_COMPUTING_NEEDS_KATA, message))
    models = _models(r.facts.gpu_nodes)
    if models is not None and not _has(models, CC_CAPABLE):
        message = (
            f"spec.components.confidentialComputing: no GPU node has a GPU with Confidential "
            f"Computing (models: {', '.join(sorted(set(models)))}; it needs Hopper (H100, H200) "
            "or Blackwell (B200) GPUs and CPUs with AMD SEV-SNP or Intel TDX)"
        )
        findings.append(Finding(Severity.WARNING, R.NO_CONFIDENTIAL_COMPUTING_GPUS, message))
    return findings


def sandbox_needs_bare_metal(r: Resolved) -> list[Finding]:
    components = r.spec.components
    if components.sandbox_workloads is SandboxMode.OFF or not r.facts.gpu_nodes:
        return []
    vms = [
        n.name
        for n in r.facts.gpu_nodes
        if n.provider in CLOUD_VM_PROVIDERS and "metal" not in (n.machine_type or "")
    ]
    if len(vms) < len(r.facts.gpu_nodes):
        return []
    message = (
        "spec.components.sandboxWorkloads passes GPUs to VMs through VFIO, which needs bare-metal "
        f"nodes with an IOMMU; every GPU node is a cloud VM ({', '.join(vms[:5])}"
        f"{' and more' if len(vms) > 5 else ''}), so no node can serve them"
    )
    return [Finding(Severity.WARNING, R.SANDBOX_NEEDS_BARE_METAL, message)]


# -- the stack -----------------------------------------------------------------------------


def stack_not_in_chart(r: Resolved) -> list[Finding]:
    if r.spec.stack is not GpuStack.DRA or r.chart is None or "DRA" in r.chart.stacks:
        return []
    message = (
        f"spec.stack DRA needs the chart's GPUCluster, which chart {r.chart_version} does not "
        "have (it came with v26.7.0); set spec.operatorVersion to v26.7.0 or newer"
    )
    return [Finding(Severity.ERROR, R.STACK_NOT_IN_CHART, message)]


def not_on_dra_stack(r: Resolved) -> list[Finding]:
    if r.spec.stack is not GpuStack.DRA:
        return []
    components = r.spec.components
    defaults = ComponentsSpec()
    switched = [
        _alias(name)
        for name in ComponentsSpec.model_fields
        if name not in DRA_ONLY_COMPONENTS
        and name != "vgpu_manager_image"
        and getattr(components, name) != getattr(defaults, name)
    ]
    findings = []
    if switched:
        message = (
            f"{', '.join(switched)}: these are ClusterPolicy operands, which the DRA stack does "
            "not deploy (the GPUCluster runs the DRA driver, DCGM and the DCGM exporter)"
        )
        findings.append(Finding(Severity.ERROR, R.NOT_ON_DRA_STACK, message))
    message = (
        "spec.stack DRA: the chart's GPUCluster stack is experimental; pods claim GPUs with "
        "ResourceClaims of the DeviceClass gpu.nvidia.com instead of nvidia.com/gpu, and node "
        "runtimes need CDI (containerd 2.0 and newer enable it by default)"
    )
    findings.append(Finding(Severity.INFO, R.DRA_EXPERIMENTAL, message))
    return findings


FEATURE_CHECKS: tuple[Check, ...] = (
    auto_upgrade_off,
    upgrade_policy_ignored,
    sharing_needs_device_plugin,
    mps_with_mig,
    no_mig_capable_gpus,
    needs_driver_container,
    vgpu_manager,
    confidential_computing,
    sandbox_needs_bare_metal,
    stack_not_in_chart,
    not_on_dra_stack,
)
"""In this order after the driver checks (plan/preflight.py CHECKS)."""
