"""kopf 1.45 for the fleet, measured beside the module's informer (issue 50, point 2).

    .venv/bin/python benchmarks/bench_kopf_fleet.py [--nodes 1000,5000,20000]
        [--observers informer,kopf,kopf-stream] [--json benchmarks/results/kopf-fleet.json]
    .venv/bin/python benchmarks/bench_kopf_fleet.py --compare a.json b.json

Per size: a fresh local cluster (tests/harness), the scale fleet of Gardener-shaped Nodes
(benchmarks/scale: about 12 kB of JSON each, a tenth GPU nodes in pools of 10) and the Gpu
``gpu``; no pods (neither observer reads them). Then, one after the other against that cluster,
observer processes that keep the same compact facts of every Node (benchmarks/kopf_fleet):

- ``informer``: the module's Informer with node_watch and gpu_watch, as the manager starts them;
- ``kopf``: kopf 1.45.2, ``@kopf.index('nodes')`` of the same facts, the initial LIST in chunks of
  250, a field selector on the Gpu, bookmarks; its Gpu handler is the reconcile;
- ``kopf-stream``: the same with kopf's streaming list (``sendInitialEvents``) instead of a LIST.

Each is measured from outside: start to every Node indexed (its ``ready`` report: for kopf the
first call of a handler, which kopf makes only once every index is complete), its CPU seconds
until then, peak and settled RSS, CPU without heartbeats and at 70 Node heartbeats a second
(% of one core, utime + stime of the process; and the CPU per heartbeat times 70/s, for a
machine too busy to reach the rate), API writes (audit log). Bytes per Node: the settled RSS
beyond the observer's smallest size, per Node more (as the manager's are measured);
--add-nodes N adds N Nodes while each observer runs instead. A start that takes longer than
--start-timeout (15 min) is a ``timeout``, with the Nodes indexed by then. The machine's load
and how busy its cores were stand in the table: the wall times depend on them, the CPU seconds
much less. Prints one table (rows: metrics, columns: size x observer); --json saves the raw
numbers and each start's progress.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from benchmarks.bench_scale import Check, Clock, at_most, below, commit_of, machine, show  # noqa: E402
from benchmarks.kopf_fleet.measure import OBSERVERS, FleetRun, measure_observer  # noqa: E402
from benchmarks.scale import Rest, ScaleConfig, build_fleet  # noqa: E402
from tests.harness.cluster import LocalCluster  # noqa: E402

ROWS: tuple[tuple[str, str, str, Check], ...] = (
    ("start_s", "start -> all Nodes indexed (s)", "< 10", below(10)),
    ("start_cpu_s", "its CPU until then (s)", "", None),
    ("list_cpu_s", "of which after its imports: list and index (s)", "", None),
    ("imports_s", "start -> imports done (s)", "", None),
    ("ready_nodes", "Nodes in its facts then", "", None),
    ("indexed_at_timeout", "Nodes indexed when the start timed out", "", None),
    ("start_load", "machine: load (1 min) at the end of the start", "", None),
    ("start_busy_pct", "machine: cores busy during the start (%)", "", None),
    ("start_peak_rss_mib", "peak RSS (MiB)", "", None),
    ("start_settled_rss_mib", "settled RSS (MiB)", "< 150", below(150)),
    ("baseline_cpu_pct", "CPU without heartbeats (% of a core)", "", None),
    ("heartbeat_rate", "Node heartbeats sent (/s)", "70", None),
    ("heartbeat_cpu_pct", "CPU at heartbeats (% of a core)", "<= 1.5", at_most(1.5)),
    ("heartbeat_caused_cpu_pct", "of which the heartbeats' (% of a core)", "<= 1.5", at_most(1.5)),
    ("heartbeat_us", "CPU per heartbeat (us)", "", None),
    (
        "heartbeat_at_rate_pct",
        "CPU per heartbeat x the rate asked (% of a core)",
        "<= 1.5",
        at_most(1.5),
    ),
    ("heartbeat_after_cpu_s", "CPU after the window until idle (s)", "", None),
    ("heartbeat_load", "machine: load (1 min) at the heartbeats' end", "", None),
    ("heartbeat_busy_pct", "machine: cores busy during the heartbeats (%)", "", None),
    (
        "slope_bytes_per_node",
        "settled RSS per Node beyond the smallest size (B)",
        "<= 600",
        at_most(600),
    ),
    ("added_nodes", "Nodes added while it ran", "", None),
    ("added_bytes_per_node", "RSS growth per Node added while it ran (B)", "<= 600", at_most(600)),
    ("writes", "API writes, its whole run", "0", at_most(0)),
)


def table(results: Sequence[dict[str, Any]]) -> str:
    """Rows: the metrics; columns: every size x observer, then the target (the manager's
    budget at 20,000 Nodes)."""
    slope = slopes(results)
    columns = [
        (r["nodes"], name, o["metrics"] | {"slope_bytes_per_node": slope.get((r["nodes"], name))})
        for r in results
        for name, o in r["observers"].items()
    ]
    rows = [["metric", *(f"{name} {nodes}" for nodes, name, _ in columns), "target"]]
    for key, title, target, check in ROWS:
        cells = [show(metrics.get(key), check) for _, _, metrics in columns]
        if any(cell != "-" for cell in cells):
            rows.append([title, *cells, target])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]

    def line(row: Sequence[str]) -> str:
        cells = [
            row[0].ljust(widths[0]),
            *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)),
        ]
        return "| " + " | ".join(cells) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(rows[0]), rule, *(line(row) for row in rows[1:])])


def slopes(results: Sequence[dict[str, Any]]) -> dict[tuple[int, str], float]:
    """Per observer and size: settled RSS more than at the observer's smallest size, per Node
    more (bytes): how the manager's bytes per Node are measured (docs/performance.md)."""
    settled = {
        (int(r["nodes"]), name): o["metrics"].get("start_settled_rss_mib")
        for r in results
        for name, o in r["observers"].items()
    }
    done = {key: rss for key, rss in settled.items() if isinstance(rss, int | float)}
    out: dict[tuple[int, str], float] = {}
    for (nodes, name), rss in done.items():
        smallest = min(n for n, other in done if other == name)
        if nodes > smallest:
            out[nodes, name] = round((rss - done[smallest, name]) * 1048576 / (nodes - smallest))
    return out


def errors(results: Sequence[dict[str, Any]]) -> str:
    return "\n".join(
        f"error, {name} {r['nodes']}: {o['metrics']['error']}"
        for r in results
        for name, o in r["observers"].items()
        if o["metrics"].get("error")
    ) + "".join(f"\nerror, {r['nodes']}: {r['error']}" for r in results if r.get("error"))


def run_size(nodes: int, args: argparse.Namespace, clock: Clock) -> dict[str, Any]:
    """A fresh cluster with the fleet, each observer in turn; the cluster is always stopped."""
    clock.context = f"{nodes} | "
    result: dict[str, Any] = {"nodes": nodes, "observers": {}, "setup": {}}
    cluster = LocalCluster(progress=clock, keep_workdir=args.keep_workdir)
    try:
        cluster.start()
        rest = Rest(cluster)
        fleet = build_fleet(cluster, rest, ScaleConfig(nodes=nodes, pods_per_node=0), clock)
        result["setup"] = fleet.setup
        run = FleetRun(
            nodes=nodes, start_timeout=args.start_timeout, baseline_seconds=args.baseline_seconds,
            heartbeat_rate=args.heartbeat_rate, heartbeat_seconds=args.heartbeat_seconds,
            add_nodes=args.add_nodes,
        )  # fmt: skip
        for name in args.observers.split(","):
            clock.context = f"{nodes} {name} | "
            metrics, details = measure_observer(
                cluster, rest, run, OBSERVERS[name], fleet.nodes, clock
            )
            result["observers"][name] = {"metrics": metrics, "details": details}
            if args.json:
                save(args, result)
    except Exception as error:  # report it, go on with the next size
        clock(f"failed: {error!r}")
        result["error"] = repr(error)
    finally:
        clock.context = f"{nodes} | "
        clock("stopping the cluster")
        cluster.stop()
    return result


SAVED: dict[str, Any] = {}


def save(args: argparse.Namespace, result: dict[str, Any] | None = None) -> None:
    if result is not None and result not in SAVED["runs"]:
        SAVED["runs"].append(result)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(SAVED, indent=2) + "\n")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("--nodes", default="1000,5000,20000", help="comma-separated fleet sizes")
    add("--observers", default=",".join(OBSERVERS), help=f"of {', '.join(OBSERVERS)}")
    add("--start-timeout", type=float, default=900.0, help="start -> ready at most (s, 900)")
    add("--heartbeat-rate", type=float, default=70.0, help="Node heartbeats a second (70)")
    add("--heartbeat-seconds", type=float, default=60.0, help="the heartbeat window (s, 60)")
    add("--baseline-seconds", type=float, default=30.0, help="the window without (s, 30; 0: none)")
    add(
        "--add-nodes",
        type=int,
        default=0,
        help="Nodes to add while each observer runs, its RSS growth per Node (0: none)",
    )
    add("--json", type=Path, default=None, help="save the raw results here")
    add("--keep-workdir", action="store_true", help="keep each cluster's workdir and logs")
    add("--compare", nargs="+", type=Path, default=None, help="print saved results side by side")
    args = parser.parse_args(argv)
    unknown = set(args.observers.split(",")) - set(OBSERVERS)
    if unknown:
        parser.error(f"unknown observers: {', '.join(sorted(unknown))}")
    return args


def report(results: Sequence[dict[str, Any]]) -> None:
    print(table(results))
    if errors(results).strip():
        print(errors(results).strip())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare:
        results = []
        for path in args.compare:
            saved = json.loads(path.read_text())
            info = saved.get("machine", {})
            print(f"{path}: {saved.get('commit')}, {info.get('date')}, {info.get('nproc')} cores")
            results.extend(saved["runs"])
        report(results)
        return 0
    SAVED.update(
        commit=commit_of(ROOT),
        machine=machine(),
        runs=[],
        args=vars(args) | {"json": str(args.json)},
    )
    clock = Clock()
    sizes = [int(size) for size in args.nodes.split(",") if size.strip()]
    clock(f"kopf 1.45 beside the informer at {sizes} Nodes: {args.observers}")
    for nodes in sizes:
        result = run_size(nodes, args, clock)
        if args.json:
            save(args, result)
        else:
            SAVED["runs"].append(result)
    info = SAVED["machine"]
    clock.context = ""
    print(f"\n{SAVED['commit']}, {info['nproc']} cores, {info['memory_gib']} GiB, {info['date']};"
          " ! = misses the budget\n")  # fmt: skip
    report(SAVED["runs"])
    failed = [r for r in SAVED["runs"] if r.get("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
