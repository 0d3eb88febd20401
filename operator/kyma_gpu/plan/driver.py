"""Step one of the plan: driver pools, the cluster's driver mode, installer and versions. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kyma_gpu.api.models import ClusterDriverMode, DriverMode, GpuSpec
from kyma_gpu.facts.cluster import ClusterFacts
from kyma_gpu.facts.node import NodeFacts, OsFamily
from kyma_gpu.rules.catalog import Catalog, ChartFacts
from kyma_gpu.rules.installer import InstallerRelease, branch_of

# With no GPU nodes the stack is prepared for Garden Linux.
ASSUMED_OS = OsFamily.GARDENLINUX


@dataclass(frozen=True, slots=True)
class DriverPool:
    """GPU nodes that share an OS family and a driver mode."""

    os: OsFamily
    mode: DriverMode
    nodes: tuple[NodeFacts, ...]


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
    chart_version: str
    chart: ChartFacts | None

    def wants(self, mode: DriverMode) -> bool:
        """A pool has this mode, or (no pools) the stack is prepared for it."""
        return any(p.mode is mode for p in self.pools) or (
            not self.pools and self.fallback_mode is mode
        )

    def node_mode(self, node: NodeFacts) -> DriverMode:
        return node_mode(node, self.spec.driver.mode, self.catalog.defaults.auto_driver_mode)


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


def _full_version(version: str | None, installer: InstallerRelease | None) -> str | None:
    """spec.driver.version as a full version: as given, or a branch mapped by the installer."""
    if not version:
        return None
    if "." in version:
        return version
    return installer.full_version(version) if installer is not None else None


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
    return Resolved(
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
        full_version=_full_version(version, installer),
        chart_version=chart_version,
        chart=catalog.chart(chart_version),
    )
