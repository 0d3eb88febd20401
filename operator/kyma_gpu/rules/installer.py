"""The gardenlinux-nvidia-installer build matrix of one release (its versions.yaml).

Answers, before any image pull fails: does this release publish a driver image for
this Garden Linux version, driver branch and CPU architecture?
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_ARCH_ALIASES = {"x86_64": "amd64", "aarch64": "arm64"}


def version_key(version: str) -> tuple[int, ...]:
    """'1877.21' and '1877.21.0' compare equal; '2150.10.0' > '2150.9.0'."""
    parts = [int(p) for p in version.split(".") if p.isdecimal()]  # isdigit() takes "²"
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


@dataclass(frozen=True, slots=True)
class Exclusion:
    os_version_min: str
    driver_prefix: str
    reason: str


@dataclass(frozen=True, slots=True)
class InstallerRelease:
    """One tag's matrix: which Garden Linux versions, drivers and arches it builds."""

    tag: str
    os_versions: tuple[str, ...]
    drivers: tuple[str, ...]
    arches: tuple[str, ...]
    exclusions: tuple[Exclusion, ...]
    default_branch: str

    @classmethod
    def from_mapping(
        cls, tag: str, versions: Mapping[str, Any], values: Mapping[str, Any]
    ) -> InstallerRelease:
        where = f"installer/{tag}/versions.yaml"
        os_versions = versions.get("os_versions")
        drivers = versions.get("nvidia_drivers")
        if not isinstance(os_versions, list) or not isinstance(drivers, list):
            raise ValueError(f"{where}: needs lists os_versions and nvidia_drivers")
        for v in os_versions:
            if not isinstance(v, str):
                raise ValueError(f"{where}: os_versions entry {v!r} must be a quoted string")
        exclusions = tuple(
            Exclusion(
                os_version_min=str(e["os_version_min"]),
                driver_prefix=str(e["driver_version_prefix"]),
                reason=str(e.get("reason", "")),
            )
            for e in versions.get("excluded_combinations") or []
        )
        branch = str(((values.get("driver") or {}).get("version")) or "").split(".")[0]
        if not branch:
            raise ValueError(f"installer/{tag}/gpu-operator-values.yaml: needs driver.version")
        return cls(
            tag=tag,
            os_versions=tuple(os_versions),
            drivers=tuple(str(d) for d in drivers),
            arches=tuple(str(a) for a in versions.get("cpu_arch") or ["amd64"]),
            exclusions=exclusions,
            default_branch=branch,
        )

    def full_version(self, branch_or_version: str) -> str | None:
        """The newest driver this release builds for a branch, or the version itself if built."""
        if "." in branch_or_version:
            return branch_or_version if branch_or_version in self.drivers else None
        candidates = [d for d in self.drivers if d.split(".")[0] == branch_or_version]
        return max(candidates, key=version_key) if candidates else None

    def problem(self, os_version: str | None, branch: str, arch: str) -> str | None:
        """Why there is no image for this node, or None when there is one."""
        arch = _ARCH_ALIASES.get(arch, arch)
        if arch not in self.arches:
            return (
                f"installer release {self.tag} builds no images for architecture {arch} "
                f"(builds: {', '.join(self.arches)})"
            )
        if os_version is None:
            return (
                f"the Garden Linux version is unknown; installer release {self.tag} "
                "cannot be checked"
            )
        wanted = version_key(os_version)
        if wanted not in {version_key(v) for v in self.os_versions}:
            newest = max(self.os_versions, key=version_key)
            oldest = min(self.os_versions, key=version_key)
            return (
                f"Garden Linux {os_version} is not in installer release {self.tag}'s build matrix "
                f"({len(self.os_versions)} versions from {oldest} to {newest}); "
                "pick another spec.driver.installerRelease or update the node image"
            )
        full = self.full_version(branch)
        if full is None:
            return (
                f"installer release {self.tag} builds no driver of branch {branch} "
                f"(builds: {', '.join(self.drivers)})"
            )
        for ex in self.exclusions:
            if version_key(os_version) >= version_key(ex.os_version_min) and full.startswith(
                ex.driver_prefix
            ):
                return (
                    f"installer release {self.tag} excludes driver {full} on Garden Linux "
                    f"{os_version} (>= {ex.os_version_min}): {ex.reason}"
                )
        return None
