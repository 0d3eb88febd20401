"""NVIDIA's driver container catalog (values-rules/nvidia-drivers.yaml): which driver versions
NVIDIA publishes as nvcr.io/nvidia/driver:<version>-<os tag>, for which OS and architecture.

Answers, before any image pull fails: which full version a branch means on these nodes, and does
NVIDIA publish the image this node needs? The NVIDIA operator names the OS in the tag from the
node's /etc/os-release: ID and VERSION_ID (ubuntu22.04), the major version only for rhel.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from packaging.version import Version

from kyma_gpu.facts.node import OsFamily
from kyma_gpu.rules.data_models import NvidiaDriversFile, parse
from kyma_gpu.rules.installer import branch_of

FILE = "nvidia-drivers.yaml"
_ARCH_ALIASES = MappingProxyType({"x86_64": "amd64", "aarch64": "arm64"})


def canonical_arch(arch: str) -> str:
    return _ARCH_ALIASES.get(arch, arch)


class ImageAvailability(Enum):
    """What the catalog says about one image."""

    PUBLISHED = "published"
    MISSING = "missing"
    """The catalog lists the version, and not for this OS or architecture."""
    UNSURE = "unsure"
    """The catalog cannot tell: the version or the OS is not in it, or its entry is unofficial."""


@dataclass(frozen=True, slots=True)
class Published:
    version: str
    os: frozenset[str]
    source: str
    unofficial: bool


@dataclass(frozen=True, slots=True)
class ImageAnswer:
    availability: ImageAvailability
    why: str = ""


@dataclass(frozen=True, slots=True)
class NvidiaDrivers:
    """The catalog: published driver versions per OS tag, newest first."""

    repository: str
    source: str
    checked: str
    tag_parts: Mapping[str, int]
    multi_arch: frozenset[str]
    drivers: tuple[Published, ...]

    @classmethod
    def from_mapping(cls, data: object) -> NvidiaDrivers:
        """From the document of nvidia-drivers.yaml (RuleError names the entry)."""
        parsed = parse(NvidiaDriversFile, data, FILE)
        drivers = sorted(parsed.drivers, key=lambda d: Version(d.version), reverse=True)
        return cls(
            repository=parsed.repository,
            source=parsed.source,
            checked=parsed.checked,
            tag_parts=dict(parsed.os_tag_parts),
            multi_arch=frozenset(parsed.multi_arch),
            drivers=tuple(
                Published(d.version, frozenset(d.os), d.source, d.unofficial) for d in drivers
            ),
        )

    @property
    def where(self) -> str:
        return f"values-rules/{FILE}, checked {self.checked}"

    def os_tag(self, os: OsFamily, os_version: str | None) -> str | None:
        """The OS part of the image tag for a node (ubuntu22.04, rhel9, sles15.6); None when
        NVIDIA publishes no driver container for the OS family or the version is unknown."""
        parts = self.tag_parts.get(str(os))
        if parts is None or not os_version:
            return None
        numbers = os_version.replace(" SP", ".").split(".")
        if not all(n.isdigit() for n in numbers[:parts]) or len(numbers) < parts:
            return None
        return f"{os}{'.'.join(numbers[:parts])}"

    def branches(self) -> list[str]:
        return list(dict.fromkeys(branch_of(d.version) for d in self.drivers))

    def entry(self, version: str) -> Published | None:
        return next((d for d in self.drivers if d.version == version), None)

    def newest(self, branch: str, images: Iterable[tuple[str, str]]) -> Published | None:
        """The newest version of the branch published for every (OS tag, arch) the catalog
        knows, preferring confirmed entries; else the branch's newest; None without one."""
        known = [(tag, arch) for tag, arch in images if self._knows(tag)]
        candidates = [d for d in self.drivers if branch_of(d.version) == branch]
        for confirmed in (True, False):
            for driver in candidates:
                if driver.unofficial is confirmed:
                    continue
                if all(self._has(driver, tag, arch) for tag, arch in known):
                    return driver
        return candidates[0] if candidates else None

    def answer(self, version: str, tag: str | None, arch: str) -> ImageAnswer:
        """Is nvcr.io/nvidia/driver:<version>-<tag> published for arch?"""
        arch = canonical_arch(arch)
        image = f"{self.repository}:{version}-{tag}"
        if tag is None or not self._knows(tag):
            return ImageAnswer(ImageAvailability.UNSURE,
                               f"the catalog ({self.where}) lists no driver "
                               f"container for this OS{f' ({tag})' if tag else ''}")  # fmt: skip
        driver = self.entry(version)
        if driver is None:
            return ImageAnswer(ImageAvailability.UNSURE,
                               f"the catalog ({self.where}) does not list "
                               f"driver {version}; check that {image} exists")  # fmt: skip
        if self._has(driver, tag, arch):
            return ImageAnswer(ImageAvailability.PUBLISHED)
        availability = ImageAvailability.UNSURE if driver.unofficial else ImageAvailability.MISSING
        return ImageAnswer(availability, self._missing(driver, tag, arch, image))

    def _missing(self, driver: Published, tag: str, arch: str, image: str) -> str:
        if tag in driver.os:
            return (
                f"NVIDIA publishes {image} for amd64 only (arm64 images: "
                f"{', '.join(sorted(self.multi_arch)) or 'none'}; {self.where})"
            )
        newest = next((d.version for d in self.drivers if self._has(d, tag, arch)), None)
        return (
            f"NVIDIA publishes no {image} (driver {driver.version} is published for "
            f"{', '.join(sorted(driver.os))}; newest for {tag}: {newest or 'none'}; {self.where})"
        )

    def _knows(self, tag: str) -> bool:
        return any(tag in d.os for d in self.drivers)

    def _has(self, driver: Published, tag: str, arch: str) -> bool:
        if tag not in driver.os:
            return False
        return canonical_arch(arch) != "arm64" or tag in self.multi_arch
