"""What a Node heartbeat costs the manager's read path, reader by reader.

A local cluster (tests/harness) with `--nodes` Nodes of the scale fleet; Node status heartbeats
at `--rate` per second, as kubelets send them; in a child process one reader watches the Nodes
for `--seconds` and reports its CPU (utime + stime, the process's own). Readers:

- `stream`: urllib3's chunked stream read and split as the adapter did before 2026-12-04;
- `adapter`: KubeAdapter.watch, each event as it comes (coalesce 0: every watch but the Nodes');
- `coalesced`: KubeAdapter.watch as the manager watches Nodes (observe.watches.NODE_COALESCE);
- `coalesced+facts`: the same, and each Node folded into its compact facts, as the informer
  does.

Prints one table: events read, CPU seconds (user, system), % of a core, microseconds per
event. Imports and the connection are made before the measured window.

    .venv/bin/python benchmarks/watch_read.py --nodes 1000 --rate 70 --seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

READERS = ("stream", "adapter", "coalesced", "coalesced+facts")


def _stream_lines(response: Any) -> Iterator[bytes]:
    """The adapter's read before: urllib3's chunked stream, split at newlines."""
    pending = b""
    for chunk in response.stream(64 * 1024, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())


def _events(reader: str, kubeconfig: str, rv: str, seconds: int) -> Iterator[dict[str, Any]]:
    os.environ["KUBECONFIG"] = kubeconfig
    from kyma_gpu.adapter import NODE_JSON, KubeAdapter, ListQuery
    from kyma_gpu.observe.watches import NODE_COALESCE

    adapter = KubeAdapter.connect("watch-read-bench")
    coalesce = float(os.environ.get("WATCH_READ_COALESCE") or NODE_COALESCE)
    coalesce = coalesce if reader.startswith("coalesced") else 0.0
    query = ListQuery("/api/v1/nodes", parser=NODE_JSON, coalesce=coalesce)
    if reader != "stream":
        yield from adapter.watch(query, rv, seconds)
        return
    params = [("watch", "true"), ("resourceVersion", rv), ("allowWatchBookmarks", "true"),
              ("timeoutSeconds", str(seconds))]  # fmt: skip
    response = adapter._request("watch", "GET", query.path, query=params,
                                timeout=(10, seconds + 30))  # fmt: skip
    for line in _stream_lines(response):
        yield NODE_JSON.page(line)  # the standard library, as before orjson


def child(reader: str, kubeconfig: str, rv: str, seconds: int) -> None:
    """Watch for `seconds` and print {"events", "cpu"} as JSON."""
    os.environ["KUBECONFIG"] = kubeconfig  # read when kubernetes.config is imported
    import kyma_gpu.adapter  # noqa: F401  (imports outside the measured window)
    from kyma_gpu.facts.node import node_facts
    from kyma_gpu.rules.catalog import Catalog

    registry = Catalog(None).machine_types
    fold: Callable[[dict[str, Any]], object] = (
        (lambda obj: node_facts(obj, registry)) if reader.endswith("+facts") else (lambda _: None)
    )
    profile = None
    if os.environ.get("WATCH_READ_PROFILE"):
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    before = resource.getrusage(resource.RUSAGE_SELF)
    events = 0
    for event in _events(reader, kubeconfig, rv, seconds):
        if event.get("type") in ("ADDED", "MODIFIED"):
            fold(event["object"])
            events += 1
    if profile is not None:
        import pstats

        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    after = resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    print(json.dumps({"events": events, "cpu": user + system, "user": user, "system": system}))


def measure(
    reader: str, cluster: Any, rest: Any, names: Sequence[str], args: Any
) -> dict[str, Any]:
    from benchmarks.scale.process import Heartbeats

    rv = rest.get("/api/v1/nodes?limit=1")["metadata"]["resourceVersion"]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", reader, str(cluster.kubeconfig), rv,
         str(args.seconds)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.0)  # the child's imports and its watch request, before the first beat
    beats = Heartbeats(rest, names, args.rate)
    sender = threading.Thread(target=beats.run, args=(args.seconds - 2,))
    sender.start()
    out, _ = proc.communicate(timeout=args.seconds + 60)
    sender.join()
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["reader"] = reader
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=70.0)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--child", nargs=4, metavar=("READER", "KUBECONFIG", "RV", "SECONDS"))
    args = parser.parse_args(argv)
    if args.child:
        reader, kubeconfig, rv, seconds = args.child
        child(reader, kubeconfig, rv, int(seconds))
        return 0
    from benchmarks.scale.common import Rest
    from benchmarks.scale.fleet import create_nodes, scale_node
    from tests.harness.cluster import LocalCluster

    with LocalCluster(progress=lambda m: print(m, file=sys.stderr)) as cluster:
        rest = Rest(cluster)
        create_nodes(rest, lambda i: scale_node(i, gpu=i % 10 == 0), args.nodes, workers=8,
                     progress=lambda m: print(m, file=sys.stderr))  # fmt: skip
        names = [scale_node(i, gpu=i % 10 == 0)["metadata"]["name"] for i in range(args.nodes)]
        rows = [measure(r, cluster, rest, names, args) for r in args.readers.split(",")]
    print(f"{args.nodes} Nodes, {args.rate:g} heartbeats/s for {args.seconds} s, "
          f"python {sys.version.split()[0]}")  # fmt: skip
    print(f"| {'reader':<16} | {'events':>6} | {'CPU s (user + sys)':>18} | {'% core':>6} "
          f"| {'us/event':>8} |")  # fmt: skip
    print(f"|{'-' * 18}|{'-' * 7}:|{'-' * 19}:|{'-' * 7}:|{'-' * 9}:|")
    for row in rows:
        per = 1e6 * row["cpu"] / max(row["events"], 1)
        split = f"{row['cpu']:.2f} ({row['user']:.2f} + {row['system']:.2f})"
        print(f"| {row['reader']:<16} | {row['events']:>6} | {split:>18} | "
              f"{100 * row['cpu'] / args.seconds:>6.2f} | {per:>8.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
