"""What else the module costs at scale, measured in the same run as the manager.

- ``Usage``: RSS and CPU of a process and its children, from /proc (the NVIDIA controller runs
  as ``unshare sh -c ... gpu-operator``, so its pid is a launcher and the controller a child).
- ``Footprint``: the module's Flux (source- and helm-controller of ``FluxStack``) and the real
  NVIDIA controller, sampled next to the manager: CPU over a window, RSS and peak at the end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.scale.common import Metric
from tests.harness.flux import FluxStack

TICKS = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text(encoding="ascii")
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(parent, []).append(int(entry))
    return tree


def _tree(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(tree.get(current, ()))
    return out


def _one(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, VmRSS kB, VmHWM kB) of one process; zeros when it is gone."""
    cpu, rss, hwm = 0.0, 0, 0
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICKS
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(":")
            if key == "VmRSS":
                rss = int(value.split()[0])
            elif key == "VmHWM":
                hwm = int(value.split()[0])
    return cpu, rss, hwm


@dataclass(frozen=True)
class Usage:
    cpu_s: float
    rss_mib: float
    peak_mib: float
    """The largest VmHWM in the tree (the controller's own peak)."""

    @classmethod
    def of(cls, pid: int | None) -> Usage | None:
        if pid is None:
            return None
        parts = [_one(p) for p in _tree(pid)]
        return cls(
            sum(p[0] for p in parts),
            sum(p[1] for p in parts) / 1024,
            max((p[2] for p in parts), default=0) / 1024,
        )


@dataclass
class Footprint:
    """The processes measured next to the manager, by the row prefix of their metrics."""

    pids: Mapping[str, Callable[[], int | None]]
    marks: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def of_stack(cls, stack: FluxStack) -> Footprint:
        def flux(name: str) -> Callable[[], int | None]:
            return lambda: stack.processes[name].pid if name in stack.processes else None

        return cls({
            "source_controller": flux("source-controller"),
            "helm_controller": flux("helm-controller"),
            "nvidia": lambda: stack.nvidia.pid,
        })  # fmt: skip

    def usage(self) -> dict[str, Usage | None]:
        return {name: Usage.of(pid()) for name, pid in self.pids.items()}

    def mark(self, label: str) -> None:
        """Remember each process's CPU seconds now (a window starts)."""
        self.marks[label] = {n: u.cpu_s for n, u in self.usage().items() if u is not None}

    def cpu_pct(self, label: str, seconds: float, metrics: dict[str, Metric], row: str) -> None:
        """CPU of each process since ``mark(label)``, as % of one core, into the metrics."""
        for name, now in self.usage().items():
            before = self.marks.get(label, {}).get(name)
            if now is not None and before is not None and seconds > 0:
                metrics[f"{name}_{row}"] = round(100 * (now.cpu_s - before) / seconds, 2)

    def record(self, metrics: dict[str, Metric]) -> None:
        """RSS now, peak, and CPU seconds since each process started, into the metrics."""
        for name, now in self.usage().items():
            if now is None:
                metrics[f"{name}_rss_mib"] = "not running"
                continue
            metrics[f"{name}_rss_mib"] = round(now.rss_mib, 1)
            metrics[f"{name}_peak_rss_mib"] = round(now.peak_mib, 1)
            metrics[f"{name}_cpu_s"] = round(now.cpu_s, 1)
