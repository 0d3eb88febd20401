"""Where the CPU of a command goes, by process kind: run a command (e.g. `make test`), sample
/proc every INTERVAL seconds, and print a table of CPU seconds per kind of process.

    python benchmarks/cpu_by_process.py [--interval 2] [--json out.json] -- make test

A kind is the program's name (kube-apiserver, etcd, source-controller, ...); Python processes
are told apart by what they run (pytest worker, the kyma-gpu manager, the harness). A process
that starts and ends between two samples is missed, so a short interval catches more; the
table says how much CPU the whole machine spent meanwhile, so the share covered is visible.
Linux only (it reads /proc); it needs no package beyond the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
PYTHONS = (
    ("xdist", "pytest worker"),
    ("pytest", "pytest"),
    ("kyma-gpu", "kyma-gpu manager"),
    ("kyma_gpu", "kyma-gpu manager"),
    ("tests.harness", "harness"),
)


def _kind(pid: str) -> str | None:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if not argv or not argv[0]:
        return None
    name = os.path.basename(argv[0].decode(errors="replace"))
    if name.startswith("python"):
        line = " ".join(a.decode(errors="replace") for a in argv[1:4])
        return next((kind for key, kind in PYTHONS if key in line), "python (other)")
    return name


def _cpu(pid: str) -> float | None:
    """utime + stime of one process, in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def _machine_cpu() -> float:
    """CPU seconds the whole machine has spent (user, nice, system), from /proc/stat."""
    first = Path("/proc/stat").read_text(encoding="ascii").splitlines()[0].split()
    return sum(int(v) for v in first[1:4]) / TICKS


class Sampler:
    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, float]] = {}
        """pid -> (kind, CPU seconds at the last sample)."""
        self.total: defaultdict[str, float] = defaultdict(float)
        self.count: defaultdict[str, int] = defaultdict(int)
        self.started = False
        """False during the first sample: what runs already counts from that moment on."""

    def sample(self) -> None:
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            cpu = _cpu(pid)
            if cpu is None:
                continue
            if pid not in self.seen:
                kind = _kind(pid)
                if kind is None:
                    continue
                if self.started:
                    self.count[kind] += 1
                self.seen[pid] = (kind, 0.0 if self.started else cpu)
            kind, last = self.seen[pid]
            self.total[kind] += max(0.0, cpu - last)
            self.seen[pid] = (kind, cpu)
        self.started = True


def table(sampler: Sampler, wall: float, machine: float) -> str:
    covered = sum(sampler.total.values())
    rows = [f"wall {wall:.0f} s; machine CPU {machine:.0f} s ({machine / wall:.2f} cores busy); "
            f"sampled {covered:.0f} s of it", "",
            "| process | processes | CPU s | share |", "|---|--:|--:|--:|"]  # fmt: skip
    for kind, cpu in sorted(sampler.total.items(), key=lambda kv: -kv[1]):
        if cpu >= 0.5:
            rows.append(f"| {kind} | {sampler.count[kind]} | {cpu:.0f} | {cpu / machine:.0%} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--json", type=Path, help="also write the totals here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    sampler = Sampler()
    sampler.sample()
    began, machine_began = time.monotonic(), _machine_cpu()
    child = subprocess.Popen(command)
    while child.poll() is None:
        time.sleep(args.interval)
        sampler.sample()
    wall, machine = time.monotonic() - began, _machine_cpu() - machine_began
    print(table(sampler, wall, machine), file=sys.stderr)
    if args.json:
        totals = {k: round(v, 1) for k, v in sampler.total.items()}
        out = {"wall_s": round(wall, 1), "machine_cpu_s": round(machine, 1), "cpu_s": totals}
        args.json.write_text(json.dumps(out, indent=1))
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
