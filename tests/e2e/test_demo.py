"""`make demo` works: the newcomer's first command, run to the point where the Gpu is Ready."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.demo import flux_table
from tests.harness.module import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def _section(output: str, command: str) -> str:
    """What the demo printed below ``$ command``, up to the next blank line."""
    _, found, rest = output.partition(f"$ {command}\n")
    assert found, f"the demo did not run `{command}`:\n{output}"
    return rest.split("\n\n", 1)[0]


def test_demo_reaches_ready_and_stops_cleanly() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.harness", "demo", "--exit-when-ready"],
        cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    assert "Gpu state Ready: the GPU stack is installed and ready" in output
    # The real flux CLI's table (tab-separated columns, pkg/printers.TablePrinter), not an
    # imitation of it.
    releases = _section(output, "flux get helmreleases -n kyma-system")
    assert releases.splitlines()[0].split() == ["NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE"]
    assert "\t" in releases, releases
    rows = flux_table(releases)
    assert [(r["NAME"], r["REVISION"], r["SUSPENDED"], r["READY"]) for r in rows] == [
        ("gpu-operator", "v26.7.0", "False", "True")
    ], releases
    assert rows[0]["MESSAGE"].startswith("Helm install succeeded"), releases
    sources = flux_table(_section(output, "flux get sources helm -n kyma-system"))
    assert [(r["NAME"], r["READY"]) for r in sources] == [("gpu-operator", "True")], output
    assert "export KUBECONFIG=" in output
    assert "tools/bin/flux get helmreleases -n kyma-system" in output
    # The manager serves /metrics, and the demo shows its GPUs there.
    metrics = re.search(r"^\$ curl -s (http://127\.0\.0\.1:\d+/metrics) \| grep", output, re.M)
    assert metrics is not None, output
    assert re.search(r'^kyma_gpu_gpus\{.*pool="gpu-l4".*\} 2\.0$', output, re.M), output
    assert f"The manager's metrics: curl -s {metrics.group(1)}" in output
    # The logs outlive the stop; the rest of the workdir goes.
    kept = re.search(r"^The logs stay in (\S+) \(remove (\S+) when done\)\.$", output, re.M)
    assert kept is not None, output
    logs, workdir = Path(kept.group(1)), Path(kept.group(2))
    try:
        assert (logs / "operator.log").is_file()
        assert [p.name for p in workdir.iterdir()] == ["logs"]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert output.rstrip().endswith("stopped.")
