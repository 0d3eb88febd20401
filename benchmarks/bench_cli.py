"""How long `kyma-gpu plan --nodes FILE` takes on a big node list: prints a table, asserts
nothing.

    .venv/bin/python benchmarks/bench_cli.py [--nodes 1000,5000,20000]

The node list is the scale benchmark's fleet (benchmarks/scale/fleet.py: Gardener-AWS-shaped
Nodes, 10 % GPU nodes) with 4 of their 40 status.images (--images; about 4.5 kB of YAML per
Node, near the 1,500-node list of 5 MB in issue 34), written as `kubectl get nodes -o yaml`
and `-o json` would. Per size: the file's size, then the wall time and peak memory of the whole
command (read, parse, fold, plan, print) in a child process, for YAML with libyaml's loader
(what the CLI uses), YAML with PyYAML's pure-Python loader (what it used before; up to 5,000
nodes), and JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.scale.fleet import is_gpu_index, scale_node  # noqa: E402

CHILD = """
import os, resource, sys, yaml
from kyma_gpu import cli
if sys.argv[1] == "pure":
    cli._LOADER = yaml.SafeLoader
with open(os.devnull, "w") as out:
    code = cli.main(["plan", "--nodes", sys.argv[2]], stdout=out)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


PURE_UP_TO = 5000
"""PyYAML's pure-Python loader is run up to this size (at 20,000 nodes it takes minutes)."""


def node_list(count: int, images: int) -> dict[str, object]:
    """`images`: status.images entries kept per Node (the fleet has 40, 8.6 kB of its 12)."""
    items = []
    for i in range(count):
        body = scale_node(i, is_gpu_index(i, 0.1))
        body["status"]["images"] = body["status"]["images"][:images]
        items.append(body)
    return {"apiVersion": "v1", "kind": "List", "items": items}


def timed(loader: str, path: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS MiB, exit code) of one `plan --nodes` in a child process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, loader, str(path)], check=False,
                          capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "operator")})  # fmt: skip
    seconds = time.perf_counter() - start
    lines = done.stderr.strip().splitlines()
    peak = int(lines[-1]) / 1024 if lines and lines[-1].isdigit() else float("nan")
    return seconds, peak, done.returncode


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--nodes", default="1000,5000,20000", help="comma-separated list sizes")
    args.add_argument("--images", type=int, default=4, help="status.images per Node (default 4)")
    parsed = args.parse_args()
    sizes = [int(n) for n in parsed.nodes.split(",")]
    print("| nodes | YAML MB | YAML, libyaml (s / MiB) | YAML, pure Python (s / MiB) | "
          "JSON MB | JSON (s / MiB) |")  # fmt: skip
    print("|--:|--:|--:|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as tmp:
        for count in sizes:
            data = node_list(count, parsed.images)
            as_yaml, as_json = Path(tmp) / "nodes.yaml", Path(tmp) / "nodes.json"
            as_yaml.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
            as_json.write_text(json.dumps(data, indent=4), encoding="utf-8")
            cells = [f"{count:,}", f"{as_yaml.stat().st_size / 1e6:.1f}"]
            for loader, path in (("c", as_yaml), ("pure", as_yaml)):
                if loader == "pure" and count > PURE_UP_TO:
                    cells.append("(not run)")
                    continue
                seconds, peak, code = timed(loader, path)
                cells.append(f"{seconds:.1f} / {peak:.0f}" + ("" if code in (0, 1) else " !"))
            cells.append(f"{as_json.stat().st_size / 1e6:.1f}")
            seconds, peak, code = timed("c", as_json)
            cells.append(f"{seconds:.1f} / {peak:.0f}" + ("" if code in (0, 1) else " !"))
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
