"""Hostile Nodes never crash detection, and never blow up the plan or the Gpu status: absurd
and huge values, missing nodeInfo, unknown providers, thousands of pools."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kyma_gpu.api.models import STATUS_NODES_LIMIT, GpuSpec
from kyma_gpu.facts import NodeError, cluster_facts, node_facts
from kyma_gpu.facts.node import FIELD_LIMIT
from kyma_gpu.plan import make_plan
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status import Evidence, aggregate
from tests.unit.builders import node

CATALOG = Catalog()
STATUS_BUDGET = 64 * 1024
"""The Gpu status stays far below the API server's 1.5 MiB object limit."""


def _hostile(i: int) -> dict[str, Any]:
    body = node(
        name=f"gpu-{i}", instance_type=f"x{i}.huge", provider_id=f"weird{i}:///n/{i}",
        pool=f"pool-{i}", kernel="k" * 5000, os_image=f"Exotic OS {i} " + "z" * 100_000,
    )  # fmt: skip
    body["metadata"]["labels"].update({"nvidia.com/gpu.present": "true", f"junk-{i}": "v" * 63})
    body["metadata"]["annotations"] = {"huge": "a" * 300_000}
    return body


def test_three_thousand_hostile_pools_keep_facts_plan_and_status_small() -> None:
    facts = [node_facts(_hostile(i), CATALOG.machine_types) for i in range(3000)]
    assert all(len(f.os_image) <= FIELD_LIMIT and len(f.kernel or "") <= FIELD_LIMIT
               for f in facts)  # fmt: skip
    plan = make_plan(GpuSpec(), cluster_facts(facts), CATALOG, None)
    assert len(plan.nodes) == 3000
    status = aggregate(plan, Evidence(), 1)
    assert status.gpu_node_count == 3000
    assert len(status.nodes) == STATUS_NODES_LIMIT
    assert len(status.model_dump_json()) < STATUS_BUDGET
    preflight = next(c for c in status.conditions if c.type == "Preflight")
    assert "more findings (kyma-gpu plan lists them all)" in preflight.message


def test_a_node_without_node_info_or_spec_is_still_a_node() -> None:
    body = {
        "kind": "Node",
        "metadata": {"name": "bare", "labels": {"nvidia.com/gpu.present": "true"}},
    }
    facts = node_facts(body, CATALOG.machine_types)
    assert facts.os_image == ""
    assert facts.provider == "unknown"


@given(
    labels=st.dictionaries(st.text(max_size=80), st.one_of(st.text(max_size=2000), st.integers(),
                           st.none(), st.lists(st.text(max_size=5), max_size=2)), max_size=8),
    info=st.dictionaries(st.sampled_from(["osImage", "kernelVersion", "architecture", "x"]),
                         st.one_of(st.text(max_size=3000), st.integers(), st.none()), max_size=4),
    capacity=st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu"]),
                             st.one_of(st.text(max_size=20), st.integers(), st.none()), max_size=2),
)  # fmt: skip
def test_any_labels_and_node_info_give_facts_or_a_clean_rejection(
    labels: dict[str, Any], info: dict[str, Any], capacity: dict[str, Any]
) -> None:
    body = {"kind": "Node", "metadata": {"name": "n", "labels": labels},
            "status": {"nodeInfo": info, "capacity": capacity}}  # fmt: skip
    try:
        facts = node_facts(body, CATALOG.machine_types)
    except NodeError:
        return
    assert len(facts.os_image) <= FIELD_LIMIT
    json.dumps([facts.name, facts.os, facts.os_version, facts.kernel, facts.arch])
