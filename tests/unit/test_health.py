"""The pure GPU health function (extensions/node_marks/health.py) as a table: what a node's
body says, and the finding, healthy and total GPUs it gets; then the fleet's condition and
status fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kyma_gpu.api.models import STATUS_UNHEALTHY_LIMIT
from kyma_gpu.extensions import NODE_FOLDS
from kyma_gpu.extensions.node_marks.conditions import HealthReason
from kyma_gpu.extensions.node_marks.events import health_event
from kyma_gpu.extensions.node_marks.health import (
    gpu_health,
    health_condition,
    node_health,
    same_model,
    unhealthy_nodes,
)
from kyma_gpu.extensions.node_marks.names import NODE_CONDITION
from kyma_gpu.facts import MachineTypeRegistry, ObservedNode, observe_node
from tests.unit.builders import node


def observed(body: Mapping[str, Any], registry: MachineTypeRegistry) -> ObservedNode:
    """A Node body's facts, with what the registered extensions keep of it (node marks)."""
    return observe_node(body, registry, NODE_FOLDS)


R = HealthReason


def body(
    instance: str = "g4dn.12xlarge",
    capacity: str | None = "4",
    allocatable: str | None = "4",
    labels: dict[str, str] | None = None,
    name: str = "gpu-1",
    pool: str = "gpu",
) -> dict[str, Any]:
    """A g4dn.12xlarge (4 T4) by default, as the kubelet reports it."""
    gpus = {"nvidia.com/gpu": capacity} if capacity is not None else None
    found = node(name, instance_type=instance, labels=labels, pool=pool, capacity=gpus)
    if allocatable is not None:
        found["status"]["allocatable"] = {"cpu": "4", "nvidia.com/gpu": allocatable}
    return found


FAILED = {"nvidia.com/gpu-driver-upgrade-state": "upgrade-failed"}
GFD4 = {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "Tesla-T4"}
CASES = [
    # id, body, shared, (reason, healthy, total, advertised)
    ("healthy", body(labels=GFD4), False, (None, 4, 4, True)),
    ("one withdrawn", body(allocatable="3"), False, (R.GPUS_UNHEALTHY, 3, 4, True)),
    ("all withdrawn", body(allocatable="0"), False, (R.GPUS_UNHEALTHY, 0, 4, True)),
    ("capacity short", body(capacity="3", allocatable="3"), False, (R.GPUS_MISSING, 3, 4, True)),
    ("plugin gone: capacity 0", body(capacity="0", allocatable="0"), False,
     (R.GPUS_MISSING, 0, 4, True)),
    ("GFD counts fewer", body(labels={**GFD4, "nvidia.com/gpu.count": "2"}), False,
     (R.GPUS_MISSING, 2, 4, True)),
    ("GFD count gone: no finding", body(labels={"nvidia.com/gpu.product": "Tesla-T4"}), False,
     (None, 4, 4, True)),
    ("wrong model", body(labels={**GFD4, "nvidia.com/gpu.product": "NVIDIA-A10G"}), False,
     (R.WRONG_GPU_MODEL, 4, 4, True)),
    ("model with suffixes", body(labels={**GFD4, "nvidia.com/gpu.product": "Tesla-T4-SHARED"}),
     False, (None, 4, 4, True)),
    ("driver upgrade failed",
     body(labels={"nvidia.com/gpu-driver-upgrade-state": "upgrade-failed"}), False,
     (R.DRIVER_FAILED, 0, 4, True)),
    ("not advertised yet", body(capacity=None, allocatable=None), False, (None, 0, 4, False)),
    ("time-slicing x4, one GPU withdrawn",
     body(capacity="16", allocatable="12", labels={"nvidia.com/gpu.replicas": "4"}), True,
     (R.GPUS_UNHEALTHY, 3, 4, True)),
    ("time-slicing x4, healthy", body(capacity="16", allocatable="16",
                                      labels={"nvidia.com/gpu.replicas": "4"}), True,
     (None, 4, 4, True)),
    ("shared without GFD: capacity no count", body(capacity="16", allocatable="16"), True,
     (None, 4, 4, True)),
    ("shared without GFD, some withdrawn", body(capacity="16", allocatable="8"), True,
     (R.GPUS_UNHEALTHY, 2, 4, True)),
    ("MIG mixed instances", body(capacity=None, allocatable=None, labels={
        "nvidia.com/mig.config": "all-1g.10gb"}) | {}, False, (None, 0, 4, False)),
    ("unknown machine type: capacity is the count", body(instance="x1.big", capacity="2",
                                                        allocatable="1"), False,
     (R.GPUS_UNHEALTHY, 1, 2, True)),
]  # fmt: skip


@pytest.mark.parametrize(("case", "node_body", "shared", "want"), CASES, ids=[c[0] for c in CASES])
def test_node_health(
    registry: MachineTypeRegistry,
    case: str,
    node_body: dict[str, Any],
    shared: bool,
    want: tuple[HealthReason | None, int, int, bool],
) -> None:
    judged = node_health(observed(node_body, registry), "gpu", shared=shared,
                         device_plugin=True)  # fmt: skip
    assert (judged.reason, judged.healthy, judged.total, judged.advertised) == want, case
    assert bool(judged.message) == (judged.reason is not None)


def test_mig_instances_withdrawn_count_in_whole_gpus(registry: MachineTypeRegistry) -> None:
    mig = body(instance="p4d.24xlarge", capacity=None, allocatable=None,
               labels={"nvidia.com/mig.config": "all-1g.5gb"})  # fmt: skip
    mig["status"]["capacity"]["nvidia.com/mig-1g.5gb"] = "56"
    mig["status"]["allocatable"] = {"nvidia.com/mig-1g.5gb": "49"}
    judged = node_health(observed(mig, registry), "gpu", shared=False, device_plugin=True)
    assert (judged.reason, judged.total, judged.healthy) == (R.GPUS_UNHEALTHY, 8, 7)


def test_the_dra_stack_judges_without_capacity(registry: MachineTypeRegistry) -> None:
    """No nvidia.com/gpu on the DRA stack: GFD and the upgrade label still count."""
    quiet = observed(body(capacity=None, allocatable=None, labels=GFD4), registry)
    short = observed(body(capacity=None, allocatable=None,
                            labels={**GFD4, "nvidia.com/gpu.count": "3"}), registry)  # fmt: skip
    assert node_health(quiet, "gpu", shared=False, device_plugin=False).reason is None
    assert node_health(quiet, "gpu", shared=False, device_plugin=False).advertised
    assert node_health(short, "gpu", shared=False, device_plugin=False).reason is R.GPUS_MISSING


@pytest.mark.parametrize(
    ("registry_model", "product", "same"),
    [("A100 80GB", "NVIDIA-A100-SXM4-80GB", True), ("A100 40GB", "NVIDIA-A100-SXM4-80GB", False),
     ("A10", "NVIDIA-A10G", False), ("A10G", "NVIDIA-A10G", True), ("L4", "NVIDIA-L4", True),
     ("RTX PRO 6000", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", True),
     ("H100 NVL", "NVIDIA-H100-80GB-HBM3", False), ("T4", "Tesla-T4-MIG-1g.5gb", True)],
)  # fmt: skip
def test_same_model(registry_model: str, product: str, same: bool) -> None:
    assert same_model(registry_model, product) is same


def test_the_fleet_condition_and_pools(registry: MachineTypeRegistry) -> None:
    facts = [observed(b, registry) for b in (
        body(name="a-1", pool="a"), body(name="a-2", pool="a", allocatable="2"),
        body(name="b-1", pool="b", capacity="3", allocatable="3"),
        body(name="b-2", pool="b", labels=FAILED),
    )]  # fmt: skip
    health = gpu_health(facts)
    assert (health.healthy_gpus, health.total_gpus) == (4 + 2 + 3 + 0, 16)
    assert [(p.name, p.gpus_healthy, p.gpu_total, p.unhealthy_nodes) for p in health.pools] == [
        ("a", 6, 8, 1), ("b", 3, 8, 2)]  # fmt: skip
    condition = health_condition(health, 3)
    assert (condition.status, condition.observed_generation) == ("False", 3)
    # each finding once: the tie goes to the worse
    assert condition.reason == R.DRIVER_FAILED
    assert "3 of 4 GPU nodes unhealthy, 9 of 16 GPUs healthy" in condition.message
    assert [(n.name, n.reason) for n in unhealthy_nodes(health)] == [
        ("a-2", "GpusUnhealthy"), ("b-1", "GpusMissing"), ("b-2", "DriverFailed")]  # fmt: skip


def test_the_condition_while_healthy_waiting_and_empty(registry: MachineTypeRegistry) -> None:
    healthy = gpu_health([observed(body(), registry)])
    waiting = gpu_health(
        [
            observed(body(), registry),
            observed(body(name="new", capacity=None), registry),
        ]
    )
    assert (health_condition(healthy, 1).status, health_condition(healthy, 1).reason) == (
        "True", "GpusHealthy")  # fmt: skip
    assert health_condition(healthy, 1).message == "4 of 4 GPUs healthy"
    assert (health_condition(waiting, 1).status, health_condition(waiting, 1).reason) == (
        "Unknown", "NotAdvertised")  # fmt: skip
    assert health_condition(gpu_health(()), 1).reason == "NoGpuNodes"


def test_the_unhealthy_list_is_bounded_and_marks_show(registry: MachineTypeRegistry) -> None:
    many = [body(name=f"n-{i:03}", allocatable="0") for i in range(STATUS_UNHEALTHY_LIMIT + 7)]
    many[0]["status"]["conditions"] = [
        {"type": NODE_CONDITION, "status": "True", "reason": "GpusUnhealthy"}]  # fmt: skip
    health = gpu_health([observed(b, registry) for b in many])
    shown = unhealthy_nodes(health)
    assert len(shown) == STATUS_UNHEALTHY_LIMIT
    assert len(health.unhealthy) == len(many)
    assert (shown[0].marked, shown[1].marked) == (True, False)
    assert "; and 22 more" in health_condition(health, 1).message


def _said(status: str, reason: str, *names: str) -> dict[str, object]:
    """A Gpu.status as the API stores it, with GpusHealthy and the unhealthy nodes."""
    return {
        "conditions": [{"type": "GpusHealthy", "status": status, "reason": reason,
                        "message": f"{len(names)} unhealthy"}],
        "unhealthyNodes": [{"name": n} for n in names],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("before", "after", "event"),
    [
        (_said("True", "GpusHealthy"), _said("False", "GpusUnhealthy", "a"),
         ("Warning", "GpusUnhealthy")),
        (_said("False", "GpusUnhealthy", "a"), _said("False", "GpusUnhealthy", "a", "b"),
         ("Warning", "GpusUnhealthy")),
        (_said("False", "GpusUnhealthy", "a"), _said("False", "GpusMissing", "a"),
         ("Warning", "GpusMissing")),
        (_said("False", "GpusUnhealthy", "a", "b"), _said("False", "GpusUnhealthy", "a"), None),
        (_said("False", "GpusUnhealthy", "a"), _said("True", "GpusHealthy"),
         ("Normal", "GpusHealthy")),
        (_said("Unknown", "NotAdvertised"), _said("True", "GpusHealthy"), None),
        (_said("True", "GpusHealthy"), _said("True", "GpusHealthy"), None),
    ],
    ids=["turns unhealthy", "another node", "another finding", "one recovers", "all recover",
         "first advertised", "nothing new"],
)  # fmt: skip
def test_health_events_once_per_transition(
    before: dict[str, object], after: dict[str, object], event: tuple[str, str] | None
) -> None:
    found = health_event(before, after)
    assert (None if found is None else (str(found.type), found.reason)) == event


def test_no_allocatable_reported_is_no_withdrawal(registry: MachineTypeRegistry) -> None:
    """A body without status.allocatable (a dump, a test fleet) says nothing of withdrawn GPUs."""
    judged = node_health(observed(body(allocatable=None), registry), "gpu", shared=False,
                         device_plugin=True)  # fmt: skip
    assert (judged.reason, judged.healthy) == (None, 4)


@pytest.mark.parametrize("device_plugin", [True, False])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize(("case", "node_body"), [(c[0], c[1]) for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_the_sums_are_what_node_health_judges(
    registry: MachineTypeRegistry, case: str, node_body: dict[str, Any], shared: bool,
    device_plugin: bool,
) -> None:  # fmt: skip
    """gpu_health sums the nodes every source agrees on without judging them one by one: the
    same sums, findings and waiting nodes as node_health's, for every case and flag."""
    facts = observed(node_body, registry)
    judged = node_health(facts, "gpu", shared=shared, device_plugin=device_plugin)
    health = gpu_health([facts], shared=shared, device_plugin=device_plugin)
    assert (health.healthy_gpus, health.total_gpus) == (judged.healthy, judged.total), case
    assert health.unhealthy == ((judged,) if judged.reason is not None else ()), case
    assert health.unadvertised == (() if judged.advertised else (judged,)), case
