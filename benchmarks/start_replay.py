"""The manager's own work at start, in-process: no cluster, no API server.

    .venv/bin/python benchmarks/start_replay.py [--nodes 20000] [--tree /path/to/other/checkout ...]

The scale fleet's Nodes (benchmarks/scale, status.images included, 250 to a LIST page) are
serialized once; then each tree parses the pages with its adapter's parser, folds every Node
into its facts and plans once, as its manager does before the first reconcile. Each tree runs
in its own process (its own imports), twice; the table gives the CPU of the second round.
`bench_scale.py`'s "start -> first reconcile" adds the API server's time to serve the pages,
which this leaves out: a slow start with the same CPU here is the API server's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = 250

CHILD = r"""
import gc, json, sys, time
tree, pages_file = sys.argv[1], sys.argv[2]
sys.path[:0] = [tree + "/operator"]
from kyma_gpu import adapter
from kyma_gpu.api.models import GpuSpec
from kyma_gpu.facts import cluster_facts, node_facts
from kyma_gpu.plan import Owner, make_plan
from kyma_gpu.rules.catalog import Catalog

parse = getattr(adapter, "NODE_JSON", None)
parse = parse.page if parse else (lambda data: adapter._loads(data, True))
with open(pages_file, "rb") as f:
    pages = f.read().split(b"\n")
catalog = Catalog()
rounds = []
for _ in range(2):
    began = time.process_time()
    facts = {}
    for raw in pages:
        gc.disable()
        for item in parse(raw)["items"]:
            facts[item["metadata"]["name"]] = node_facts(item, catalog.machine_types)
        gc.enable()
    folded = time.process_time()
    make_plan(GpuSpec(), cluster_facts(facts.values()), catalog, Owner(uid="replay"))
    rounds.append((folded - began, time.process_time() - folded))
print(json.dumps({"fold": rounds[-1][0], "plan": rounds[-1][1], "nodes": len(facts)}))
"""


def write_pages(nodes: int, out: Path) -> int:
    """The fleet as LIST pages, one JSON document per line; returns the bytes per Node."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.scale.fleet import gpu_pool, is_gpu_index, scale_node

    total = 0
    with out.open("wb") as f:
        for start in range(0, nodes, PAGE):
            items = []
            for i in range(start, min(nodes, start + PAGE)):
                gpu = is_gpu_index(i, 0.1)
                os_ = gpu_pool(i // 10 % 200, 200) if gpu else None
                items.append(scale_node(i, gpu, os=os_))
            data = json.dumps({"kind": "NodeList", "metadata": {}, "items": items}).encode()
            total += len(data)
            f.write(data if start == 0 else b"\n" + data)
    return total // nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20000)
    parser.add_argument(
        "--tree", action="append", default=[],
        help="another checkout to compare (repeatable); this one always runs",
    )  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kyma-gpu-start-replay-") as work:
        pages = Path(work) / "pages.jsonl"
        size = write_pages(args.nodes, pages)
        print(f"{args.nodes} Nodes, {size} bytes of JSON each, {PAGE} to a page")
        head = f"| {'tree':<40} | {'parse + fold (s)':>16} | {'first plan (s)':>14} |"
        print(f"{head} {'CPU (s)':>8} |")
        print(f"|{'-' * 42}|{'-' * 17}:|{'-' * 15}:|{'-' * 9}:|")
        for tree in [str(ROOT), *args.tree]:
            out = subprocess.run([sys.executable, "-c", CHILD, tree, str(pages)], check=True,
                                 capture_output=True, text=True).stdout  # fmt: skip
            got = json.loads(out.strip().splitlines()[-1])
            if got["nodes"] != args.nodes:
                raise SystemExit(f"{tree}: folded {got['nodes']} of {args.nodes} Nodes")
            total = got["fold"] + got["plan"]
            print(f"| {tree:<40} | {got['fold']:>16.2f} | {got['plan']:>14.2f} | {total:>8.2f} |")


if __name__ == "__main__":
    main()
