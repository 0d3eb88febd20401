"""status.components is bounded (issue 32, finding 5): every DaemonSet in the GPU operator's
namespace becomes one entry, and whoever may create DaemonSets there must not grow the Gpu
without bound. The list keeps the first STATUS_COMPONENTS_LIMIT by name, componentCount
counts them all, and the ComponentsReady message names at most ten."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kyma_gpu.api import GpuSpec
from kyma_gpu.api.models import STATUS_COMPONENTS_LIMIT, ComponentStatus, GpuStatus
from kyma_gpu.plan import make_plan
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status import DaemonSetFacts, Evidence, OperatorStateFacts, aggregate, daemonset_facts
from kyma_gpu_tools.crd import crd
from tests.unit.builders import facts_of, node

FLOOD = 3000
STATUS_BUDGET = 64 * 1024
"""As tests/unit/test_hostile_nodes.py: far below the API server's 1.5 MiB object limit."""


def _daemonset(i: int) -> DaemonSetFacts:
    """A DaemonSet anyone with `edit` in the GPU operator's namespace can create: never ready."""
    name = f"flood-{i:05d}-" + "x" * 200
    return daemonset_facts({
        "metadata": {"name": name, "generation": 1, "labels": {"app": "x"}},
        "spec": {"updateStrategy": {"type": "RollingUpdate"}},
        "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "numberAvailable": 0},
    })  # fmt: skip


def test_thousands_of_daemonsets_keep_the_status_small(catalog: Catalog) -> None:
    plan = make_plan(GpuSpec(), facts_of(catalog.machine_types, node("gl-1")), catalog, None)
    sets = tuple(_daemonset(i) for i in reversed(range(FLOOD)))
    status = aggregate(plan, Evidence(daemonsets=sets, cluster_policy=OperatorStateFacts("ready")),
                       1)  # fmt: skip
    assert len(status.components) == STATUS_COMPONENTS_LIMIT
    assert status.component_count == FLOOD
    assert status.components[0].name.startswith("flood-00000-")  # the first by name
    assert status.components[-1].name.startswith(f"flood-{STATUS_COMPONENTS_LIMIT - 1:05d}-")
    components = next(c for c in status.conditions if c.type == "ComponentsReady")
    assert components.message.endswith(f" and {FLOOD - 10} more")
    assert len(components.message) < 4096
    assert len(status.model_dump_json()) < STATUS_BUDGET


def test_a_few_daemonsets_are_all_listed(catalog: Catalog) -> None:
    plan = make_plan(GpuSpec(), facts_of(catalog.machine_types, node("gl-1")), catalog, None)
    status = aggregate(plan, Evidence(daemonsets=(_daemonset(2), _daemonset(1))), 1)
    assert [c.name[:11] for c in status.components] == ["flood-00001", "flood-00002"]
    assert status.component_count == 2


def test_the_model_and_the_crd_refuse_more() -> None:
    entry = ComponentStatus(name="n", ready=True)
    GpuStatus(components=[entry] * STATUS_COMPONENTS_LIMIT)
    with pytest.raises(ValidationError, match="at most 64 items"):
        GpuStatus(components=[entry] * (STATUS_COMPONENTS_LIMIT + 1))
    schema: Any = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    status = schema["properties"]["status"]["properties"]
    assert status["components"]["maxItems"] == STATUS_COMPONENTS_LIMIT
    assert status["componentCount"]["type"] == "integer"
