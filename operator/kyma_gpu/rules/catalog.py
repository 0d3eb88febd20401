"""Loads the declarative data of values-rules/ once: defaults, rules, machine types,
installer release matrices and chart facts. File reading only; no API I/O.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from kyma_gpu.facts.machines import MachineTypeRegistry
from kyma_gpu.rules.engine import RuleError, RuleSet
from kyma_gpu.rules.installer import InstallerRelease

ENV_RULES_DIR = "KYMA_GPU_RULES_DIR"


def default_rules_dir() -> Path:
    """$KYMA_GPU_RULES_DIR, else values-rules/ of the source checkout."""
    env = os.environ.get(ENV_RULES_DIR)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "values-rules"


@dataclass(frozen=True, slots=True)
class ChartImage:
    """One image location in the chart values: <path>.repository (+ image or tag)."""

    path: str
    repository: str
    image: str | None
    version: str | None


@dataclass(frozen=True, slots=True)
class ChartFacts:
    """What the module knows of one chart version without downloading it."""

    version: str
    default_driver_version: str
    images: tuple[ChartImage, ...]


@dataclass(frozen=True)
class Defaults:
    raw: Mapping[str, Any]

    @property
    def chart_version(self) -> str:
        return str(self.raw["chart"]["version"])

    @property
    def chart_repository(self) -> str:
        return str(self.raw["chart"]["repository"])

    @property
    def chart_name(self) -> str:
        return str(self.raw["chart"]["name"])

    @property
    def installer_release(self) -> str:
        return str(self.raw["installerRelease"])

    @property
    def installer_repository(self) -> str:
        return str(self.raw["installerRepository"])

    @property
    def module_namespace(self) -> str:
        return str(self.raw["moduleNamespace"])

    @property
    def target_namespace(self) -> str:
        return str(self.raw["targetNamespace"])

    @property
    def release_name(self) -> str:
        return str(self.raw["releaseName"])

    @property
    def auto_driver_mode(self) -> Mapping[str, str]:
        return dict(self.raw["autoDriverMode"])

    @property
    def os_release_id(self) -> Mapping[str, str]:
        return dict(self.raw["osReleaseId"])

    @property
    def nvidia_driver_repository(self) -> str:
        return str(self.raw["nvidiaDriverRepository"])

    @property
    def flux(self) -> Mapping[str, str]:
        return {k: str(v) for k, v in self.raw["flux"].items()}


def _load(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except FileNotFoundError as err:
        raise RuleError(f"missing data file {path}") from err
    except yaml.YAMLError as err:
        raise RuleError(f"{path} is not valid YAML: {err}") from err


class Catalog:
    """All of values-rules/, loaded lazily and kept (the files do not change at run time)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_rules_dir()
        if not self.root.is_dir():
            raise RuleError(f"values rules directory {self.root} does not exist")
        self._files: dict[str, Mapping[str, Any]] = {}

    @cached_property
    def defaults(self) -> Defaults:
        return Defaults(_load(self.root / "defaults.yaml"))

    @cached_property
    def rules(self) -> RuleSet:
        return RuleSet.from_mapping(_load(self.root / "rules.yaml"))

    @cached_property
    def machine_types(self) -> MachineTypeRegistry:
        return MachineTypeRegistry.from_mapping(_load(self.root / "machine-types.yaml"))

    def values_file(self, relative: str) -> Mapping[str, Any]:
        """A values fragment below values-rules/ (path checked to stay inside)."""
        if relative not in self._files:
            path = (self.root / relative).resolve()
            if self.root.resolve() not in path.parents:
                raise RuleError(f"values file {relative!r} is outside {self.root}")
            data = _load(path)
            if not isinstance(data, Mapping):
                raise RuleError(f"values file {path} must be a mapping")
            self._files[relative] = data
        return self._files[relative]

    def installer_releases(self) -> tuple[str, ...]:
        base = self.root / "installer"
        return tuple(sorted(p.name for p in base.iterdir() if (p / "versions.yaml").is_file()))

    def installer(self, tag: str) -> InstallerRelease | None:
        """The matrix of an adopted release, or None when the module does not know the tag."""
        if tag not in self.installer_releases():
            return None
        return InstallerRelease.from_mapping(
            tag,
            self.values_file(f"installer/{tag}/versions.yaml"),
            self.values_file(f"installer/{tag}/gpu-operator-values.yaml"),
        )

    def chart(self, version: str) -> ChartFacts | None:
        """Facts of a chart version the module knows (values-rules/charts/<version>.yaml)."""
        path = self.root / "charts" / f"{version}.yaml"
        if not path.is_file():
            return None
        data = self.values_file(f"charts/{version}.yaml")
        return ChartFacts(
            version=str(data["version"]),
            default_driver_version=str(data["defaultDriverVersion"]),
            images=tuple(
                ChartImage(
                    path=str(i["path"]),
                    repository=str(i["repository"]),
                    image=i.get("image"),
                    version=None if i.get("version") is None else str(i["version"]),
                )
                for i in data["images"]
            ),
        )
