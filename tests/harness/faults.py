"""Fault injection on the local cluster: the manager is SIGKILLed at random points of an
install, a values upgrade, a chart bump and a deletion, restarted at once each time, and must
end converged with nothing duplicated, orphaned or lost. Flux's controllers and the API server
are restarted in the middle of the upgrade and the chart bump.

Used by benchmarks/fault_injection.py (the long run, with a table) and tests/e2e/test_faults.py
(a bounded run in `make test`).
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.module import (
    MODULE_NAMESPACE,
    WRITTEN_FLUX_CRDS,
    OperatorProcess,
    gpu,
    helm_release,
    operator_writes,
    wait_until,
)

OURS = "app.kubernetes.io/part-of=kyma-gpu"
CONVERGE_TIMEOUT = 480.0
"""A driver change converges only when the NVIDIA operator has replaced the driver on every GPU
node; its upgrade controller looks again every 2 minutes, and a node needs one or two looks.
The run lets it replace all nodes at once (UPGRADE_ALL_AT_ONCE), so a phase takes one node's
time plus the faults' own delays, not one per node (test_flux shows the node-by-node order)."""
UPGRADE_ALL_AT_ONCE = {"maxParallelUpgrades": 0, "maxUnavailable": "100%"}


@dataclass
class PhaseResult:
    name: str
    kills: int
    restarts: list[str] = field(default_factory=list)
    """Other processes restarted during the phase (helm-controller, kube-apiserver, ...)."""
    converge_seconds: float = 0.0
    """From the last restart of the manager until converged."""
    writes: int = 0
    """The manager's writes in the phase (audit log), failed ones included."""


def _state(cluster: LocalCluster) -> dict[str, Any]:
    obj = gpu(cluster) or {}
    return {
        "generation": (obj.get("metadata") or {}).get("generation"),
        **(obj.get("status") or {}),
    }


def _ready_at(cluster: LocalCluster, check: Callable[[dict[str, Any]], bool]) -> bool:
    status = _state(cluster)
    return (status.get("state") == "Ready" and status.get("observedGeneration")
            == status.get("generation") and check(status))  # fmt: skip


def _our_flux_objects(cluster: LocalCluster) -> dict[str, list[str]]:
    out = {}
    for kind in WRITTEN_FLUX_CRDS:
        items = cluster.list_objects(kind, MODULE_NAMESPACE, selector=OURS)
        out[kind.split(".")[0]] = [i["metadata"]["name"] for i in items]
    return out


def _no_duplicates(cluster: LocalCluster, phase: str) -> None:
    objects = _our_flux_objects(cluster)
    release, sources = (
        objects["helmreleases"],
        objects["helmrepositories"] + objects["ocirepositories"],
    )
    if len(release) > 1 or len(sources) > 1:
        raise AssertionError(f"{phase}: duplicate Flux objects {objects}")


def _values(cluster: LocalCluster) -> dict[str, Any]:
    return dict(((helm_release(cluster) or {}).get("spec") or {}).get("values") or {})


class FaultRun:
    def __init__(self, cluster: LocalCluster, flux: FluxStack, operator: OperatorProcess,
                 kills_per_phase: int, seed: int = 7, progress: Callable[[str], None] = print,
                 ) -> None:  # fmt: skip
        self.cluster, self.flux, self.operator = cluster, flux, operator
        self.kills = kills_per_phase
        self.random = random.Random(seed)
        self.progress = progress
        self.results: list[PhaseResult] = []

    def _patch(self, spec: dict[str, Any]) -> None:
        self.cluster.kubectl("patch", "gpus.gpu.kyma-project.io", "gpu", "--type=merge",
                             "-p", json.dumps({"spec": spec}))  # fmt: skip

    def _kill_and_restart(self, result: PhaseResult, extra: Callable[[], str] | None) -> float:
        """SIGKILL the manager at random points (0-4 s apart), restarting it at once; the
        extra fault (another process's restart) goes in the middle. Returns the last start."""
        last = time.monotonic()
        for index in range(self.kills):
            time.sleep(self.random.uniform(0.0, 4.0))
            self.operator.kill()
            self.operator.start()
            last = time.monotonic()
            result.kills += 1
            if extra is not None and index == self.kills // 2:
                result.restarts.append(extra())
        return last

    def phase(self, name: str, change: Callable[[], object], converged: Callable[[], bool],
              extra: Callable[[], str] | None = None) -> PhaseResult:  # fmt: skip
        result = PhaseResult(name, 0)
        writes_before = len(operator_writes(self.cluster))
        change()
        last = self._kill_and_restart(result, extra)
        wait_until(converged, CONVERGE_TIMEOUT, f"{name}: converged after the faults",
                   interval=0.5)  # fmt: skip
        result.converge_seconds = time.monotonic() - last
        result.writes = len(operator_writes(self.cluster)) - writes_before
        if name != "delete":
            _no_duplicates(self.cluster, name)
        self.progress(f"{name}: {result.kills} kills, restarts {result.restarts or '-'}, "
                      f"converged {result.converge_seconds:.1f}s after the last, "
                      f"{result.writes} writes")  # fmt: skip
        self.results.append(result)
        return result

    def _restart_flux(self, name: str) -> str:
        self.flux.stop_controller(name)
        time.sleep(1.0)
        self.flux.start_controller(name)
        return name

    def _delete(self) -> None:
        self.cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")

    def _restart_apiserver(self) -> str:
        ready = self.cluster.restart_apiserver(3.0)
        return f"kube-apiserver (ready {ready:.1f}s after its start)"

    def run(self) -> list[PhaseResult]:
        source = {"chartRepository": self.flux.helm_repo_url, "insecure": True}
        gpu_body = {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                    "metadata": {"name": "gpu"},
                    "spec": {"source": source, "operatorVersion": "v26.3.3",
                             "driver": {"upgradePolicy": UPGRADE_ALL_AT_ONCE}}}  # fmt: skip
        self.phase("install", lambda: self.cluster.apply(gpu_body),
                   lambda: _ready_at(self.cluster, lambda s: True))  # fmt: skip
        self.phase(
            "values upgrade",
            lambda: self._patch({"driver": {"version": "580"}}),
            lambda: (
                _ready_at(self.cluster, lambda s: True)
                and str(_values(self.cluster).get("driver", {}).get("version")) == "580"
            ),
            extra=lambda: self._restart_flux("helm-controller"),
        )
        self.phase(
            "chart bump",
            lambda: self._patch({"operatorVersion": "v26.7.0"}),
            lambda: _ready_at(self.cluster, lambda s: s.get("installedChartVersion") == "v26.7.0"),
            extra=self._restart_apiserver,
        )
        self.phase(
            "delete",
            self._delete,
            lambda: gpu(self.cluster) is None and not any(_our_flux_objects(self.cluster).values()),
            extra=lambda: self._restart_flux("source-controller"),
        )
        return self.results


def table(results: list[PhaseResult]) -> str:
    rows = ["| phase | manager kills | other restarts | converged after the last kill (s) "
            "| manager writes |", "|---|--:|---|--:|--:|"]  # fmt: skip
    for r in results:
        rows.append(f"| {r.name} | {r.kills} | {', '.join(r.restarts) or '-'} "
                    f"| {r.converge_seconds:.1f} | {r.writes} |")  # fmt: skip
    times = [r.converge_seconds for r in results]
    kills, restarts = sum(r.kills for r in results), sum(len(r.restarts) for r in results)
    spread = f"max {max(times):.1f}, p50 {statistics.median(times):.1f}"
    rows.append(f"| **all** | {kills} | {restarts} | {spread} | {sum(r.writes for r in results)} |")
    return "\n".join(rows)
