"""Loads the declarative data of values-rules/ once: defaults, rules, machine types,
installer release matrices and chart facts. File reading only; no API I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, partial
from operator import attrgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from cachetools import LRUCache, cachedmethod

from kyma_gpu.api.values import ALLOWLIST_FILE, Allowlist, load_allowlist
from kyma_gpu.datadir import ENV_RULES_DIR, default_rules_dir
from kyma_gpu.facts.machines import MachineType, MachineTypeRegistry
from kyma_gpu.rules.data_models import (
    ChartFacts,
    ChartImage,
    ChartRbacFile,
    Defaults,
    GpuFamiliesFile,
    ImageDigestsFile,
    MachineFamily,
    MachineTypesFile,
    parse,
)
from kyma_gpu.rules.engine import RuleError, RuleSet
from kyma_gpu.rules.installer import InstallerRelease
from kyma_gpu.rules.nvidia import NvidiaDrivers

IMAGE_DIGESTS = "image-digests.yaml"
"""A release's operand digests below values-rules/ (rules/data_models.py ImageDigestsFile)."""

__all__ = (
    "ENV_RULES_DIR",
    "IMAGE_DIGESTS",
    "Catalog",
    "ChartFacts",
    "ChartImage",
    "Defaults",
    "default_rules_dir",
    "locate",
    "machine_type_registry",
)


def _load(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except FileNotFoundError as err:
        raise RuleError(f"missing data file {path}") from err
    except (OSError, UnicodeDecodeError) as err:
        raise RuleError(f"cannot read {path} as UTF-8 text: {err}") from err
    except yaml.YAMLError as err:
        raise RuleError(f"{path} is not valid YAML: {err}") from err


def locate(path: Path, keys: Sequence[str | int]) -> int:
    """The 1-based line of the node at `keys` in a YAML file, or of the deepest key found
    (1 when the file cannot be composed)."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return 1
    line = node.start_mark.line + 1 if node is not None else 1
    for key in keys:
        child = _child(node, key)
        if child is None:
            break
        node, line = child, child.start_mark.line + 1
    return line


def _child(node: yaml.Node | None, key: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
        child: yaml.Node = node.value[key]
        return child
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == str(key):
                found: yaml.Node = v
                return found
    return None


def _machine_types(family: MachineFamily) -> dict[str, MachineType]:
    return {
        name: MachineType(
            gpu=family.gpu,
            count=size.count,
            unofficial=family.unofficial or size.unofficial,
            partition=size.partition,
            compute_capability=family.compute_capability,
            arch=family.arch,
            vgpu_guest_driver=family.vgpu_guest_driver,
            last_driver_branch=family.last_driver_branch,
        )
        for name, size in family.types.items()
    }


def machine_type_registry(data: object) -> MachineTypeRegistry:
    """The registry from the document of machine-types.yaml (RuleError names the entry)."""
    parsed = parse(MachineTypesFile, data, "machine-types.yaml")
    twice = parsed.duplicate()
    if twice is not None:
        raise RuleError(
            f"machine-types.yaml: {twice[0]}: machine type {twice[1]} is listed under two "
            "families; list it once",
            keys=(twice[0],),
            file="machine-types.yaml",
        )
    return MachineTypeRegistry(
        types={
            provider: {
                name: machine
                for family in families.values()
                for name, machine in _machine_types(family).items()
            }
            for provider, families in parsed.root.items()
        }
    )


FILES_KEPT = 256
"""Values files kept: values-rules/ holds about 60 (rules' fragments, installer matrices)."""
RELEASES_KEPT = 32
"""Installer releases and chart versions kept, known or not: a Gpu may name any tag, and the
ones it tried before must not pile up."""


class Catalog:
    """All of values-rules/, loaded lazily and kept (the files do not change at run time): the
    single files as cached properties, the rest in bounded caches (cachetools)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_rules_dir()
        if not self.root.exists():
            raise RuleError(f"values rules directory {self.root} does not exist")
        if not self.root.is_dir():
            raise RuleError(f"values rules directory {self.root} is not a directory")
        self._files: LRUCache[Any, Mapping[str, Any]] = LRUCache(maxsize=FILES_KEPT)
        self._charts: LRUCache[Any, ChartFacts | None] = LRUCache(maxsize=RELEASES_KEPT)
        self._installers: LRUCache[Any, InstallerRelease | None] = LRUCache(maxsize=RELEASES_KEPT)

    @cached_property
    def defaults(self) -> Defaults:
        return parse(Defaults, _load(self.root / "defaults.yaml"), "defaults.yaml")

    @cached_property
    def values_allowlist(self) -> Allowlist:
        """The chart values a Gpu may set (values-allowlist.yaml)."""
        return load_allowlist(self.root)

    @cached_property
    def rules(self) -> RuleSet:
        return RuleSet.from_mapping(_load(self.root / "rules.yaml"))

    @cached_property
    def machine_types(self) -> MachineTypeRegistry:
        return machine_type_registry(_load(self.root / "machine-types.yaml"))

    @cached_property
    def gpu_families(self) -> GpuFamiliesFile:
        """The GPU instance families of the providers' current lists (gpu-families.yaml)."""
        return parse(GpuFamiliesFile, _load(self.root / "gpu-families.yaml"), "gpu-families.yaml")

    @cached_property
    def chart_rbac(self) -> ChartRbacFile:
        """The chart rules the module narrows with a post-renderer (chart-rbac.yaml)."""
        return parse(ChartRbacFile, _load(self.root / "chart-rbac.yaml"), "chart-rbac.yaml")

    @cached_property
    def nvidia_drivers(self) -> NvidiaDrivers:
        """NVIDIA's driver container images per OS (nvidia-drivers.yaml)."""
        return NvidiaDrivers.from_mapping(_load(self.root / "nvidia-drivers.yaml"))

    @cached_property
    def image_digests(self) -> Mapping[str, str]:
        """The release's operand digests by image reference (image-digests.yaml); empty in a
        source checkout, which names images by tag."""
        path = self.root / IMAGE_DIGESTS
        if not path.is_file():
            return MappingProxyType({})
        parsed = parse(ImageDigestsFile, _load(path), IMAGE_DIGESTS)
        return MappingProxyType(dict(parsed.images))

    @cachedmethod(attrgetter("_files"))
    def values_file(self, relative: str) -> Mapping[str, Any]:
        """A values fragment below values-rules/ (path checked to stay inside)."""
        path = (self.root / relative).resolve()
        if self.root.resolve() not in path.parents:
            raise RuleError(f"values file {relative!r} is outside {self.root}")
        data = _load(path)
        if not isinstance(data, Mapping):
            raise RuleError(f"values file {path} must be a mapping")
        return data

    def check(self) -> None:
        """Load and check every file now, so that broken rule data stops the start (with the
        file and the line) instead of failing the first reconcile."""
        steps: list[tuple[str, Callable[[], object]]] = [
            ("defaults.yaml", lambda: self.defaults),
            (ALLOWLIST_FILE, lambda: self.values_allowlist),
            ("machine-types.yaml", lambda: self.machine_types),
            ("gpu-families.yaml", lambda: self.gpu_families),
            ("nvidia-drivers.yaml", lambda: self.nvidia_drivers),
            ("chart-rbac.yaml", lambda: self.chart_rbac),
            ("rules.yaml", lambda: self.rules),
            (IMAGE_DIGESTS, lambda: self.image_digests),
        ]
        for tag in self.installer_releases():
            steps.append((f"installer/{tag}/versions.yaml", partial(self.installer, tag)))
        for chart in sorted((self.root / "charts").glob("*.yaml")):
            steps.append((f"charts/{chart.name}", partial(self.chart, chart.stem)))
        for relative, load in steps:
            self._checked(relative, load)
        for rule in self.rules.rules:
            if rule.values_file and "{" not in rule.values_file:  # templated: per context
                self._checked(rule.values_file, partial(self.values_file, rule.values_file))

    def _checked(self, relative: str, load: Callable[[], object]) -> None:
        try:
            load()
        except RuleError as err:
            if str(self.root) in str(err):  # a YAML error already names the file and line
                raise
            raise self._located(err.file or relative, str(err), err.keys) from err
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise self._located(relative, f"{type(err).__name__}: {err}", ()) from err

    def _located(self, relative: str, message: str, keys: Sequence[str | int]) -> RuleError:
        path = self.root / relative
        return RuleError(f"{path}:{locate(path, keys)}: {message}", keys)

    def installer_releases(self) -> tuple[str, ...]:
        base = self.root / "installer"
        if not base.is_dir():
            return ()
        return tuple(sorted(p.name for p in base.iterdir() if (p / "versions.yaml").is_file()))

    @cachedmethod(attrgetter("_installers"))
    def installer(self, tag: str) -> InstallerRelease | None:
        """The matrix of an adopted release, or None when the module does not know the tag."""
        if tag not in self.installer_releases():
            return None
        return InstallerRelease.from_mapping(
            tag,
            self.values_file(f"installer/{tag}/versions.yaml"),
            self.values_file(f"installer/{tag}/gpu-operator-values.yaml"),
        )

    def chart_versions(self) -> tuple[str, ...]:
        """The chart versions the module supports: those with facts in values-rules/charts/
        (hack/release_rbac.py derives the release account's RBAC from the same list)."""
        return tuple(sorted(p.stem for p in (self.root / "charts").glob("v*.yaml")))

    @cachedmethod(attrgetter("_charts"))
    def chart(self, version: str) -> ChartFacts | None:
        """Facts of a chart version the module knows (values-rules/charts/<version>.yaml)."""
        relative = f"charts/{version}.yaml"
        if not (self.root / relative).is_file():
            return None
        return parse(ChartFacts, self.values_file(relative), relative)
