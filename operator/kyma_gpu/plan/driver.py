"""Step one of the plan: driver pools, the cluster's driver mode, installer and versions, and
where each pool's driver version comes from. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from kyma_gpu.api.models import ClusterDriverMode, DriverMode, GpuSpec
from kyma_gpu.facts.cluster import ClusterFacts
from kyma_gpu.facts.node import NodeFacts, OsFamily
from kyma_gpu.plan.pools import WorkerPool, worker_pools
from kyma_gpu.rules.catalog import Catalog, ChartFacts
from kyma_gpu.rules.installer import InstallerRelease, branch_of
from kyma_gpu.rules.nvidia import NvidiaDrivers

# With no GPU nodes the stack is prepared for Garden Linux.
ASSUMED_OS = OsFamily.GARDENLINUX


class VersionSource(StrEnum):
    """Where a pool's driver version comes from (the plan prints it per pool)."""

    SPEC = "Spec"
    """spec.driver.version, a full version, as given."""
    SPEC_BRANCH = "SpecBranch"
    """The branch spec.driver.version names (precompiled images are built per branch)."""
    NVIDIA_CATALOG = "NvidiaCatalog"
    """The newest driver of spec.driver.version's branch that NVIDIA publishes as a driver
    container for the pool's OS (values-rules/nvidia-drivers.yaml)."""
    INSTALLER_DEFAULT = "InstallerDefault"
    """The installer release's default branch."""
    CHART_DEFAULT = "ChartDefault"
    """The chart's default driver (values-rules/charts/<version>.yaml)."""


@dataclass(frozen=True, slots=True)
class DriverPool:
    """GPU nodes that share an OS family and a driver mode, and the driver they get."""

    os: OsFamily
    mode: DriverMode
    nodes: tuple[NodeFacts, ...]
    version: str | None = None
    """The branch (Precompiled) or full version (Upstream) the pool's driver is built from;
    None for Preinstalled, or when no version can be found (a preflight error)."""
    source: VersionSource | None = None


@dataclass(frozen=True, slots=True)
class Resolved:
    """What the later steps need: the inputs and the driver decisions taken from them."""

    spec: GpuSpec
    facts: ClusterFacts
    catalog: Catalog
    pools: tuple[DriverPool, ...]
    mode: ClusterDriverMode
    fallback_mode: DriverMode
    """The mode the stack is prepared for while there are no GPU nodes."""
    release_tag: str
    installer: InstallerRelease | None
    uses_installer: bool
    branch: str
    full_version: str | None
    """The full version NVIDIA's driver container gets from spec.driver.version: as given, or
    the branch's newest in NVIDIA's catalog. None when the spec names none (the chart's default
    then) or no published driver has the branch."""
    chart_version: str
    chart: ChartFacts | None
    worker_pools: tuple[WorkerPool, ...] = ()
    """The GPU nodes by Gardener worker pool."""

    def wants(self, mode: DriverMode) -> bool:
        """A pool has this mode, or (no pools) the stack is prepared for it."""
        return any(p.mode is mode for p in self.pools) or (
            not self.pools and self.fallback_mode is mode
        )

    def node_mode(self, node: NodeFacts) -> DriverMode:
        return node_mode(node, self.spec.driver.mode, self.catalog.defaults.auto_driver_mode)

    @property
    def unbuilt_version(self) -> str | None:
        """spec.driver.version when Garden Linux needs it and it is a full version that the
        installer release does not build (a preflight error). The release builds one version
        of each branch, and its images are per branch: another full version would silently be
        that one. None too when the release builds no driver of the branch (branch_not_built
        says so)."""
        version, installer = self.spec.driver.version, self.installer
        if not (self.uses_installer and installer and version and "." in version):
            return None
        if installer.full_version(version) or not installer.full_version(self.branch):
            return None
        return version


def node_mode(node: NodeFacts, spec_mode: DriverMode, auto: Mapping[str, str]) -> DriverMode:
    if spec_mode is not DriverMode.AUTO:
        return spec_mode
    if node.preinstalled_driver:
        return DriverMode.PREINSTALLED
    return DriverMode(auto.get(str(node.os), auto.get("unknown", "Upstream")))


def driver_pools(
    facts: ClusterFacts, spec_mode: DriverMode, auto: Mapping[str, str]
) -> tuple[DriverPool, ...]:
    """Group GPU nodes by (OS family, driver mode), in a stable order."""
    groups: dict[tuple[OsFamily, DriverMode], list[NodeFacts]] = {}
    for node in facts.gpu_nodes:
        groups.setdefault((node.os, node_mode(node, spec_mode, auto)), []).append(node)
    return tuple(
        DriverPool(os=os, mode=mode, nodes=tuple(nodes))
        for (os, mode), nodes in sorted(groups.items())
    )


def cluster_mode(pools: tuple[DriverPool, ...], fallback: DriverMode) -> ClusterDriverMode:
    if not pools:
        return ClusterDriverMode(fallback)
    if len(pools) == 1 or all(p.mode is DriverMode.PREINSTALLED for p in pools):
        return ClusterDriverMode(pools[0].mode)
    return ClusterDriverMode.PER_POOL


def upstream_images(pools: tuple[DriverPool, ...], nvidia: NvidiaDrivers) -> set[tuple[str, str]]:
    """(OS tag, arch) of every node NVIDIA's driver container serves."""
    return {
        (tag, n.arch)
        for p in pools
        if p.mode is DriverMode.UPSTREAM
        for n in p.nodes
        if (tag := nvidia.os_tag(n.os, n.os_version)) is not None
    }


def upstream_version(
    version: str | None, pools: tuple[DriverPool, ...], catalog: Catalog
) -> str | None:
    """spec.driver.version for NVIDIA's driver container: a full version as given; a branch as
    the newest driver of it that NVIDIA publishes for all the Upstream nodes' OSes."""
    if not version or "." in version:
        return version
    found = catalog.nvidia_drivers.newest(version, upstream_images(pools, catalog.nvidia_drivers))
    return found.version if found is not None else None


def _versioned(pool: DriverPool, r: Resolved) -> DriverPool:
    """The pool with the driver version it gets and where that comes from."""
    spec_version = r.spec.driver.version
    if pool.mode is DriverMode.PRECOMPILED:
        # Preflight errors: an unknown installer release, a full version it does not build.
        if not r.branch or (pool.os is OsFamily.GARDENLINUX and r.unbuilt_version):
            return pool
        source = VersionSource.SPEC_BRANCH if spec_version else VersionSource.INSTALLER_DEFAULT
        return replace(pool, version=r.branch, source=source)
    if pool.mode is not DriverMode.UPSTREAM:
        return pool
    if spec_version:
        source = VersionSource.SPEC if "." in spec_version else VersionSource.NVIDIA_CATALOG
        return replace(pool, version=r.full_version, source=source if r.full_version else None)
    if r.chart is None:
        return pool
    return replace(pool, version=r.chart.default_driver_version, source=VersionSource.CHART_DEFAULT)


def resolve(spec: GpuSpec, facts: ClusterFacts, catalog: Catalog) -> Resolved:
    """Resolve the driver modes per pool and for the cluster, the installer and versions."""
    defaults = catalog.defaults
    auto = defaults.auto_driver_mode
    spec_mode = spec.driver.mode
    fallback = spec_mode if spec_mode is not DriverMode.AUTO else DriverMode(auto[str(ASSUMED_OS)])
    pools = driver_pools(facts, spec_mode, auto)
    uses_installer = any(
        p.mode is DriverMode.PRECOMPILED and p.os is OsFamily.GARDENLINUX for p in pools
    ) or (not pools and fallback is DriverMode.PRECOMPILED)
    release_tag = spec.driver.installer_release or defaults.installer_release
    installer = catalog.installer(release_tag)
    version = spec.driver.version
    default_branch = installer.default_branch if installer else ""
    chart_version = spec.operator_version or defaults.chart_version
    resolved = Resolved(
        spec=spec,
        facts=facts,
        catalog=catalog,
        pools=pools,
        mode=cluster_mode(pools, fallback),
        fallback_mode=fallback,
        release_tag=release_tag,
        installer=installer,
        uses_installer=uses_installer,
        branch=branch_of(version) if version else default_branch,
        full_version=upstream_version(version, pools, catalog),
        chart_version=chart_version,
        chart=catalog.chart(chart_version),
        worker_pools=worker_pools(facts.gpu_nodes),
    )
    return replace(resolved, pools=tuple(_versioned(p, resolved) for p in pools))
