"""Run the manager (`python -m kyma_gpu`; a tree from before kyma_gpu/main.py: `kyma_gpu.cli
run`) with a memory report on SIGUSR2, appended to $MEMORY_OUT. Used by profile_start.py:

    PYTHONPATH=<tree>/operator python benchmarks/tracemalloc_run.py --standalone

Each report: VmRSS/VmHWM, a census of the objects the garbage collector tracks (count and
shallow size per type) and pymalloc's arena statistics (sys._debugmallocstats: how much of
the memory Python holds is in use and how much is free blocks it keeps). With
TRACEMALLOC_FRAMES=N (N > 0) tracemalloc runs from the start and the report adds the top
allocation sites; that slows the operator down many times over, so it is off by default.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

OUT = os.environ.get("MEMORY_OUT", "memory.txt")
FRAMES = int(os.environ.get("TRACEMALLOC_FRAMES", "0"))


def census(out: TextIO) -> None:
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for obj in gc.get_objects():
        name = f"{type(obj).__module__}.{type(obj).__qualname__}"
        counts[name] += 1
        sizes[name] += sys.getsizeof(obj)
    out.write(f"--- gc-tracked objects: {sum(counts.values())}, {sum(sizes.values()) >> 20} MiB\n")
    for name, size in sizes.most_common(20):
        out.write(f"{size / 2**20:8.1f} MiB {counts[name]:9d}  {name}\n")


def _describe(obj: object) -> str:
    if isinstance(obj, dict):
        keys = ", ".join(map(str, list(obj)[:4]))
        return f"dict({len(obj)} keys: {keys})"
    if isinstance(obj, (list, tuple, set)):
        return f"{type(obj).__name__}({len(obj)})"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def holders(out: TextIO, samples: int = 2, depth: int = 4) -> None:
    """Which objects keep whole Node/Pod bodies alive: referrer chains of a few of them."""
    bodies = [
        obj for obj in gc.get_objects()
        if isinstance(obj, dict) and obj.get("kind") in ("Node", "Pod") and "metadata" in obj
    ]  # fmt: skip
    out.write(f"--- whole Node/Pod bodies alive: {len(bodies)}\n")
    for body in bodies[:samples]:
        chain: object = body
        out.write(f"{_describe(body)}\n")
        for level in range(depth):
            referrers = [r for r in gc.get_referrers(chain) if r is not bodies]
            referrers = [r for r in referrers if not isinstance(r, FrameType)]
            if not referrers:
                break
            out.write("  " * (level + 1) + " | ".join(_describe(r) for r in referrers[:3]) + "\n")
            chain = referrers[0]


def malloc_stats(out: TextIO) -> None:
    """sys._debugmallocstats writes to the C stderr: point fd 2 at the report for a moment."""
    out.flush()
    saved = os.dup(2)
    with open(OUT, "a", encoding="utf-8") as target:
        os.dup2(target.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def top_sites(out: TextIO) -> None:
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    out.write(f"--- tracemalloc: now {current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB\n")
    for stat in snapshot.statistics("traceback")[:12]:
        out.write(f"{stat.size / 2**20:.1f} MiB in {stat.count} blocks\n")
        out.write("\n".join(stat.traceback.format(limit=FRAMES, most_recent_first=True)))
        out.write("\n\n")


def report(signum: int, frame: FrameType | None) -> None:
    status = Path("/proc/self/status").read_text().splitlines()
    memory = [line for line in status if line.startswith(("VmRSS", "VmHWM"))]
    with open(OUT, "a", encoding="utf-8") as out:
        out.write(f"=== {' '.join(' '.join(line.split()) for line in memory)}\n")
        census(out)
        holders(out)
        if tracemalloc.is_tracing():
            top_sites(out)
        out.write("--- pymalloc\n")
    malloc_stats(sys.stdout)


def main() -> int:
    if FRAMES > 0:
        tracemalloc.start(FRAMES)
    signal.signal(signal.SIGUSR2, report)
    try:
        from kyma_gpu.main import main as manager_main
    except ImportError:  # a baseline tree: its CLI's `run`
        cli: Any = importlib.import_module("kyma_gpu.cli")
        return int(cli.main(["run", *sys.argv[1:]]))
    return manager_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
