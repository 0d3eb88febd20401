"""The plan memo (plan/plan.py `PlanMemo`): a change planning does not read (the NVIDIA upgrade
label, the GPU devices, the manager's mark) leaves the planning facts equal and makes no plan; a
change planning reads plans again."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_gpu.api.models import GpuSpec
from kyma_gpu.extensions import NODE_FOLDS
from kyma_gpu.facts import ClusterFacts, MachineTypeRegistry, cluster_facts, observe_node
from kyma_gpu.facts.node import LABEL_DRIVER_UPGRADE
from kyma_gpu.plan import AllowedSources, Owner, Plan, make_plan
from kyma_gpu.plan import plan as plan_module
from kyma_gpu.plan.plan import KEPT, PlanMemo
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import cpu_node, node

SPEC, OWNER = GpuSpec(), Owner(uid="u")


def gpu_body(name: str, change: dict[str, Any]) -> dict[str, Any]:
    """node() with `change` as its arguments; "status" is merged into the body's status."""
    arguments = dict(change)
    status = arguments.pop("status", {})
    body = node(name, **arguments)
    body["status"].update(status)
    return body


def fleet(registry: MachineTypeRegistry, **changes: dict[str, Any]) -> ClusterFacts:
    """Three GPU nodes and a CPU node; `changes` gives gpu_body changes per GPU node name."""
    bodies = [gpu_body(name, changes.get(name, {})) for name in ("gpu-1", "gpu-2", "gpu-3")]
    return cluster_facts(observe_node(b, registry).facts for b in (*bodies, cpu_node()))


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[ClusterFacts]:
    """The facts make_plan was called with, in order."""
    calls: list[ClusterFacts] = []

    def counting(spec: GpuSpec, facts: ClusterFacts, *args: Any) -> Plan:
        calls.append(facts)
        return make_plan(spec, facts, *args)

    monkeypatch.setattr(plan_module, "make_plan", counting)
    return calls


@pytest.mark.parametrize(
    "change",
    [
        {"labels": {LABEL_DRIVER_UPGRADE: "upgrade-done"}},
        {"labels": {LABEL_DRIVER_UPGRADE: "upgrade-failed"}},
        {"capacity": {"nvidia.com/gpu": "0"}},
        {"status": {"conditions": [{"type": "KymaGpuUnhealthy", "status": "True"}]}},
    ],
    ids=["upgrade-done", "upgrade-failed", "gpus-withdrawn", "marked"],
)
def test_a_change_only_the_status_reads_is_not_planned_again(
    change: dict[str, Any], registry: MachineTypeRegistry, catalog: Catalog,
    made: list[ClusterFacts],
) -> None:  # fmt: skip
    """The node's ObservedNode changes, its planning facts do not: the same plan object."""
    before = observe_node(gpu_body("gpu-2", {}), registry, NODE_FOLDS)
    after = observe_node(gpu_body("gpu-2", change), registry, NODE_FOLDS)
    assert after != before
    assert after.facts == before.facts
    memo = PlanMemo(catalog)
    first = memo.plan(SPEC, fleet(registry), OWNER, AllowedSources())
    assert memo.plan(SPEC, fleet(registry, **{"gpu-2": change}), OWNER, AllowedSources()) is first
    assert len(made) == 1, "planned again"


def test_a_change_planning_reads_is_planned_again(
    registry: MachineTypeRegistry, catalog: Catalog, made: list[ClusterFacts]
) -> None:
    memo = PlanMemo(catalog)
    memo.plan(SPEC, fleet(registry), OWNER, AllowedSources())
    moved = fleet(registry, **{"gpu-2": {"pool": "other"}})
    plan = memo.plan(SPEC, moved, OWNER, AllowedSources())
    assert len(made) == 2
    assert sorted(w.name for w in plan.worker_pools) == ["gpu", "other"]


def test_a_hit_takes_the_new_key_and_only_kept_plans_stay(
    registry: MachineTypeRegistry, catalog: Catalog, made: list[ClusterFacts]
) -> None:
    """After a hit the memo holds the facts it was asked with (compared by identity from then
    on), and it holds at most KEPT plans."""
    memo = PlanMemo(catalog)
    memo.plan(SPEC, fleet(registry), OWNER, AllowedSources())
    again = fleet(registry)
    memo.plan(SPEC, again, OWNER, AllowedSources())
    (key,) = memo.plans.keys()
    assert key[1] is again
    for pool in range(KEPT + 2):
        memo.plan(SPEC, fleet(registry, **{"gpu-1": {"pool": f"p{pool}"}}), OWNER, AllowedSources())
    assert len(memo.plans) == KEPT
    assert len(made) == 1 + KEPT + 2
