"""Scale benchmark: the operator on a local cluster of 1,000, 5,000 and 20,000 kwok nodes.

    make bench-scale
    .venv/bin/python benchmarks/bench_scale.py [--nodes 1000,5000,20000] [--flux] [--json out.json]
    .venv/bin/python benchmarks/bench_scale.py --operator-root /work/baseline --label before
    .venv/bin/python benchmarks/bench_scale.py --compare before.json after.json

Per size: a fresh local cluster (tests/harness: etcd, kube-apiserver, controller-manager,
scheduler, kwok), Gardener-AWS-shaped Nodes (10 % GPU in pools of 10, Garden Linux 1877.21-23
and one Ubuntu pool, 40 status.images each, about 12 kB), one ordinary pod per node, the Gpu
`gpu`; then the operator as a process, measured from outside: start to first reconcile, RSS,
CPU and writes at Node heartbeats (a kubelet's every 5 minutes), spec change to HelmRelease
update, writes per change, GPU node join, a driver rollout's label churn, the Gpu status and
HelmRelease sizes, restart. With --flux the harness's source- and helm-controller and the real
NVIDIA controller run too (their RSS and CPU are rows), the Gpu points at the local chart
repository, and at the end it is deleted and created again (time to HelmRelease and Gpu Ready).
Without it nobody reconciles the HelmRelease. docs/performance.md explains each row. Prints a
table (one column per size) and optionally saves the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.scale import (  # noqa: E402
    Metric,
    Rest,
    ScaleConfig,
    build_fleet,
    measure_operator,
)
from benchmarks.scale.footprint import Footprint  # noqa: E402
from tests.harness.cluster import LocalCluster  # noqa: E402
from tests.harness.flux import FluxStack  # noqa: E402
from tests.harness.module import install_crds as install_module_crds  # noqa: E402
from tests.harness.nvidia import NvidiaOperator  # noqa: E402

Check = Callable[[float], bool] | None
OBJECT_LIMIT = 1_572_864
"""The API server refuses objects above 1.5 MiB."""


def below(limit: float) -> Check:
    return lambda value: value < limit


def at_most(limit: float) -> Check:
    return lambda value: value <= limit


ROWS: tuple[tuple[str, str, str, Check], ...] = (
    ("start_first_reconcile_s", "start -> first reconcile (s)", "< 10", below(10)),
    ("start_helmrelease_s", "start -> first HelmRelease write (s)", "", None),
    ("start_cpu_s", "operator CPU until then (s)", "", None),
    ("start_peak_rss_mib", "peak RSS (MiB)", "< 150", below(150)),
    ("start_settled_rss_mib", "settled RSS (MiB)", "< 150", below(150)),
    ("baseline_cpu_pct", "CPU, same window without heartbeats (% of a core)", "", None),
    ("baseline_writes", "writes, same window without heartbeats", "", None),
    ("heartbeat_rate", "Node heartbeats sent (/s)", "nodes/300", None),
    ("heartbeat_cpu_pct", "CPU during heartbeats (% of a core)", "<= 2.5", at_most(2.5)),
    ("heartbeat_writes", "writes during heartbeats", "0", at_most(0)),
    ("heartbeat_caused_cpu_pct", "CPU heartbeats caused (% of a core)", "<= 2.5", at_most(2.5)),
    ("heartbeat_caused_writes", "writes heartbeats caused", "0", at_most(0)),
    ("spec_p50_ms", "spec change -> HelmRelease update p50 (ms)", "", None),
    ("spec_p99_ms", "spec change -> HelmRelease update p99 (ms)", "< 250", below(250)),
    ("spec_writes_mean", "writes per spec change (mean)", "<= 2", at_most(2)),
    ("spec_writes_max", "writes per spec change (max)", "<= 2", at_most(2)),
    (
        "spec_own_writes_mean",
        "of which the change's own: HelmRelease + its status (mean)",
        "",
        None,
    ),
    ("spec_own_writes_max", "of which the change's own (max)", "", None),
    ("node_join_s", "GPU node join -> Gpu.status (s)", "< 1", below(1)),
    ("restart_first_reconcile_s", "restart -> first reconcile (s)", "< 10", below(10)),
    ("restart_helmrelease_s", "restart -> HelmRelease updated (s)", "", None),
    ("restart_peak_rss_mib", "restart: peak RSS (MiB)", "< 150", below(150)),
    ("restart_settled_rss_mib", "restart: settled RSS (MiB)", "< 150", below(150)),
    ("restart_spec_p50_ms", "restart: spec change p50 (ms)", "", None),
    ("restart_spec_p99_ms", "restart: spec change p99 (ms)", "< 250", below(250)),
    ("restart_spec_writes_mean", "restart: writes per spec change (mean)", "<= 2", at_most(2)),
    ("restart_spec_own_writes_mean", "restart: of which the change's own (mean)", "", None),
    ("rollout_nodes", "rollout: GPU nodes relabelled", "", None),
    ("rollout_cpu_s", "rollout: manager CPU (s)", "", None),
    ("rollout_cpu_ms_per_node", "rollout: manager CPU per node (ms)", "", None),
    ("rollout_writes", "rollout: manager writes", "", None),
    ("rollout_status_writes", "rollout: of which status writes", "coalesced", None),
    ("rollout_helmrelease_writes", "rollout: of which HelmRelease writes", "0", at_most(0)),
    ("gpu_status_bytes", "Gpu status (bytes)", "< 1.5 MiB", below(OBJECT_LIMIT)),
    ("helmrelease_values_bytes", "HelmRelease values (bytes)", "< 1.5 MiB", below(OBJECT_LIMIT)),
    ("helmrelease_bytes", "HelmRelease object (bytes)", "< 1.5 MiB", below(OBJECT_LIMIT)),
    ("flux_helmrelease_ready_s", "Flux: start -> HelmRelease Ready (s)", "", None),
    ("flux_gpu_ready_s", "Flux: start -> Gpu Ready (s)", "", None),
    ("flux_daemonsets_steady_s", "Flux: start -> operand DaemonSets steady (s)", "", None),
    ("nfd_worker_pods", "Flux: NFD worker pods scheduled", "", None),
    ("source_controller_baseline_cpu_pct", "source-controller CPU in baseline (%)", "", None),
    ("source_controller_rss_mib", "source-controller RSS (MiB)", "", None),
    ("source_controller_peak_rss_mib", "source-controller peak RSS (MiB)", "", None),
    ("source_controller_cpu_s", "source-controller CPU, whole run (s)", "", None),
    ("source_controller_heartbeat_cpu_pct", "source-controller CPU in heartbeats (%)", "", None),
    ("helm_controller_rss_mib", "helm-controller RSS (MiB)", "", None),
    ("helm_controller_peak_rss_mib", "helm-controller peak RSS (MiB)", "", None),
    ("helm_controller_cpu_s", "helm-controller CPU, whole run (s)", "", None),
    ("helm_controller_baseline_cpu_pct", "helm-controller CPU in baseline (%)", "", None),
    ("helm_controller_heartbeat_cpu_pct", "helm-controller CPU in heartbeats (%)", "", None),
    ("nvidia_rss_mib", "NVIDIA controller RSS (MiB)", "", None),
    ("nvidia_peak_rss_mib", "NVIDIA controller peak RSS (MiB)", "", None),
    ("nvidia_cpu_s", "NVIDIA controller CPU since its start (s)", "", None),
    ("nvidia_baseline_cpu_pct", "NVIDIA controller CPU in baseline (%)", "", None),
    ("nvidia_heartbeat_cpu_pct", "NVIDIA controller CPU in heartbeats (%)", "", None),
    ("install_helmrelease_ready_s", "Gpu created -> HelmRelease Ready (s)", "", None),
    ("install_gpu_ready_s", "Gpu created -> Gpu Ready (s)", "", None),
    ("node_json_kb", "setup: Node size (kB of JSON)", "", None),
    ("gpu_pools", "setup: GPU worker pools", "", None),
    ("nodes_create_s", "setup: Nodes created in (s)", "", None),
    ("nodes_ready", "setup: Nodes Ready", "", None),
    ("pods_running", "setup: pods Running", "", None),
)


def show(value: Metric, check: Check) -> str:
    """A cell: the number, `timeout` or `-`; ` !` when it misses the target."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    text = f"{value:.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)
    return f"{text} !" if check is not None and not check(float(value)) else text


def table(runs: Sequence[dict[str, Any]]) -> str:
    """One row per metric, one column per run (label and size), then the target."""
    header = ["metric", *(f"{run['label']} {run['nodes']}" for run in runs), "target"]
    rows = [header]
    for key, title, target, check in ROWS:
        cells = [show(run["metrics"].get(key), check) for run in runs]
        if all(cell == "-" for cell in cells):
            continue
        rows.append([title, *cells, target])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        return "| " + " | ".join([first, *rest]) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows[1:])])


def _listed(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} x{n}" for kind, n in sorted(counts.items())) or "none"


def breakdowns(runs: Sequence[dict[str, Any]]) -> str:
    """Per run: the writes of the spec changes, of the baseline and heartbeat windows, by kind."""
    lines = []
    for run in runs:
        where = f"{run['label']} {run['nodes']}"
        lines.append(
            f"writes during the spec changes, {where}: {_listed(run.get('writes_breakdown') or {})}"
        )
        details = run.get("details") or {}
        for window in ("baseline", "heartbeat"):
            if f"{window}_writes" in details:
                counts = Counter(str(row[1]) for row in details[f"{window}_writes"])
                lines.append(f"writes in the {window} window, {where}: {_listed(dict(counts))}")
        if run.get("error"):
            lines.append(f"  error in {run['label']} {run['nodes']}: {run['error']}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    mem_kib = 0
    model = ""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kib / 1048576, 1),
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def commit_of(root: Path) -> str:
    """Short commit of the tree under test, with +dirty if its operator/ has changes."""

    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
        )
        return result.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--", "operator") else "")


class Clock:
    """Progress lines with the seconds since the benchmark started."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.context = ""

    def __call__(self, message: str) -> None:
        print(f"[{time.monotonic() - self.began:7.1f}s] {self.context}{message}", flush=True)


def run_size(cfg: ScaleConfig, label: str, clock: Clock, keep: bool) -> dict[str, Any]:
    """One fresh cluster, one fleet, every measurement; the cluster is always stopped."""
    clock.context = f"{label} {cfg.nodes} | "
    result: dict[str, Any] = {"label": label, "nodes": cfg.nodes, "pods": cfg.pods, "details": {}}
    result["gpu_nodes"] = sum(cfg.gpu_node(i) for i in range(cfg.nodes))
    cluster = LocalCluster(progress=clock, keep_workdir=keep, controller_qps=cfg.controller_qps)
    stack: FluxStack | None = None
    try:
        cluster.start()
        rest = Rest(cluster)
        footprint, gpu = None, None
        if cfg.flux:
            stack = FluxStack(cluster, progress=clock)
            stack.nvidia = NvidiaOperator(cluster, emulate_nfd=False)  # the fleet has NFD's labels
            stack.start()
            install_module_crds(cluster)  # the values policy, the release ServiceAccount's RBAC
            footprint, gpu = Footprint.of_stack(stack), flux_gpu(stack, cfg.nfd)
        fleet = build_fleet(cluster, rest, cfg, clock, gpu)
        metrics, breakdown, _ = measure_operator(
            cluster, rest, cfg, fleet, clock, footprint=footprint, details=result["details"]
        )
        metrics["gpu_pools"] = cfg.gpu_pools
        result["metrics"], result["writes_breakdown"] = metrics, dict(breakdown)
        result["error"] = metrics.pop("error", None)
    except Exception as error:  # report it in the table, go on with the next size
        clock(f"failed: {error!r}")
        result.setdefault("metrics", {})
        result["error"] = repr(error)
    finally:
        clock(f"stopping the cluster{f' (kept: {cluster.workdir})' if keep else ''}")
        if stack is not None:
            stack.stop()
        cluster.stop()
    return result


def flux_gpu(stack: FluxStack, nfd: str = "GpuNodes") -> dict[str, Any]:
    """The Gpu with the local chart repository as its source, and otherwise the default: NFD's
    worker runs only where a GPU can be (plan/nfd.py), as a user gets it (before issue 36 the
    benchmark restricted it by spec.values, which hid the chart's worker on every node)."""
    return {
        "apiVersion": "gpu.kyma-project.io/v1beta1",
        "kind": "Gpu",
        "metadata": {"name": "gpu"},
        "spec": {
            "source": {"chartRepository": stack.helm_repo_url, "insecure": True},
            "components": {"nodeFeatureDiscovery": nfd},
        },
    }


def bytes_per_node(runs: Sequence[dict[str, Any]]) -> str:
    """Settled RSS growth from the smallest to the largest size, per node more."""
    done = sorted(
        (r for r in runs if isinstance(r["metrics"].get("start_settled_rss_mib"), int | float)),
        key=lambda r: int(r["nodes"]),
    )
    if len(done) < 2 or done[0]["nodes"] == done[-1]["nodes"]:
        return ""
    small, large = done[0], done[-1]
    grown = large["metrics"]["start_settled_rss_mib"] - small["metrics"]["start_settled_rss_mib"]
    per = grown * 1048576 / (int(large["nodes"]) - int(small["nodes"]))
    return (
        f"settled RSS {small['nodes']} -> {large['nodes']} nodes: {grown:+.1f} MiB, "
        f"{per:.0f} bytes per node"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("--nodes", default="1000,5000,20000", help="comma-separated fleet sizes")
    add("--gpu-fraction", type=float, default=0.1, help="share of GPU nodes (default 0.1)")
    add("--pods-per-node", type=float, default=1.0, help="ordinary pods per node (default 1)")
    add("--operator-root", type=Path, default=ROOT, help="source tree whose operator/ to run")
    add("--label", default=None, help="column label (default: the tree's commit)")
    add("--heartbeat-seconds", type=float, default=60.0, help="heartbeat window (default 60)")
    add(
        "--heartbeat-rate",
        type=float,
        default=None,
        help="heartbeats per second (default: 17, and 70 per 20,000 nodes above 5,000)",
    )
    add("--no-baseline", action="store_true", help="no window without heartbeats before theirs")
    add("--flux", action="store_true", help="run Flux and the NVIDIA controller too")
    add(
        "--install-timeout",
        type=float,
        default=600.0,
        help="with --flux: how long the chart install may take (s, default 600)",
    )
    add(
        "--install-up-to",
        type=int,
        default=1000,
        help="with --flux: time the Gpu's install (delete, create) up to this size (1000)",
    )
    add(
        "--controller-qps",
        type=int,
        default=None,
        help="kube-controller-manager's --kube-api-qps (default: its own, 20/s; large managed "
        "clusters raise it, and it paces the operand pods of an install with --flux)",
    )
    add(
        "--nfd",
        choices=("GpuNodes", "AllNodes"),
        default="GpuNodes",
        help="with --flux: the Gpu's spec.components.nodeFeatureDiscovery (default GpuNodes)",
    )
    add("--no-rollout", action="store_true", help="skip the driver rollout label churn")
    add("--spec-changes", type=int, default=20, help="spec changes to time (default 20)")
    add(
        "--spec-value",
        choices=("operands", "inert"),
        default="operands",
        help="a spec change sets daemonsets.annotations (rolls the NVIDIA operands, default) "
        "or a value no chart template reads (inert)",
    )
    add("--restart-spec-changes", type=int, default=5, help="spec changes after the restart")
    add("--no-restart", action="store_true", help="skip the restart measurements")
    add("--start-timeout", type=float, default=1200.0, help="start/restart timeout (s)")
    add("--step-timeout", type=float, default=120.0, help="timeout of the other steps (s)")
    add("--json", type=Path, default=None, help="save the raw results here")
    add("--keep-workdir", action="store_true", help="keep each cluster's workdir and logs")
    add("--compare", nargs="+", type=Path, default=None, help="print saved results side by side")
    return parser.parse_args(argv)


def config(args: argparse.Namespace, nodes: int) -> ScaleConfig:
    return ScaleConfig(
        nodes=nodes,
        gpu_fraction=args.gpu_fraction,
        pods_per_node=args.pods_per_node,
        heartbeat_seconds=args.heartbeat_seconds,
        heartbeat_rate=args.heartbeat_rate or max(17.0, 70.0 * nodes / 20000),
        spec_changes=args.spec_changes,
        spec_value=args.spec_value,
        restart_spec_changes=args.restart_spec_changes,
        restart=not args.no_restart,
        rollout=not args.no_rollout,
        flux=args.flux,
        install=args.flux and nodes <= args.install_up_to,
        install_timeout=args.install_timeout,
        controller_qps=args.controller_qps,
        nfd=args.nfd,
        baseline=not args.no_baseline,
        start_timeout=args.start_timeout,
        step_timeout=args.step_timeout,
        operator_root=args.operator_root.resolve(),
    )


def compare(paths: Sequence[Path]) -> None:
    runs = []
    for path in paths:
        saved = json.loads(path.read_text())
        runs.extend(saved["runs"])
        info = saved.get("machine", {})
        print(
            f"{path}: {saved.get('label')} at {saved.get('commit')}, {info.get('date')}, "
            f"{info.get('nproc')} cores, {info.get('memory_gib')} GiB"
        )
    print(table(runs))
    print(breakdowns(runs))
    print(bytes_per_node(runs))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare:
        compare(args.compare)
        return 0
    root = args.operator_root.resolve()
    label = args.label or commit_of(root)
    sizes = [int(size) for size in str(args.nodes).split(",") if size.strip()]
    saved: dict[str, Any] = {
        "label": label,
        "operator_root": str(root),
        "commit": commit_of(root),
        "machine": machine(),
        "runs": [],
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    clock = Clock()
    clock(f"benchmarking {root}/operator ({saved['commit']}) as {label!r} at {sizes} nodes")
    for nodes in sizes:
        saved["runs"].append(run_size(config(args, nodes), label, clock, args.keep_workdir))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(saved, indent=2) + "\n")
    clock.context = ""
    info = saved["machine"]
    print(
        f"\n{label} ({saved['commit']}), {info['nproc']} cores, {info['memory_gib']} GiB, "
        f"{info['date']}; ! = misses the target\n"
    )
    print(table(saved["runs"]))
    print(breakdowns(saved["runs"]))
    print(bytes_per_node(saved["runs"]))
    failed = [run for run in saved["runs"] if run.get("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
