"""The API server goes away for minutes: the manager survives, and once it is back a spec change
reaches the HelmRelease within 30 s (every watch resumes or lists again; nothing is lost).

No Flux here: what counts is the manager's own watches and writes. The harness restarts the
local cluster's other controllers once the API server is back (LocalCluster.restart_apiserver
says why); the manager is not restarted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster import LocalCluster
from tests.harness.module import OperatorProcess, gpu, helm_release, module_on, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

OUTAGE_SECONDS = 120.0
RECOVERY_BOUND_SECONDS = 30.0


@pytest.fixture(scope="module")
def stack(local_cluster: LocalCluster) -> Iterator[OperatorProcess]:
    with module_on(local_cluster, name="operator-outage") as process:
        yield process


def _driver_version(cluster: LocalCluster) -> Any:
    hr = helm_release(cluster) or {}
    return ((hr.get("spec") or {}).get("values") or {}).get("driver", {}).get("version")


def test_the_manager_survives_an_api_server_outage_and_loses_no_change(
    local_cluster: LocalCluster, stack: OperatorProcess
) -> None:
    assert gpu(local_cluster) is None, "a Gpu left over by an earlier test"
    local_cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                         "metadata": {"name": "gpu"}, "spec": {}})  # fmt: skip
    wait_until(lambda: helm_release(local_cluster), 60, "the HelmRelease")
    wait_until(lambda: ((gpu(local_cluster) or {}).get("status") or {}).get("state"), 30,
               "the status of this manager")  # fmt: skip
    before = _driver_version(local_cluster)
    assert before is not None

    ready_after = local_cluster.restart_apiserver(OUTAGE_SECONDS)
    assert stack.alive(), f"the manager died during the outage:\n{stack.log()}"

    began = time.monotonic()
    local_cluster.kubectl("patch", "gpus.gpu.kyma-project.io", "gpu", "--type=merge",
                          "-p", json.dumps({"spec": {"driver": {"version": "580"}}}))  # fmt: skip
    wait_until(
        lambda: str(_driver_version(local_cluster)) == "580",
        RECOVERY_BOUND_SECONDS,
        "the change in the HelmRelease after the outage",
    )
    took = time.monotonic() - began
    print(f"outage {OUTAGE_SECONDS:.0f}s; API server ready {ready_after:.1f}s after its "
          f"restart; spec change in the HelmRelease {took:.1f}s later")  # fmt: skip
    assert stack.alive()

    def status_current() -> bool:
        obj = gpu(local_cluster) or {}
        observed = (obj.get("status") or {}).get("observedGeneration")
        return bool(observed == obj["metadata"]["generation"])

    wait_until(status_current, 10, "the status of the current generation")
    local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    wait_until(lambda: gpu(local_cluster) is None, 60, "the Gpu gone")
