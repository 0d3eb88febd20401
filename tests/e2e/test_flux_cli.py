"""The real flux CLI (tools/bin/flux, FLUX_CLI_VERSION in tools/versions.env) on the local
cluster: once the Gpu is Ready, `flux get helmreleases` shows the GPU operator HelmRelease Ready
at the chart version, and `flux get sources helm` its HelmRepository Ready. These are the
commands docs/troubleshooting.md and `make demo` give; here they read what the operator wrote
and the real source- and helm-controller did. A missing flux binary is an error, not a skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.binaries import FLUX_CLI, binary
from tests.harness.cluster import LocalCluster
from tests.harness.demo import flux_cli, flux_table
from tests.harness.flux import FluxStack
from tests.harness.module import (
    MODULE_NAMESPACE,
    ROOT,
    OperatorProcess,
    gpu,
    module_on,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DEFAULT_CHART_VERSION = str(
    yaml.safe_load((ROOT / "values-rules" / "defaults.yaml").read_text())["chart"]["version"]
)
"""The module's pinned chart version; the sample Gpu leaves operatorVersion empty."""


@pytest.fixture(scope="module")
def flux() -> Path:
    """The flux CLI, checked before any cluster work (MissingBinaryError names it)."""
    return binary(FLUX_CLI)


@pytest.fixture(scope="module")
def stack(local_cluster: LocalCluster, flux_stack: FluxStack) -> Iterator[OperatorProcess]:
    with module_on(local_cluster, name="operator-flux-cli") as process:
        yield process


@pytest.fixture
def ready_gpu(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> Iterator[dict[str, Any]]:
    """The sample Gpu (chart from the local repository) once Ready; uninstalled afterwards."""
    source = {"chartRepository": flux_stack.helm_repo_url, "insecure": True}
    local_cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                         "metadata": {"name": "gpu"}, "spec": {"source": source}})  # fmt: skip

    def ready() -> dict[str, Any] | None:
        flux_stack.check_alive()
        assert stack.alive(), f"the operator exited:\n{stack.log()}"
        obj = gpu(local_cluster)
        return obj if ((obj or {}).get("status") or {}).get("state") == "Ready" else None

    try:
        yield wait_until(ready, 300, "Gpu Ready", interval=0.5)
    finally:
        local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false",
                              "--ignore-not-found")  # fmt: skip
        try:
            wait_until(lambda: gpu(local_cluster) is None, 300, "the Gpu gone after uninstall")
        except AssertionError as error:
            status = (gpu(local_cluster) or {}).get("status") or {}
            raise AssertionError(f"{error}; Gpu {status.get('state')}: "
                                 f"{status.get('message')}") from None  # fmt: skip


def _one_row(rows: list[dict[str, str]], name: str, output: str) -> dict[str, str]:
    found = [row for row in rows if row.get("NAME") == name]
    assert len(found) == 1, f"expected one row {name!r} in:\n{output}"
    return found[0]


def test_flux_get_shows_the_release_ready_at_the_chart_version(
    flux: Path, local_cluster: LocalCluster, ready_gpu: dict[str, Any]
) -> None:
    output = flux_cli(local_cluster, "get", "helmreleases", "-n", MODULE_NAMESPACE)
    rows = flux_table(output)
    assert list(rows[0]) == ["NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE"], output
    release = _one_row(rows, "gpu-operator", output)
    assert release["READY"] == "True", output
    assert release["SUSPENDED"] == "False", output
    assert release["REVISION"] == DEFAULT_CHART_VERSION, output
    assert ready_gpu["status"]["installedChartVersion"] == release["REVISION"]
    assert f"gpu-operator@{DEFAULT_CHART_VERSION}" in release["MESSAGE"], output

    output = flux_cli(local_cluster, "get", "sources", "helm", "-n", MODULE_NAMESPACE)
    source = _one_row(flux_table(output), "gpu-operator", output)
    assert source["READY"] == "True", output
