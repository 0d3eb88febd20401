"""Where the operator's start goes: time (py-spy) and memory (tracemalloc) on the scale fleet.

    .venv/bin/pip install py-spy          # once; not a project dependency
    .venv/bin/python benchmarks/profile_start.py --nodes 1000 --operator-root /work/baseline

One local cluster with the scale fleet of bench_scale.py (benchmarks/scale/), then:
1. the operator under `py-spy record` (sampling, attached by pid) from start until it has
   written the HelmRelease and gone idle; the collapsed stacks and a summary (top functions by
   own and by total samples) go to --out;
2. the operator again (the Gpu spec is changed while it is down, so it has work to do) under
   benchmarks/tracemalloc_run.py: a memory report (RSS, object census, pymalloc arenas) when
   it wrote the HelmRelease and once it is idle.

--what time or --what memory runs one of the two.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.scale import (  # noqa: E402
    GPU_PATH,
    AuditTail,
    Operator,
    Rest,
    ScaleConfig,
    build_fleet,
)
from tests.harness.cluster import LocalCluster  # noqa: E402


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def wait_release_write(operator: Operator, audit: AuditTail, timeout: float) -> float | None:
    """Seconds from now until the operator writes a HelmRelease (None on timeout)."""
    began = time.time()
    while time.time() - began < timeout:
        operator.check_alive()
        if any(write.resource == "helmreleases" for write in audit.poll()):
            return time.time() - began
        time.sleep(0.2)
    return None


def wait_idle(operator: Operator, quiet: float = 10.0, timeout: float = 600.0) -> None:
    """Until the operator used < 2 % of a core over the last ``quiet`` seconds."""
    began, last = time.monotonic(), (time.monotonic(), operator.cpu_seconds())
    while time.monotonic() - began < timeout:
        time.sleep(quiet)
        now = (time.monotonic(), operator.cpu_seconds())
        if (now[1] - last[1]) / (now[0] - last[0]) < 0.02:
            return
        last = now


def summarize(raw: Path, out: Path, top: int = 30) -> None:
    """Top functions of py-spy's collapsed stacks, by own samples and by total samples."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        samples += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            total[frame] += int(count)
    lines = [f"{samples} samples (active threads only)", "--- own samples"]
    lines += [f"{n / samples:6.1%}  {frame}" for frame, n in own.most_common(top)]
    lines += ["--- total samples (the function or its callees)"]
    lines += [f"{n / samples:6.1%}  {frame}" for frame, n in total.most_common(top)]
    out.write_text("\n".join(lines) + "\n")
    say(f"py-spy summary: {out}")


def time_profile(cluster: LocalCluster, cfg: ScaleConfig, out: Path, py_spy: str) -> None:
    operator = Operator(cluster, cfg.operator_root, name="operator-pyspy")
    audit = AuditTail(cluster)
    operator.start()
    try:
        _record(operator, audit, cfg, out, py_spy)
    finally:
        operator.stop()


def _record(
    operator: Operator, audit: AuditTail, cfg: ScaleConfig, out: Path, spy_bin: str
) -> None:
    raw = out / "pyspy-start.txt"
    spy = subprocess.Popen(
        [spy_bin, "record", "--pid", str(operator.pid), "--rate", "50", "--format", "raw",
         "--output", str(raw), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    took = wait_release_write(operator, audit, cfg.start_timeout)
    say(f"py-spy run: HelmRelease written after {took} s; waiting until idle")
    wait_idle(operator)
    spy.send_signal(signal.SIGINT)
    spy.wait(60)
    summarize(raw, out / "pyspy-summary.txt")


def memory_profile(cluster: LocalCluster, rest: Rest, cfg: ScaleConfig, out: Path) -> None:
    report = out / "memory.txt"
    report.unlink(missing_ok=True)
    rest.merge_patch(f"{GPU_PATH}/gpu", {"spec": {"values": {"profile": {"run": 2}}}})
    entry = (str(ROOT / "benchmarks" / "tracemalloc_run.py"),)
    env = {"MEMORY_OUT": str(report)}
    operator = Operator(cluster, cfg.operator_root, "operator-memory", entry, env)
    audit = AuditTail(cluster)
    operator.start()
    try:
        took = wait_release_write(operator, audit, cfg.start_timeout)
        rss, hwm = operator.memory_mib()
        say(f"memory run: HelmRelease written after {took} s; RSS {rss:.0f}, peak {hwm:.0f} MiB")
        operator.send_signal(signal.SIGUSR2)
        wait_idle(operator)
        rss, hwm = operator.memory_mib()
        say(f"memory run: idle; RSS {rss:.0f} MiB, peak {hwm:.0f} MiB")
        operator.send_signal(signal.SIGUSR2)
        time.sleep(10)
    finally:
        operator.stop()
    say(f"memory report: {report}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=float, default=1.0)
    parser.add_argument("--operator-root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "profile")
    parser.add_argument("--py-spy", default=str(Path(sys.executable).parent / "py-spy"))
    parser.add_argument("--what", choices=("both", "time", "memory"), default="both")
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = ScaleConfig(
        nodes=args.nodes,
        pods_per_node=args.pods_per_node,
        operator_root=args.operator_root.resolve(),
    )
    with LocalCluster(progress=say) as cluster:
        rest = Rest(cluster)
        build_fleet(cluster, rest, cfg, say)
        if args.what in ("both", "time"):
            time_profile(cluster, cfg, args.out, args.py_spy)
        if args.what in ("both", "memory"):
            memory_profile(cluster, rest, cfg, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
