"""Where node-feature-discovery's worker runs (plan/nfd.py, issue 36): the affinity the plan
gives it, judged as the kube-scheduler judges node affinity, against the kinds of nodes a
fleet has; and that the fleet does not change it (no Helm upgrade when GPU pools come)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kyma_gpu.api import GpuSpec
from kyma_gpu.plan import Owner, make_plan
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import cpu_node, facts_of, node

NFD = "node-feature-discovery"


def _holds(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One matchExpression as Kubernetes evaluates it (In, NotIn, Exists, DoesNotExist)."""
    key, op = expr["key"], expr["operator"]
    values = expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not judged here")


def schedulable(affinity: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """requiredDuringScheduling: the terms are ORed, the expressions of a term ANDed."""
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(
        all(_holds(e, labels) for e in term["matchExpressions"])
        for term in terms["nodeSelectorTerms"]
    )


def _worker(catalog: Catalog, spec: Mapping[str, Any], *bodies: dict[str, Any]) -> Any:
    facts = facts_of(catalog.machine_types, *bodies)
    plan = make_plan(GpuSpec.model_validate(spec), facts, catalog, Owner("uid", "gpu"))
    return plan.values.get(NFD, {}).get("worker", {})


def _labels(**extra: str) -> dict[str, str]:
    return {"kubernetes.io/os": "linux", **extra}


TYPE = "node.kubernetes.io/instance-type"


@pytest.mark.parametrize(
    ("labels", "runs"),
    [
        (_labels(**{TYPE: "g6.xlarge"}), True),  # a known GPU machine type: every node of its pool
        (_labels(**{"beta.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"}), True),
        (_labels(**{TYPE: "p5.48xlarge", "worker.gardener.cloud/pool": "new-pool"}), True),
        (_labels(**{TYPE: "m5.large"}), False),  # a CPU-only machine type: no worker
        (_labels(**{TYPE: "n1-standard-8", "gpu.kyma-project.io/gpu": "true"}), True),  # opt-in
        (
            _labels(**{TYPE: "x9.unknown", "feature.node.kubernetes.io/pci-10de.present": "true"}),
            True,
        ),  # NFD found an NVIDIA device (a worker that ran keeps running)
        (_labels(), True),  # kind, k3d, bare metal: no machine type says it is CPU-only
        (_labels(**{TYPE: "n1-standard-8", "gpu.kyma-project.io/gpu": "false"}), False),
    ],
)
def test_the_worker_runs_only_where_a_gpu_can_be(
    catalog: Catalog, labels: dict[str, str], runs: bool
) -> None:
    worker = _worker(catalog, {}, node("gpu-1"), cpu_node())
    assert schedulable(worker["affinity"], labels) is runs


def test_all_nodes_keeps_the_charts_worker_everywhere(catalog: Catalog) -> None:
    worker = _worker(catalog, {"components": {"nodeFeatureDiscovery": "AllNodes"}}, node("gpu-1"))
    assert "affinity" not in worker


def test_new_gpu_pools_change_no_value(catalog: Catalog) -> None:
    """The affinity depends on the registry, not on the fleet: a new GPU pool, a pool that
    gains nodes, or no GPU node at all give the same values, so no Helm upgrade."""
    before = _worker(catalog, {}, node("gpu-1"), cpu_node())
    new_pool = node("gpu-2", pool="gpu-b", instance_type="g5.xlarge")
    after = _worker(catalog, {}, node("gpu-1"), new_pool, node("gpu-3", pool="gpu-c"), cpu_node())
    empty = _worker(catalog, {}, cpu_node())
    assert before["affinity"] == after["affinity"] == empty["affinity"]


def test_every_registry_machine_type_is_in_the_affinity(catalog: Catalog) -> None:
    affinity = _worker(catalog, {}, node("gpu-1"))["affinity"]
    for types in catalog.machine_types.types.values():
        for name in types:
            assert schedulable(affinity, _labels(**{TYPE: name})), name
