"""The plan cache (plan/cache.py): a change planning does not read (the NVIDIA upgrade label, the
GPU devices) gives the plan make_plan would give, with the new facts in its pools, without
planning again; a change planning reads plans again."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_gpu.api.models import GpuSpec
from kyma_gpu.facts import ClusterFacts, MachineTypeRegistry, cluster_facts, node_facts
from kyma_gpu.facts.node import LABEL_DRIVER_UPGRADE
from kyma_gpu.plan import Origins, Owner, Plan, make_plan
from kyma_gpu.plan import cache as cache_module
from kyma_gpu.plan.cache import PlanCache
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import cpu_node, node

SPEC, OWNER = GpuSpec(), Owner(uid="u")


def fleet(registry: MachineTypeRegistry, **changes: dict[str, Any]) -> ClusterFacts:
    """Three GPU nodes and a CPU node; `changes` gives node() arguments per GPU node name."""
    bodies = [node(name, **changes.get(name, {})) for name in ("gpu-1", "gpu-2", "gpu-3")]
    return cluster_facts([node_facts(b, registry) for b in (*bodies, cpu_node())])


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[ClusterFacts]:
    """The facts make_plan was called with, in order."""
    calls: list[ClusterFacts] = []

    def counting(spec: GpuSpec, facts: ClusterFacts, *args: Any) -> Plan:
        calls.append(facts)
        return make_plan(spec, facts, *args)

    monkeypatch.setattr(cache_module, "make_plan", counting)
    return calls


def pool_nodes(plan: Plan) -> list[Any]:
    drivers = [n for p in plan.pools for n in p.nodes]
    return drivers + [n for w in plan.worker_pools for n in w.nodes]


@pytest.mark.parametrize(
    "change",
    [
        {"labels": {LABEL_DRIVER_UPGRADE: "upgrade-done"}},
        {"labels": {LABEL_DRIVER_UPGRADE: "upgrade-failed"}},
        {"capacity": {"nvidia.com/gpu": "0"}},
    ],
    ids=["upgrade-done", "upgrade-failed", "gpus-withdrawn"],
)
def test_a_change_only_the_status_reads_is_not_planned_again(
    change: dict[str, Any], registry: MachineTypeRegistry, catalog: Catalog,
    made: list[ClusterFacts],
) -> None:  # fmt: skip
    cache = PlanCache(catalog)
    first = cache.plan(SPEC, fleet(registry), OWNER, Origins())
    changed = fleet(registry, **{"gpu-2": change})
    assert changed != fleet(registry)
    again = cache.plan(SPEC, changed, OWNER, Origins())
    assert len(made) == 1, "planned again"
    assert again is not first
    assert again == make_plan(SPEC, changed, catalog, OWNER, Origins())
    fresh = {n.name: n for n in changed.gpu_nodes}
    assert all(n is fresh[n.name] for n in pool_nodes(again))
    assert cache.plan(SPEC, changed, OWNER, Origins()) is again


def test_a_change_planning_reads_is_planned_again(
    registry: MachineTypeRegistry, catalog: Catalog, made: list[ClusterFacts]
) -> None:
    cache = PlanCache(catalog)
    cache.plan(SPEC, fleet(registry), OWNER, Origins())
    moved = fleet(registry, **{"gpu-2": {"pool": "other"}})
    plan = cache.plan(SPEC, moved, OWNER, Origins())
    assert len(made) == 2
    assert sorted(w.name for w in plan.worker_pools) == ["gpu", "other"]


def test_the_views_of_nodes_gone_are_dropped(
    registry: MachineTypeRegistry, catalog: Catalog
) -> None:
    cache = PlanCache(catalog)
    many = cluster_facts([node_facts(node(f"gpu-{i}"), registry) for i in range(100)])
    cache.plan(SPEC, many, OWNER, Origins())
    assert len(cache.views) == 100
    cache.plan(SPEC, fleet(registry), OWNER, Origins())
    assert sorted(cache.views) == ["gpu-1", "gpu-2", "gpu-3"]
