"""Faults converge (bounded form of benchmarks/fault_injection.py): the manager is SIGKILLed
twice at random points in each of install, values upgrade, chart bump and deletion, and
helm-controller, the API server and source-controller are restarted in between. Each phase
ends converged: Ready with the last spec, or gone after the delete; no Flux object is
duplicated or left behind, and no spec change is lost."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.cluster import LocalCluster
from tests.harness.faults import FaultRun, table
from tests.harness.flux import FluxStack
from tests.harness.module import OperatorProcess, module_on

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(scope="module")
def stack(local_cluster: LocalCluster, flux_stack: FluxStack) -> Iterator[OperatorProcess]:
    with module_on(local_cluster, name="operator-faults") as process:
        yield process


@pytest.mark.timeout(1800)  # four phases, each bounded by CONVERGE_TIMEOUT
def test_faults_converge(
    local_cluster: LocalCluster, flux_stack: FluxStack, stack: OperatorProcess
) -> None:
    results = FaultRun(local_cluster, flux_stack, stack, kills_per_phase=2).run()
    print(table(results))
    assert [r.name for r in results] == ["install", "values upgrade", "chart bump", "delete"]
    assert sum(r.kills for r in results) == 8
    assert sum(len(r.restarts) for r in results) == 3
