"""The rule context: the keys values-rules/ sees, checked against rules/context.py. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kyma_gpu.api.models import DriverMode
from kyma_gpu.facts.node import OsFamily
from kyma_gpu.plan.driver import ASSUMED_OS, DriverPool, Resolved
from kyma_gpu.plan.mirror import replace_registry
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


def _cluster_context(r: Resolved) -> dict[str, Any]:
    spec = r.spec
    os_families = [str(p.os) for p in r.pools] or [str(ASSUMED_OS)]
    return {
        "cluster.gpuNodes": len(r.facts.gpu_nodes),
        "cluster.osFamilies": os_families,
        "driver.mode": str(r.mode),
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
            f"components.{name}": enabled
            for name, enabled in spec.components.model_dump(by_alias=True).items()
        },
    }


def _pool_context(r: Resolved, pool: DriverPool) -> dict[str, Any]:
    defaults = r.catalog.defaults
    precompiled = pool.mode is DriverMode.PRECOMPILED
    if precompiled:
        version = r.branch
    else:
        version = r.full_version or (r.chart.default_driver_version if r.chart else "")
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
