"""Two replicas, one writer: leader election on the Lease kyma-system/kyma-gpu-manager.

Two manager processes run as in the Deployment (`--leader-election`, POD_NAME as identity).
The test kills the leader (SIGKILL), measures how long until the other takes over, stops the
new leader gracefully, and reads the API server's audit log: the managers' writes (told apart
by the identity in their User-Agent) never interleave.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from kyma_gpu.reconcile.election import Move
from tests.harness.cluster import LocalCluster
from tests.harness.module import (
    MODULE_NAMESPACE,
    OperatorProcess,
    gpu,
    helm_release,
    install_crds,
    wait_until,
)
from tests.harness.nodes import DEMO_FLEET

pytestmark = pytest.mark.integration

LEASE = "kyma-gpu-manager"
WRITE_VERBS = {"create", "update", "patch", "delete"}
AGENT = re.compile(r"^kyma-gpu/\S+ \((?P<identity>manager-[ab])\)")
"""This test's two managers (other tests' managers have other identities)."""


def _manager(cluster: LocalCluster, identity: str) -> OperatorProcess:
    return OperatorProcess(cluster, name=f"operator-{identity}", args=("--leader-election",),
                           env={"POD_NAME": identity}).start()  # fmt: skip


@pytest.fixture
def fleet_and_crds(local_cluster: LocalCluster) -> Iterator[None]:
    install_crds(local_cluster)
    nodes = local_cluster.add_nodes(DEMO_FLEET)
    yield
    local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "--all", "--wait=false",
                          check=False)  # fmt: skip
    for node in nodes:
        local_cluster.delete_node(node)
    local_cluster.kubectl("delete", "lease", LEASE, "-n", MODULE_NAMESPACE, "--ignore-not-found")


def _holder(cluster: LocalCluster) -> str:
    lease = cluster.get_object("lease", LEASE, MODULE_NAMESPACE) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def _driver_version(cluster: LocalCluster) -> str:
    values = ((helm_release(cluster) or {}).get("spec") or {}).get("values") or {}
    return str((values.get("driver") or {}).get("version"))


def _set_version(cluster: LocalCluster, version: str) -> None:
    cluster.kubectl("patch", "gpus.gpu.kyma-project.io", "gpu", "--type=merge",
                    "-p", json.dumps({"spec": {"driver": {"version": version}}}))  # fmt: skip
    wait_until(lambda: _driver_version(cluster) == version, 30, f"driver {version} applied")


def _writers_in_order(cluster: LocalCluster) -> list[tuple[str, str, str]]:
    """(time, identity, what) of every successful write by a manager, by completion time."""
    out = []
    for line in (cluster.log_dir / "audit.log").read_text().splitlines():
        event: dict[str, Any] = json.loads(line)
        match = AGENT.match(str(event.get("userAgent", "")))
        code = (event.get("responseStatus") or {}).get("code", 200)
        if (
            match is None
            or event.get("stage") != "ResponseComplete"
            or event.get("verb") not in WRITE_VERBS
            or code >= 400
        ):
            continue
        ref = event.get("objectRef") or {}
        what = f"{event['verb']} {ref.get('resource')}/{ref.get('name')}"
        out.append((str(event["stageTimestamp"]), match["identity"], what))
    return sorted(out)


def _lease_handover(cluster: LocalCluster) -> float:
    """Seconds from manager-b's last Lease write (its release, on SIGINT) to manager-a's first
    Lease write after it (its acquire), by the audit log's completion times."""
    writes = [(stamp, identity) for stamp, identity, what in _writers_in_order(cluster)
              if what.endswith(f"leases/{LEASE}")]  # fmt: skip
    released = max(stamp for stamp, identity in writes if identity == "manager-b")
    acquired = min(stamp for stamp, identity in writes
                   if identity == "manager-a" and stamp > released)  # fmt: skip
    return (datetime.fromisoformat(acquired) - datetime.fromisoformat(released)).total_seconds()


def _runs(writers: list[tuple[str, str, str]]) -> list[str]:
    """The identities in order, consecutive repeats folded: a a b b a -> [a, b, a]."""
    runs: list[str] = []
    for _, identity, _ in writers:
        if not runs or runs[-1] != identity:
            runs.append(identity)
    return runs


def test_one_writer_failover_and_graceful_handover(
    local_cluster: LocalCluster, fleet_and_crds: None
) -> None:
    a = _manager(local_cluster, "manager-a")
    b: OperatorProcess | None = None
    try:
        wait_until(lambda: _holder(local_cluster) == "manager-a", 30, "manager-a leading")
        b = _manager(local_cluster, "manager-b")
        local_cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                             "metadata": {"name": "gpu"}, "spec": {}})  # fmt: skip
        wait_until(lambda: helm_release(local_cluster), 60, "the HelmRelease")
        time.sleep(3)  # b is up and observing
        assert _holder(local_cluster) == "manager-a"

        a.kill()
        killed = time.monotonic()
        wait_until(lambda: _holder(local_cluster) == "manager-b", 40, "manager-b taking over")
        failover = time.monotonic() - killed
        b_log = b.log(400)
        _set_version(local_cluster, "580")

        a = _manager(local_cluster, "manager-a")  # back, as a follower
        time.sleep(3)
        assert _holder(local_cluster) == "manager-b"
        stopped = time.monotonic()
        b.stop()  # SIGINT: b releases the Lease on its way out
        exited = time.monotonic()
        assert b.process is not None
        assert b.process.returncode == 0, b.log(30)  # it exited by itself, not SIGKILLed at 15 s
        wait_until(lambda: _holder(local_cluster) == "manager-a", 40, "manager-a taking over")
        # The handover is the follower's part: from b's release to a's acquire, both Lease
        # writes, on the API server's clock (the audit log): this test's own polling, slow on
        # a loaded machine, is not the election's (by the test's clock it once measured 5.6 s).
        # b's own shutdown is bounded apart: Python's exit alone can take seconds.
        handover = _lease_handover(local_cluster)
        shutdown = exited - stopped
        a_log = a.log(400)
        _set_version(local_cluster, "590")
    finally:
        # Delete the Gpu while a manager runs to release it: a Gpu left with its finalizer
        # would hold up the next test's manager.
        local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false",
                              "--ignore-not-found")  # fmt: skip
        if a.alive() or (b is not None and b.alive()):
            wait_until(lambda: gpu(local_cluster) is None, 60, "the Gpu released")
        for process in (a, b):
            if process is not None:
                print(f"--- {process.log_path.name} (tail) ---\n{process.log(30)}")
                process.stop()

    print(f"failover after SIGKILL {failover:.1f}s; graceful handover {handover:.1f}s from the "
          f"release to the acquire (API server clock); the leader exited {shutdown:.1f}s "
          f"after its SIGINT")  # fmt: skip
    # After a SIGKILL the follower takes over because the Lease expired (held by the dead
    # leader), which its log says: the design bounds it (lease duration + two looks, 16 s),
    # the test's clock on a loaded machine does not (26 s once, in a CI run beside other
    # work). The figure is printed above and belongs to a benchmark.
    assert f"({Move.TAKE_OVER}: expired, held by manager-a)" in b_log, b_log
    # Graceful means the follower took the Lease because the leader released it, not because
    # it expired: that is what its log says, not a clock (10.4 s once on a loaded machine, 0.2 s
    # on a quiet one, both releases). How fast it is belongs to a benchmark.
    assert f"({Move.TAKE_OVER}: released)" in a_log, a_log
    writers = _writers_in_order(local_cluster)
    runs = _runs(writers)
    assert runs == ["manager-a", "manager-b", "manager-a"], "\n".join(map(str, writers))
