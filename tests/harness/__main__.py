"""Command line: start the local cluster (and Flux) and keep it up until Ctrl-C.

    python -m tests.harness up [--flux] [--real-node] [--nodes FILE ...] [--workdir DIR]
    python -m tests.harness demo [--exit-when-ready]     (what `make demo` runs)
    python -m tests.harness clean-host                   (undo what dead real nodes left)

Run from the repository root. Without --nodes the demo fleet
(tests/harness/fleets/demo.yaml) is created; ``--nodes`` with no file starts
a cluster without nodes.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from .binaries import MissingBinaryError
from .cluster import LocalCluster
from .flux import FluxStack
from .nodes import DEMO_FLEET
from .realnode import ROLE_LABEL, RealNode


class ProgressPrinter:
    """Progress lines with the seconds since start."""

    def __init__(self, began: float) -> None:
        self.began = began

    def __call__(self, message: str) -> None:
        print(f"[{time.monotonic() - self.began:6.1f}s] {message}", flush=True)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness",
        description="Local Kubernetes control plane with kwok nodes and Flux, for tests and demos.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start everything and wait for Ctrl-C")
    up.add_argument("--flux", action="store_true", help="also start Flux and the Helm repository")
    up.add_argument(
        "--nodes",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="Node YAML files (`kubectl get nodes -o yaml` format); default: the demo fleet",
    )
    up.add_argument(
        "--workdir",
        type=Path,
        help="keep PKI, etcd data, logs and kubeconfig here (kept after exit); default: temp dir",
    )
    up.add_argument(
        "--charts", type=Path, help="chart directory to serve (default ../shared/charts)"
    )
    up.add_argument(
        "--real-node", action="store_true",
        help="also a real node (kubelet + containerd, as root) for the pods of namespace "
        "default labelled kyma-gpu.test/real-node=true",
    )  # fmt: skip
    demo = commands.add_parser("demo", help="cluster + Flux + operator + sample Gpu (make demo)")
    demo.add_argument(
        "--exit-when-ready", action="store_true", help="stop once the Gpu is Ready (for tests)"
    )
    demo.add_argument(
        "--klm", action="store_true",
        help="deliver the module as Kyma does: a release in a local registry, installed by KLM",
    )  # fmt: skip
    commands.add_parser(
        "clean-host",
        help="undo what real nodes of dead test runs left on this host (tests/harness/host.py)",
    )
    return parser


def _print_ready(cluster: LocalCluster, stack: FluxStack | None, node: RealNode | None) -> None:
    print()
    print(f"kubeconfig: {cluster.kubeconfig}")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    if stack is not None:
        print(f"Helm repository: {stack.helm_repo_url}  charts: {stack.helm_repo.charts()}")
    if node is not None:
        print(f"real node: {node.name} (slot {node.slot.index}); pods of namespace default "
              f"labelled {ROLE_LABEL}=true run there")  # fmt: skip
    print(f"logs: {cluster.log_dir}")
    rss = cluster.rss_kib()
    print(
        "memory (RSS MiB): "
        + ", ".join(f"{name} {kib / 1024:.0f}" for name, kib in rss.items())
        + f"; total {sum(rss.values()) / 1024:.0f}"
    )


def up(
    flux: bool,
    nodes: Sequence[Path] | None,
    workdir: Path | None,
    charts: Path | None,
    real_node: bool = False,
) -> int:
    began = time.monotonic()
    progress = ProgressPrinter(began)
    node_files = [DEMO_FLEET] if nodes is None else list(nodes)
    cluster = LocalCluster(workdir, node_files=node_files, progress=progress)
    stack: FluxStack | None = None
    node: RealNode | None = None
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # Started from a non-interactive shell with `&`, Python inherits SIGINT
    # ignored; "Ctrl-C stops everything" should hold anyway.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cluster.start()
        if flux:
            stack = FluxStack(cluster, charts_dir=charts, progress=progress).start()
        if real_node:
            node = RealNode(cluster, {ROLE_LABEL: "true"}, "default", progress=progress).start()
        _print_ready(cluster, stack, node)
        print("Ctrl-C stops everything.", flush=True)
        while True:
            cluster.check_alive()
            if stack is not None:
                stack.check_alive()
            time.sleep(2)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    except MissingBinaryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut teardown
        if node is not None:
            node.stop()
        if stack is not None:
            stack.stop()
        cluster.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("stopped.", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        return up(args.flux, args.nodes, args.workdir, args.charts, args.real_node)
    if args.command == "clean-host":
        from .host import sweep_all

        swept = sweep_all()
        print(f"swept {len(swept)} free real-node slot(s); host state restored unless one is held")
        return 0
    if args.command == "demo" and args.klm:
        from .demo_klm import run_klm_demo

        return run_klm_demo(exit_when_ready=args.exit_when_ready)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(exit_when_ready=args.exit_when_ready)
    return 2


if __name__ == "__main__":
    sys.exit(main())
