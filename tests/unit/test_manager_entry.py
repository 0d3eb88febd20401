"""The manager's own entry point (kyma_gpu/main.py): kyma-gpu-manager, `python -m kyma_gpu`,
and the developer's alias `kyma-gpu run` take the same flags and refuse the same way."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys

from kyma_gpu import __version__
from kyma_gpu.main import main, parser
from kyma_gpu_tools.cli import main as cli_main
from kyma_gpu_tools.cli import parser as cli_parser


def _flags(top: argparse.ArgumentParser) -> set[str]:
    return {o for a in top._actions for o in a.option_strings} - {"-h", "--help", "--version"}


def _run_parser() -> argparse.ArgumentParser:
    (commands,) = [a for a in cli_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    run: argparse.ArgumentParser = commands.choices["run"]
    return run


def test_kyma_gpu_run_takes_the_managers_flags() -> None:
    run = _run_parser()
    assert _flags(run) == _flags(parser())
    assert _flags(parser()) == {"--liveness", "--leader-election", "--standalone",
                                "--metrics-address"}  # fmt: skip


def test_a_bad_metrics_address_is_refused_before_anything_starts() -> None:
    err = io.StringIO()
    assert main(["--standalone", "--metrics-address", "8081"], stderr=err) == 2
    assert err.getvalue() == "kyma-gpu-manager: error: --metrics-address: not HOST:PORT: '8081'\n"
    err = io.StringIO()
    assert cli_main(["run", "--standalone", "--metrics-address", "8081"], stderr=err) == 2
    assert err.getvalue() == "kyma-gpu run: error: --metrics-address: not HOST:PORT: '8081'\n"


def test_python_dash_m_kyma_gpu_is_the_manager() -> None:
    done = subprocess.run([sys.executable, "-m", "kyma_gpu", "--version"], capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    assert done.stdout == f"kyma-gpu-manager {__version__}\n"
