"""Is there a driver image for each GPU node, before any pull fails? Pure.

Garden Linux nodes against the adopted installer release's build matrix, Upstream nodes against
NVIDIA's driver container catalog. A node without an image gets no driver: the finding is about
its worker pool (plan/pools.py), with the advice that fits the case.
"""

from __future__ import annotations

from kyma_gpu.api.conditions import PreflightReason as R
from kyma_gpu.api.models import DriverMode
from kyma_gpu.facts.node import NodeFacts, OsFamily
from kyma_gpu.plan.driver import Resolved
from kyma_gpu.plan.findings import Finding, Severity
from kyma_gpu.plan.pools import node_findings
from kyma_gpu.rules.installer import ImageGap, ImageProblem, InstallerRelease
from kyma_gpu.rules.nvidia import ImageAvailability

UPSTREAM_ADVICE = (
    "set spec.driver.version to a driver NVIDIA publishes for it, or give the pool an OS that "
    "NVIDIA publishes this driver for"
)
PIN_IMAGE = (
    "pin the pool's machine image to {version} in the Shoot (spec.provider.workers[].machine."
    "image.version, with spec.maintenance.autoUpdate.machineImageVersion: false)"
)


def _others(r: Resolved, node: NodeFacts, branch: str) -> list[str]:
    """Other adopted installer releases that build an image for the node."""
    found = []
    for tag in r.catalog.installer_releases():
        other = r.catalog.installer(tag)
        if tag != r.release_tag and other and not other.problem(node.os_version, branch, node.arch):
            found.append(tag)
    return found


def _newer_advice(installer: InstallerRelease, node: NodeFacts) -> str:
    return (
        "it is newer than any the release builds: wait for an installer release that builds it "
        "(and a module version that adopts it), or " + PIN_IMAGE.format(version=installer.newest_os)
    )


def _advice(r: Resolved, installer: InstallerRelease, node: NodeFacts, found: ImageProblem) -> str:
    others = _others(r, node, r.branch)
    if others and found.gap is not ImageGap.ARCH:
        return f"installer release {', '.join(others)} builds it: set spec.driver.installerRelease"
    if found.gap is ImageGap.OS_NEWER:
        return _newer_advice(installer, node)
    if found.gap in (ImageGap.OS_OLDER, ImageGap.OS_SKIPPED):
        target = installer.next_built(node.os_version or "") or installer.newest_os
        return f"update the pool's machine image to a version the release builds ({target})"
    if found.gap is ImageGap.EXCLUDED:
        return "set spec.driver.version to another branch, or " + PIN_IMAGE.format(
            version="a Garden Linux version below the exclusion"
        )
    if found.gap is ImageGap.ARCH:
        return (
            "the installer publishes amd64 images only: give the pool amd64 machines, or build "
            "arm64 images (the installer's TARGET_ARCH=arm64) into a mirror (spec.source."
            "imageRegistry)"
        )
    return "check the node's osImage"


def garden_linux_images(r: Resolved) -> list[Finding]:
    """Garden Linux nodes for which the installer release builds no precompiled image."""
    installer = r.installer
    if installer is None or _branch_unbuilt(r, installer):
        return []
    problems: dict[str, str] = {}
    unsure: dict[str, str] = {}
    answers: dict[tuple[str | None, str], ImageProblem | None] = {}
    for node in _nodes(r, DriverMode.PRECOMPILED, OsFamily.GARDENLINUX):
        key = (node.os_version, node.arch)  # a pool of 500 nodes has a handful of these
        if key not in answers:
            answers[key] = installer.image_problem(node.os_version, r.branch, node.arch)
        found = answers[key]
        if found is not None:
            target = unsure if found.gap is ImageGap.OS_UNKNOWN else problems
            target[node.name] = f"{found.why}; {_advice(r, installer, node, found)}"
    pools = r.worker_pools
    return [
        *node_findings(pools, R.NO_DRIVER_IMAGE, problems),
        *node_findings(pools, R.NO_DRIVER_IMAGE, unsure, blocking=False),
    ]


def _branch_unbuilt(r: Resolved, installer: InstallerRelease) -> bool:
    return installer.full_version(r.branch) is None


def branch_not_built(r: Resolved) -> list[Finding]:
    """The branch is the whole cluster's: an installer release without it is the spec's error,
    not a pool's."""
    installer = r.installer
    nodes = _nodes(r, DriverMode.PRECOMPILED, OsFamily.GARDENLINUX)
    if installer is None or not nodes or not _branch_unbuilt(r, installer):
        return []
    message = (
        f"driver branch {r.branch}: installer release {installer.tag} builds no driver of it "
        f"(builds: {', '.join(installer.drivers)}), so no Garden Linux node gets a driver; set "
        "spec.driver.version to one of these branches"
    )
    return [Finding(Severity.ERROR, R.NO_DRIVER_IMAGE, message)]


def upstream_images(r: Resolved) -> list[Finding]:
    """Upstream nodes for which NVIDIA publishes no driver container of the pool's version."""
    nvidia = r.catalog.nvidia_drivers
    missing: dict[str, str] = {}
    unsure: dict[str, str] = {}
    for pool in r.pools:
        if pool.mode is not DriverMode.UPSTREAM or pool.version is None:
            continue
        for node in pool.nodes:
            tag = nvidia.os_tag(node.os, node.os_version)
            if tag is None:  # an OS the catalog does not cover: it cannot tell
                continue
            answer = nvidia.answer(pool.version, tag, node.arch)
            if answer.availability is ImageAvailability.MISSING:
                missing[node.name] = f"{answer.why}; {UPSTREAM_ADVICE}"
            elif answer.availability is ImageAvailability.UNSURE:
                unsure[node.name] = answer.why
    pools = r.worker_pools
    return [
        *node_findings(pools, R.NO_DRIVER_IMAGE, missing),
        *node_findings(pools, R.NO_DRIVER_IMAGE, unsure, blocking=False),
    ]


def _nodes(r: Resolved, mode: DriverMode, os: OsFamily) -> list[NodeFacts]:
    return [n for p in r.pools if p.mode is mode and p.os is os for n in p.nodes]
