"""The rule context: the keys values-rules/ sees, checked against rules/context.py. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kyma_gpu.api.models import ClusterDriverMode, ComponentsSpec, DriverMode
from kyma_gpu.api.operations import (
    DEFAULT_PROFILE,
    GpuStack,
    SandboxMode,
    SharingSpec,
    UpgradePolicySpec,
)
from kyma_gpu.facts.node import OsFamily
from kyma_gpu.plan.driver import ASSUMED_OS, DriverPool, Resolved
from kyma_gpu.plan.mirror import replace_registry
from kyma_gpu.plan.nfd import worker_affinity
from kyma_gpu.plan.sharing import config_map_name, device_plugin_configs
from kyma_gpu.rules.context import PoolContext, RuleContext


@dataclass(frozen=True, slots=True)
class Contexts:
    cluster: dict[str, Any]
    pools: list[dict[str, Any]]


def installer_repository(r: Resolved) -> str:
    return f"{r.catalog.defaults.installer_repository}/{r.release_tag}"


def rule_context(r: Resolved) -> Contexts:
    """The cluster context and one context per pool that needs a driver. An undocumented key
    or a wrong type fails (values-rules/context.md)."""
    cluster = RuleContext.checked(_cluster_context(r))
    pools = [
        PoolContext.checked(_pool_context(r, p))
        for p in r.pools
        if p.mode is not DriverMode.PREINSTALLED
    ]
    return Contexts(cluster, pools)


def nvidia_driver_objects(r: Resolved) -> bool:
    """Drivers come from per-pool NVIDIADriver objects: a mixed fleet, or the DRA stack (which
    has no ClusterPolicy to carry a driver) unless the hosts bring their own."""
    if r.mode is ClusterDriverMode.PER_POOL:
        return True
    return r.spec.stack is GpuStack.DRA and r.mode is not ClusterDriverMode.PREINSTALLED


def _cluster_context(r: Resolved) -> dict[str, Any]:
    spec = r.spec
    os_families = [str(p.os) for p in r.pools] or [str(ASSUMED_OS)]
    return {
        "cluster.gpuNodes": len(r.facts.gpu_nodes),
        "cluster.osFamilies": os_families,
        "driver.mode": str(r.mode),
        "driver.nvidiaDriverObjects": nvidia_driver_objects(r),
        "driver.os": os_families[0] if len(set(os_families)) == 1 else "mixed",
        "driver.branch": r.branch,
        "driver.version": r.full_version,
        "installer.release": r.release_tag,
        "installer.used": r.uses_installer,
        "installer.repository": installer_repository(r),
        "nvidia.repository": r.catalog.defaults.nvidia_driver_repository,
        "source.imageRegistry": spec.source.image_registry,
        "source.imagePullSecrets": list(spec.source.image_pull_secrets),
        "source.imagePullSecretRefs": [{"name": n} for n in spec.source.image_pull_secrets],
        **{
            f"components.{name}": value
            for name, value in spec.components.model_dump(by_alias=True, mode="json").items()
        },
        **_upgrade_policy(spec.driver.upgrade_policy),
        **_sharing(spec.sharing, spec.components),
        "stack.mode": str(spec.stack),
        "mig.strategy": str(spec.components.mig_strategy).lower(),
        **_sandbox(spec.components.sandbox_workloads),
        **_vgpu(spec.components.vgpu_manager_image),
        "nfd.namespace": r.catalog.defaults.target_namespace,
        "nfd.workerAffinity": worker_affinity(r.catalog.machine_types),
    }


def _upgrade_policy(policy: UpgradePolicySpec) -> dict[str, Any]:
    unavailable = policy.max_unavailable
    return {
        "upgradePolicy.autoUpgrade": policy.auto_upgrade,
        "upgradePolicy.maxParallelUpgrades": policy.max_parallel_upgrades,
        # An IntOrString: the NVIDIA operator refuses a number written as a string.
        "upgradePolicy.maxUnavailable": unavailable if "%" in unavailable else int(unavailable),
        "upgradePolicy.waitForCompletion": policy.wait_for_completion.model_dump(by_alias=True),
        "upgradePolicy.podDeletion": policy.gpu_pod_deletion.model_dump(by_alias=True),
        "upgradePolicy.drain": policy.drain.model_dump(by_alias=True),
    }


def _sharing(sharing: SharingSpec, components: ComponentsSpec) -> dict[str, Any]:
    configs = device_plugin_configs(sharing, components.mig_strategy)
    return {
        "sharing.configured": sharing.configured,
        "sharing.mode": str(sharing.mode),
        "sharing.configMap": config_map_name(configs),
        "sharing.default": DEFAULT_PROFILE,
        "sharing.configs": configs,
    }


def _sandbox(mode: SandboxMode) -> dict[str, Any]:
    return {
        "sandbox.enabled": mode is not SandboxMode.OFF,
        "sandbox.mode": "kata" if mode is SandboxMode.KATA else "kubevirt",
    }


def _vgpu(image: str | None) -> dict[str, Any]:
    """registry/path/name:tag -> repository registry/path, image name, version tag."""
    if image is None:
        return {"vgpu.repository": None, "vgpu.image": None, "vgpu.version": None}
    path, _, tag = image.rpartition(":")
    repository, _, name = path.rpartition("/")
    return {"vgpu.repository": repository, "vgpu.image": name, "vgpu.version": tag}


def _pool_context(r: Resolved, pool: DriverPool) -> dict[str, Any]:
    defaults = r.catalog.defaults
    precompiled = pool.mode is DriverMode.PRECOMPILED
    version = pool.version or ""
    garden_linux = precompiled and pool.os is OsFamily.GARDENLINUX
    repository = installer_repository(r) if garden_linux else defaults.nvidia_driver_repository
    mirror = r.spec.source.image_registry
    return {
        "pool.name": f"gpu-{pool.os}",
        "pool.os": str(pool.os),
        "pool.osReleaseId": defaults.os_release_id.get(str(pool.os), str(pool.os)),
        "pool.mode": str(pool.mode),
        "pool.usePrecompiled": precompiled,
        # The NVIDIADriver objects live in extraObjects, which the chart-image mirror does not
        # know: point them at the mirror here.
        "pool.repository": replace_registry(repository, mirror) if mirror else repository,
        # The installer re-publishes its branch tags for new kernels (docs/operations.md).
        "pool.imagePullPolicy": "Always" if garden_linux else "IfNotPresent",
        "pool.version": version,
    }
