"""Loads the declarative data of values-rules/ once: defaults, rules, machine types,
installer release matrices and chart facts. File reading only; no API I/O.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
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


_WHERE: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], list[str | int]]], ...] = (
    (re.compile(r"rule #(\d+)"), lambda m: ["rules", int(m.group(1)) - 1]),
    (re.compile(r"machine types: (?:provider )?'?([\w.-]+)'?(?:/([\w.-]+))?"),
     lambda m: [m.group(1), m.group(2)] if m.group(2) else [m.group(1)]),
    (re.compile(r"(os_versions|nvidia_drivers|driver\.version|imageMirror)"),
     lambda m: [m.group(1).split(".")[0]]),
)  # fmt: skip


def keys_in(message: str) -> list[str | int]:
    """Where in its file an error message points, as YAML keys (best effort)."""
    for pattern, keys in _WHERE:
        match = pattern.search(message)
        if match:
            return keys(match)
    return []


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

    def check(self) -> None:
        """Load and check every file now, so that broken rule data stops the start (with the
        file and the line) instead of failing the first reconcile."""
        steps: list[tuple[str, Callable[[], object]]] = [
            ("defaults.yaml", lambda: self.defaults.flux),
            ("machine-types.yaml", lambda: self.machine_types),
            ("rules.yaml", lambda: self.rules),
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
            raise self._located(relative, str(err)) from err
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise self._located(relative, f"{type(err).__name__}: {err}") from err

    def _located(self, relative: str, message: str) -> RuleError:
        path = self.root / relative
        return RuleError(f"{path}:{locate(path, keys_in(message))}: {message}")

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
