"""`make demo` works: the newcomer's first command, run to the point where the Gpu is Ready."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.module import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def test_demo_reaches_ready_and_stops_cleanly() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.harness", "demo", "--exit-when-ready"],
        cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    assert "Gpu state Ready: the GPU stack is installed and ready" in output
    assert "NAME          REVISION  SUSPENDED  READY  MESSAGE" in output
    assert "gpu-operator  v26.7.0   False      True   Helm install succeeded" in output
    assert "export KUBECONFIG=" in output
    assert output.rstrip().endswith("stopped.")
