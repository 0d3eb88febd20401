"""`kyma-gpu-manager` (also `python -m kyma_gpu`): the manager process, as the Deployment and
the image start it.

kyma-gpu-manager [--liveness URL] [--leader-election | --standalone] [--metrics-address HOST:PORT]

Exit code 0: stopped; 2: bad input (a flag, or broken rule data), one line on stderr. The
release tooling's `kyma-gpu run` is the same command under the developer's CLI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from kyma_gpu import __version__
from kyma_gpu.handlers import run
from kyma_gpu.metrics import parse_address

PROG = "kyma-gpu-manager"
EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The manager's flags (kyma-gpu-manager, and `kyma-gpu run`)."""
    parser.add_argument(
        "--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz"
    )
    parser.add_argument(
        "--leader-election",
        action="store_true",
        help="hold the Lease kyma-system/kyma-gpu-manager to write (several replicas)",
    )
    parser.add_argument(
        "--standalone", action="store_true", help="no leader election (one replica)"
    )
    parser.add_argument(
        "--metrics-address",
        default=None,
        help="serve /metrics and the readiness probe /readyz on HOST:PORT, e.g. 0.0.0.0:8081",
    )


def flag_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags, before anything starts; None: nothing."""
    if args.metrics_address:
        try:
            parse_address(args.metrics_address)
        except ValueError as err:
            return f"--metrics-address: {err}"
    return None


def start(args: argparse.Namespace) -> None:
    """Run the manager with checked flags until it is stopped."""
    run(liveness=args.liveness, leader_election=args.leader_election and not args.standalone,
        metrics_address=args.metrics_address)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="Run the Kyma GPU manager (kopf) until stopped. Exit code 0: stopped; "
        "2: bad input (a flag, or broken rule data).",
    )
    top.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    add_arguments(top)
    return top


def main(argv: Sequence[str] | None = None, stderr: TextIO = sys.stderr) -> int:
    args = parser().parse_args(argv)
    problem = flag_error(args)
    if problem is not None:
        stderr.write(f"{PROG}: error: {problem}\n")
        return EXIT_BAD_INPUT
    start(args)
    return 0
