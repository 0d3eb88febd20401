"""The gardenlinux-nvidia-installer build matrix of one release (its versions.yaml).

Answers, before any image pull fails: does this release publish a driver image for
this Garden Linux version, driver branch and CPU architecture?
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from packaging.version import InvalidVersion, Version

from kyma_gpu.rules.data_models import InstallerValues, InstallerVersions, parse

_ARCH_ALIASES = MappingProxyType({"x86_64": "amd64", "aarch64": "arm64"})


def parse_version(text: str) -> Version | None:
    """'1877.21' and '1877.21.0' compare equal; '2150.10.0' > '2150.9.0'. None: no version."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


_DOTTED = re.compile(r"[0-9]+(\.[0-9]+)*")


def branch_of(version: str) -> str:
    """The driver branch of a version: '590.48.01' -> '590', '590' -> '590'. A plan asks it
    for every GPU node: dotted numbers, what driver versions are, skip the version parser."""
    if _DOTTED.fullmatch(version):
        return str(int(version.split(".", 1)[0]))
    return str(Version(version).major)


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
    def from_mapping(cls, tag: str, versions: object, values: object) -> InstallerRelease:
        """From versions.yaml and gpu-operator-values.yaml (RuleError names the entry)."""
        matrix = parse(InstallerVersions, versions, f"installer/{tag}/versions.yaml")
        chart = parse(InstallerValues, values, f"installer/{tag}/gpu-operator-values.yaml")
        return cls(
            tag=tag,
            os_versions=tuple(matrix.os_versions),
            drivers=tuple(matrix.nvidia_drivers),
            arches=tuple(matrix.cpu_arch),
            exclusions=tuple(
                Exclusion(e.os_version_min, e.driver_version_prefix, e.reason)
                for e in matrix.excluded_combinations
            ),
            default_branch=branch_of(chart.driver.version),
        )

    def full_version(self, branch_or_version: str) -> str | None:
        """The newest driver this release builds for a branch, or the version itself if built."""
        if "." in branch_or_version:
            return branch_or_version if branch_or_version in self.drivers else None
        candidates = [d for d in self.drivers if branch_of(d) == branch_or_version]
        return max(candidates, key=Version) if candidates else None

    @property
    def newest_os(self) -> str:
        return max(self.os_versions, key=Version)

    @property
    def oldest_os(self) -> str:
        return min(self.os_versions, key=Version)

    def problem(self, os_version: str | None, branch: str, arch: str) -> str | None:
        """Why there is no image for this node, or None when there is one."""
        found = self.image_problem(os_version, branch, arch)
        return found.why if found is not None else None

    def image_problem(self, os_version: str | None, branch: str, arch: str) -> ImageProblem | None:
        """Why there is no image for this node (typed, for the advice), or None."""
        arch = _ARCH_ALIASES.get(arch, arch)
        if arch not in self.arches:
            built = ", ".join(self.arches)
            why = f"installer release {self.tag} builds no images for architecture {arch} "
            return ImageProblem(ImageGap.ARCH, f"{why}(builds: {built})")
        if os_version is None:
            return ImageProblem(ImageGap.OS_UNKNOWN, "the Garden Linux version is unknown; "
                                f"installer release {self.tag} cannot be checked")  # fmt: skip
        wanted = parse_version(os_version)
        if wanted is None or wanted not in {Version(v) for v in self.os_versions}:
            return self._outside(os_version, wanted)
        full = self.full_version(branch)
        if full is None:
            built = ", ".join(self.drivers)
            why = f"installer release {self.tag} builds no driver of branch {branch} "
            return ImageProblem(ImageGap.BRANCH, f"{why}(builds: {built})")
        for ex in self.exclusions:
            if wanted >= Version(ex.os_version_min) and full.startswith(ex.driver_prefix):
                return ImageProblem(ImageGap.EXCLUDED, f"installer release {self.tag} excludes "
                                    f"driver {full} on Garden Linux {os_version} (>= "
                                    f"{ex.os_version_min}): {ex.reason}")  # fmt: skip
        return None

    def _outside(self, os_version: str, wanted: Version | None) -> ImageProblem:
        newest, oldest = self.newest_os, self.oldest_os
        why = (
            f"Garden Linux {os_version} is not in installer release {self.tag}'s build matrix "
            f"({len(self.os_versions)} versions from {oldest} to {newest})"
        )
        if wanted is None or wanted > Version(newest):
            return ImageProblem(ImageGap.OS_NEWER, why)
        if wanted < Version(oldest):
            return ImageProblem(ImageGap.OS_OLDER, why)
        return ImageProblem(ImageGap.OS_SKIPPED, why)

    def next_built(self, os_version: str) -> str | None:
        """The oldest version of the matrix newer than os_version."""
        wanted = parse_version(os_version)
        newer = [v for v in self.os_versions if wanted is not None and Version(v) > wanted]
        return min(newer, key=Version) if newer else None


class ImageGap(Enum):
    """Why an installer release has no image for a node."""

    ARCH = "arch"
    OS_UNKNOWN = "os-unknown"
    OS_NEWER = "os-newer"
    """Newer than the newest Garden Linux the release builds (a maintenance update went ahead)."""
    OS_OLDER = "os-older"
    OS_SKIPPED = "os-skipped"
    """Between two built versions: the release skipped it."""
    BRANCH = "branch"
    EXCLUDED = "excluded"


@dataclass(frozen=True, slots=True)
class ImageProblem:
    gap: ImageGap
    why: str
