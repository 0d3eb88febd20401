"""How long `kyma-gpu plan --nodes FILE` takes, and how much memory, on a big node list and on
a file that is no node list: prints a Markdown table, asserts nothing.

    .venv/bin/python benchmarks/bench_cli.py [--nodes 5000,20000] [--tree DIR] [--keep DIR]

The node list is the scale benchmark's fleet (benchmarks/scale/fleet.py: Gardener-AWS-shaped
Nodes, 10 % GPU nodes) with 4 of their 40 status.images (--images; about 4.5 kB of YAML per
Node), written as `kubectl get nodes -o yaml` and `-o json` would. The two garbage files are
what a wrong path can hand the CLI: 300 MB of random bytes (a binary) and 300 MB of base64
text (no YAML structure at all; --garbage-mb).

Each row is one whole command (read, parse, fold, plan, print to /dev/null) in a child process:
its wall time, its CPU time (user + system) and its peak RSS (the kernel's ru_maxrss of that
child, from wait4). `--tree`
runs another checkout's CLI (its `operator/` and `values-rules/`, e.g. one unpacked with `git
archive`), to measure before and after on the same files; `--keep` keeps the generated files
in a directory and reuses them on the next run.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.scale.fleet import is_gpu_index, scale_node  # noqa: E402

MB = 1_000_000


def node_list(count: int, images: int) -> Iterator[dict[str, object]]:
    """`images`: status.images entries kept per Node (the fleet has 40, 8.6 kB of its 12)."""
    for i in range(count):
        body = scale_node(i, is_gpu_index(i, 0.1))
        body["status"]["images"] = body["status"]["images"][:images]
        yield body


def write_lists(directory: Path, count: int, images: int) -> tuple[Path, Path]:
    """nodes-<count>.yaml and .json as kubectl writes them (kept if there already)."""
    as_yaml, as_json = directory / f"nodes-{count}.yaml", directory / f"nodes-{count}.json"
    if as_yaml.is_file() and as_json.is_file():
        return as_yaml, as_json
    items = list(node_list(count, images))
    data = {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
    as_yaml.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    as_json.write_text(json.dumps(data, indent=4), encoding="utf-8")
    return as_yaml, as_json


def write_garbage(directory: Path, megabytes: int) -> tuple[Path, Path]:
    """garbage-<n>.bin (random bytes) and garbage-<n>.txt (base64 lines of them)."""
    binary, text = directory / f"garbage-{megabytes}.bin", directory / f"garbage-{megabytes}.txt"
    if not binary.is_file():
        with binary.open("wb") as out:
            for _ in range(megabytes):
                out.write(os.urandom(MB))
    if not text.is_file():
        with text.open("wb") as out:
            for _ in range(megabytes):
                out.write(base64.encodebytes(os.urandom(MB * 3 // 4)))
    return binary, text


def timed(tree: Path, path: Path, extra: tuple[str, ...]) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak RSS MiB, exit code) of one `kyma-gpu plan --nodes
    path` in a child. CPU (user + system) is the fairer figure on a busy machine."""
    command = [sys.executable, "-m", "kyma_gpu_tools.cli", "plan", "--nodes", str(path), *extra]
    env = {**os.environ, "PYTHONPATH": str(tree / "operator")}
    start = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        child = subprocess.Popen(command, env=env, stdout=sink, stderr=sink, cwd=tree)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    cpu = usage.ru_utime + usage.ru_stime
    return seconds, cpu, usage.ru_maxrss / 1024, child.returncode


def row(what: str, size: int, tree: Path, path: Path, extra: tuple[str, ...]) -> str:
    seconds, cpu, peak, code = timed(tree, path, extra)
    return f"| {what} | {size / MB:.1f} | {seconds:.1f} | {cpu:.1f} | {peak:.0f} | {code} |"


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--nodes", default="5000,20000", help="comma-separated list sizes")
    args.add_argument("--images", type=int, default=4, help="status.images per Node (default 4)")
    args.add_argument("--garbage-mb", type=int, default=300, help="garbage file size; 0: none")
    args.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose CLI runs")
    args.add_argument("--keep", type=Path, help="keep the generated files here, reuse them")
    args.add_argument("--args", default="", help="more arguments for `kyma-gpu plan`")
    parsed = args.parse_args()
    directory = parsed.keep or Path(os.environ.get("TMPDIR", "/tmp")) / "kyma-gpu-bench-cli"
    directory.mkdir(parents=True, exist_ok=True)
    extra = tuple(parsed.args.split())
    print(f"`kyma-gpu plan --nodes FILE {parsed.args}` of {parsed.tree}".replace("  ", " "))
    print()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start")
    print()
    print("| file | MB | wall s | CPU s | peak RSS MiB | exit code |")
    print("|---|--:|--:|--:|--:|--:|")
    for count in (int(n) for n in parsed.nodes.split(",") if n):
        as_yaml, as_json = write_lists(directory, count, parsed.images)
        for kind, path in (("YAML", as_yaml), ("JSON", as_json)):
            what = f"{count:,} nodes, {kind}"
            print(row(what, path.stat().st_size, parsed.tree, path, extra), flush=True)
    if parsed.garbage_mb:
        binary, text = write_garbage(directory, parsed.garbage_mb)
        for what, path in (("random bytes", binary), ("base64 text", text)):
            print(row(what, path.stat().st_size, parsed.tree, path, extra), flush=True)
    if parsed.keep is None:
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


if __name__ == "__main__":
    main()
