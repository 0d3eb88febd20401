"""Checks per GPU node of what NVIDIA's components refuse on it, grouped per worker pool
(plan/pools.py): hardware the installed driver cannot serve, and sharing configurations the
device plugin, GPU feature discovery or the MPS control daemon reject. Pure.

Each is blocking: the nodes get no working GPU. Sources (NVIDIA/k8s-device-plugin, main):
internal/lm/nvml.go isMPSCapable ("MPS sharing is not supported for mig devices": GFD),
internal/plugin/mps.go ("sharing using MPS is not supported for MIG devices": the plugin),
cmd/nvidia-device-plugin/main.go validateFlags ("using --mig-strategy=mixed is not supported
with MPS"), cmd/mps-control-daemon/mps/device.go maxClients (48 clients from compute
capability 7.5 on, else 16), cmd/config-manager/main.go ("specified config %v does not exist").
"""

from __future__ import annotations

from kyma_gpu.api.conditions import PreflightReason as R
from kyma_gpu.api.models import DriverMode
from kyma_gpu.api.operations import (
    DEFAULT_PROFILE,
    PROFILE_LABEL,
    MigStrategy,
    SharingConfig,
    SharingMode,
    SharingSpec,
)
from kyma_gpu.facts.node import LABEL_MIG_CONFIG, LABEL_PREINSTALLED, NodeFacts
from kyma_gpu.plan.driver import DriverPool, Resolved
from kyma_gpu.plan.findings import Finding, Severity
from kyma_gpu.plan.pools import node_findings
from kyma_gpu.plan.preflight import Check
from kyma_gpu.rules.installer import branch_of

MPS_CLIENTS = 48
"""Clients one MPS server serves per GPU from compute capability 7.5 on."""
MPS_CLIENTS_BEFORE_TURING = 16
TURING = 7.5
"""The compute capability from which the MPS server serves MPS_CLIENTS."""
TIME_SLICING_OR_NONE = (
    "give this pool a TimeSlicing or None profile (one in spec.sharing.profiles, picked by the "
    f"worker pool label {PROFILE_LABEL}=<profile>)"
)

# -- hardware ------------------------------------------------------------------------------


def needs_vgpu_guest_driver(r: Resolved) -> list[Finding]:
    """VMs that see a vGPU (Azure NVadsA10 v5, AWS g6f): only NVIDIA's licensed vGPU guest
    driver serves them, and nothing the module deploys is that driver."""
    problems = {}
    for node in r.facts.gpu_nodes:
        machine = node.machine
        if machine is None or not machine.vgpu_guest_driver:
            continue
        if r.node_mode(node) is DriverMode.PREINSTALLED:
            continue
        share = f"{machine.partition} of an {machine.gpu}" if machine.partition else machine.gpu
        problems[node.name] = (
            f"machine type {node.machine_type} gives the VM a vGPU ({share}): it needs NVIDIA's "
            "licensed vGPU guest (GRID) driver, which neither the installer nor NVIDIA's driver "
            "container installs; build the pool's node image with it and label the pool "
            f"{LABEL_PREINSTALLED}=true, or pick a machine type whose GPU is passed through"
        )
    return node_findings(r.worker_pools, R.NEEDS_VGPU_GUEST_DRIVER, problems)


def _branch(pool: DriverPool) -> str | None:
    if pool.version is None or pool.mode is DriverMode.PREINSTALLED:
        return None
    return branch_of(pool.version)


def gpu_not_supported_by_driver(r: Resolved) -> list[Finding]:
    """Maxwell, Pascal and Volta GPUs (M60, V100) end with driver branch 580."""
    problems = {}
    branches = {n.name: b for p in r.pools for b in [_branch(p)] for n in p.nodes}  # O(nodes)
    for node in r.facts.gpu_nodes:
        last = node.machine.last_driver_branch if node.machine else None
        branch = branches.get(node.name)
        if last is None or branch is None or int(branch) <= int(last):
            continue
        gpu = node.machine.gpu if node.machine else "its"
        problems[node.name] = (
            f"driver branch {branch} does not support its {gpu} GPUs (machine type "
            f"{node.machine_type}; the last branch that does is {last}): set spec.driver.version "
            f'to "{last}", or give the pool newer GPUs'
        )
    return node_findings(r.worker_pools, R.GPU_NOT_SUPPORTED_BY_DRIVER, problems)


# -- sharing -------------------------------------------------------------------------------


def node_sharing(sharing: SharingSpec, node: NodeFacts) -> tuple[str, SharingConfig | None]:
    """The sharing configuration the device plugin's config manager picks for the node: its
    name, and the configuration (None: the label names a profile the spec does not have)."""
    wanted = node.sharing_profile or DEFAULT_PROFILE
    if wanted == DEFAULT_PROFILE:
        return wanted, sharing
    return wanted, next((p for p in sharing.profiles if p.name == wanted), None)


def _sharing_problem(r: Resolved, node: NodeFacts) -> tuple[R, str] | None:
    sharing = r.spec.sharing
    name, config = node_sharing(sharing, node)
    if config is None:
        known = ", ".join(p.name for p in sharing.profiles) or "none"
        return R.UNKNOWN_SHARING_PROFILE, (
            f"its label {PROFILE_LABEL}={name} names a sharing profile spec.sharing does not have "
            f"(profiles: {known}); the device plugin's config manager fails there ('specified "
            "config does not exist'): add the profile to spec.sharing.profiles, or fix the label"
        )
    if config.mode is not SharingMode.MPS:
        return None
    return _mps_problem(r, node, name, config)


def _mps_problem(
    r: Resolved, node: NodeFacts, name: str, config: SharingConfig
) -> tuple[R, str] | None:
    profile = f"sharing profile {name!r} (MPS)"
    if node.mig_mode:
        return R.MPS_ON_MIG, (
            f"MIG layout {node.mig_config!r} ({LABEL_MIG_CONFIG}) with {profile}: the NVIDIA "
            "device plugin and GPU feature discovery refuse MPS on GPUs in MIG mode ('MPS sharing "
            "is not supported for mig devices'), so these nodes advertise no GPUs; "
            + TIME_SLICING_OR_NONE
        )
    if r.spec.components.mig_strategy is MigStrategy.MIXED:
        return R.MPS_WITH_MIXED_STRATEGY, (
            f"{profile} with spec.components.migStrategy Mixed: the NVIDIA device plugin does not "
            "start ('using --mig-strategy=mixed is not supported with MPS'), MIG or not; set "
            f"migStrategy Single or None, or {TIME_SLICING_OR_NONE.removeprefix('give ')}"
        )
    cc = node.machine.compute_capability if node.machine else None
    limit = MPS_CLIENTS_BEFORE_TURING if cc and float(cc) < TURING else MPS_CLIENTS
    if config.replicas is not None and config.replicas > limit:
        return R.MPS_REPLICAS_ABOVE_LIMIT, (
            f"{profile} with {config.replicas} replicas: the MPS control daemon serves at most "
            f"{limit} clients per GPU here (compute capability {cc or 'unknown'}) and refuses to "
            f"start ('maximum allowed replicas exceeded'); set replicas to {limit} or fewer"
        )
    return None


def sharing_refused(r: Resolved) -> list[Finding]:
    """The sharing configuration each node picks, as the device plugin's components judge it."""
    if not r.spec.sharing.configured:
        return []
    problems: dict[R, dict[str, str]] = {}
    for node in r.facts.gpu_nodes:
        found = _sharing_problem(r, node)
        if found is not None:
            problems.setdefault(found[0], {})[node.name] = found[1]
    return [f for reason, nodes in problems.items()
            for f in node_findings(r.worker_pools, reason, nodes)]  # fmt: skip


def unused_mps_profiles_with_mixed(r: Resolved) -> list[Finding]:
    """An MPS profile no node picks yet would fail on the first that does."""
    sharing = r.spec.sharing
    if r.spec.components.mig_strategy is not MigStrategy.MIXED:
        return []
    used = {node_sharing(sharing, n)[0] for n in r.facts.gpu_nodes}
    idle = [p.name for p in sharing.profiles if p.mode is SharingMode.MPS and p.name not in used]
    if not idle:
        return []
    message = (
        f"sharing profiles {', '.join(idle)} (MPS) with spec.components.migStrategy Mixed: the "
        "NVIDIA device plugin does not start with them ('using --mig-strategy=mixed is not "
        "supported with MPS'); no node picks them yet, the first that does gets no GPUs"
    )
    return [Finding(Severity.WARNING, R.MPS_WITH_MIXED_STRATEGY, message)]


NODE_CHECKS: tuple[Check, ...] = (
    needs_vgpu_guest_driver,
    gpu_not_supported_by_driver,
    sharing_refused,
    unused_mps_profiles_with_mixed,
)
"""In this order after the typed operations' checks (plan/features.py FEATURE_CHECKS)."""
