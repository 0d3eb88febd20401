"""Command line: start the local cluster (and Flux) and keep it up until Ctrl-C.

    python -m tests.harness up [--flux] [--real-node] [--nodes FILE ...] [--workdir DIR]
    python -m tests.harness demo [--exit-when-ready] [--klm]  (`make demo`, `make demo-klm`)
    python -m tests.harness docs-capture                      (`make docs-capture`)
    python -m tests.harness clean-host                        (undo what dead real nodes left)
    python -m tests.harness dashboard --kubeconfig FILE [--port N]    (make dashboard)

Run from the repository root. Without --nodes the demo fleet
(tests/harness/fleets/demo.yaml) is created; ``--nodes`` with no file starts
a cluster without nodes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import cli
from .binaries import binary
from .cluster import LocalCluster
from .flux import FluxStack
from .nodes import DEMO_FLEET
from .realnode import ROLE_LABEL, RealNode


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
    board = commands.add_parser(
        "dashboard", help="Kyma dashboard (Busola) for a cluster's kubeconfig (make dashboard)"
    )
    board.add_argument("--kubeconfig", type=Path, required=True, help="the cluster to show")
    board.add_argument("--port", type=int, default=3001, help="where it listens (127.0.0.1)")
    commands.add_parser(
        "docs-capture",
        help="run the demo, capture what the docs show into docs/captured/ and the docs",
    )
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


@dataclass
class _Up:
    """What `up` started, so that whatever started is stopped again."""

    cluster: LocalCluster
    flux: FluxStack | None = None
    node: RealNode | None = None

    def check_alive(self) -> None:
        self.cluster.check_alive()
        if self.flux is not None:
            self.flux.check_alive()

    def stop(self) -> None:
        if self.node is not None:
            self.node.stop()
        if self.flux is not None:
            self.flux.stop()
        self.cluster.stop()


def up(
    flux: bool,
    nodes: Sequence[Path] | None,
    workdir: Path | None,
    charts: Path | None,
    real_node: bool = False,
) -> int:
    progress = cli.ProgressPrinter()
    node_files = [DEMO_FLEET] if nodes is None else list(nodes)
    started = _Up(LocalCluster(workdir, node_files=node_files, progress=progress))

    def start() -> None:
        cluster = started.cluster.start()
        if flux:
            started.flux = FluxStack(cluster, charts_dir=charts, progress=progress).start()
        if real_node:
            node = RealNode(cluster, {ROLE_LABEL: "true"}, "default", progress=progress)
            started.node = node.start()
        _print_ready(cluster, started.flux, started.node)

    return cli.run(start, started.stop, watch=started.check_alive)


def dashboard(kubeconfig: Path, port: int) -> int:
    """Kyma dashboard for ``kubeconfig`` on 127.0.0.1:``port`` until Ctrl-C (a temp folder),
    with the Gpu's extension applied as the module ships it (the demo installs only the CRD)."""
    from .dashboard import EXTENSION, Dashboard

    folder = Path(tempfile.mkdtemp(prefix="kyma-gpu-dashboard-"))
    board = Dashboard(kubeconfig.resolve(), folder / "run", folder / "dashboard.log", port=port)

    def start() -> None:
        subprocess.run([str(binary("kubectl")), f"--kubeconfig={kubeconfig}", "apply",
                        "--server-side", "--field-manager=kyma-gpu-dashboard", "-k",
                        str(EXTENSION)], check=True)  # fmt: skip
        board.start()
        print(f"Kyma dashboard: open {board.login_url}")
        print(f"  the Gpu: {board.cluster_url('gpus/gpu')} (in the navigation: Kyma > GPU)")
        print(f"  log: {board.log_path}")

    def watch() -> None:
        if board.process is not None:
            board.process.check_alive()

    def stop() -> None:
        board.stop()
        shutil.rmtree(folder, ignore_errors=True)

    return cli.run(start, stop, watch=watch)


def _clean_host() -> int:
    from .host import sweep_all

    swept = sweep_all()
    print(f"swept {len(swept)} free real-node slot(s); host state restored unless one is held")
    return 0


def _demo(klm: bool, exit_when_ready: bool) -> int:
    if klm:
        from .demo_klm import run_klm_demo

        return run_klm_demo(exit_when_ready=exit_when_ready)
    from .demo import run_demo

    return run_demo(exit_when_ready=exit_when_ready)


def _docs_capture() -> int:
    from .docs_capture import capture

    return capture()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        return up(args.flux, args.nodes, args.workdir, args.charts, args.real_node)
    if args.command == "dashboard":
        return dashboard(args.kubeconfig, args.port)
    if args.command == "demo":
        return _demo(args.klm, args.exit_when_ready)
    commands = {"clean-host": _clean_host, "docs-capture": _docs_capture}
    run = commands.get(args.command)
    return run() if run is not None else 2


if __name__ == "__main__":
    sys.exit(main())
