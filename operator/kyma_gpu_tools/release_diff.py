"""What a plan changes on a cluster: its HelmRelease against the one running there (`kyma-gpu
plan --release`, the output of `kubectl get helmrelease -n kyma-system gpu-operator -o yaml`).
The chart values that differ, and whether the change reaches the driver DaemonSets, which the
NVIDIA upgrade controller then replaces node by node, cordoning each. Pure."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

DRIVER_PATHS = ("driver.", "daemonsets.", "extraObjects")
"""Chart values that reach the driver's pod template: the driver's own, what every operand
DaemonSet gets (tolerations, priority class, ...), and the per-pool NVIDIADriver objects."""


@dataclass(frozen=True)
class Change:
    path: str
    before: Any
    after: Any
    """None with `removed`: the running release has it, the plan does not."""
    removed: bool = False

    @property
    def driver(self) -> bool:
        return self.path.startswith(DRIVER_PATHS)

    def text(self) -> str:
        if self.removed:
            return f"{self.path}: removed ({_shown(self.before)})"
        if self.before is None:
            return f"{self.path}: added ({_shown(self.after)})"
        return f"{self.path}: {_shown(self.before)} -> {_shown(self.after)}"


@dataclass(frozen=True)
class ReleaseDiff:
    chart: tuple[str, str] | None
    """(running, planned) chart version when they differ."""
    changes: tuple[Change, ...]

    @property
    def rolls_driver(self) -> bool:
        """The driver DaemonSets change: a new chart, or a value that reaches them."""
        return self.chart is not None or any(c.driver for c in self.changes)


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= 60 else text[:57] + "..."


def _leaves(values: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted paths to the scalars and lists of a values tree (a list is one value)."""
    if isinstance(values, Mapping) and (values or not prefix):
        for key, value in values.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), values


def _version(release: Mapping[str, Any]) -> str | None:
    spec = release.get("spec") or {}
    chart = ((spec.get("chart") or {}).get("spec")) or {}
    return chart.get("version")


def release_diff(running: Mapping[str, Any], planned: Mapping[str, Any]) -> ReleaseDiff:
    """The running HelmRelease against the planned one."""
    before = dict(_leaves((running.get("spec") or {}).get("values") or {}))
    after = dict(_leaves((planned.get("spec") or {}).get("values") or {}))
    changes = [Change(p, before.get(p), v) for p, v in after.items() if before.get(p) != v]
    changes += [Change(p, v, None, removed=True) for p, v in before.items() if p not in after]
    versions = (_version(running) or "", _version(planned) or "")
    chart = versions if versions[0] != versions[1] else None
    return ReleaseDiff(chart, tuple(sorted(changes, key=lambda c: c.path)))
