"""Node marks for GPU health: which nodes get the manager's mark and cordon
(extensions/node_marks/marks.py, pure), and the loop writing them once, clearing them, and
never writing twice."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from kyma_gpu.api.models import HealthSpec, Remediation
from kyma_gpu.extensions import NODE_FOLDS
from kyma_gpu.extensions.node_marks.conditions import HealthReason
from kyma_gpu.extensions.node_marks.facts import GpuDevices, NodeMarkFacts, devices_of, mark_of
from kyma_gpu.extensions.node_marks.health import gpu_health
from kyma_gpu.extensions.node_marks.machine import Phase as MarksPhase
from kyma_gpu.extensions.node_marks.marks import (
    MarkGround,
    allowed,
    mark_ground,
    markable,
    node_writes,
)
from kyma_gpu.extensions.node_marks.names import CORDON_ANNOTATION, NODE_CONDITION
from kyma_gpu.facts import MachineTypeRegistry, ObservedNode, observe_node
from kyma_gpu.observe.store import Entry, version_of
from kyma_gpu.observe.watches import FLUX, NODES
from kyma_gpu.reconcile.machine import Phase
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import cpu_node, node
from tests.unit.test_loop import World, installed, new_world


def observed(body: Mapping[str, Any], registry: MachineTypeRegistry) -> ObservedNode:
    """A Node body's facts, with what the registered extensions keep of it (node marks)."""
    return observe_node(body, registry, NODE_FOLDS)


MARK = HealthSpec(remediation=Remediation.MARK_NODES)
CORDON = HealthSpec(remediation=Remediation.MARK_AND_CORDON)


def gpu(name: str, allocatable: str = "1", pool: str = "gpu", **extra: Any) -> dict[str, Any]:
    """A g6.xlarge (one L4); allocatable 0: the device plugin withdrew it."""
    body = node(name, pool=pool, capacity={"nvidia.com/gpu": "1"})
    body["status"]["allocatable"] = {"nvidia.com/gpu": allocatable}
    for key, value in extra.items():
        body.setdefault(key, {}).update(copy.deepcopy(value))
    return body


MARKED = {"conditions": [{"type": NODE_CONDITION, "status": "True", "reason": "GpusUnhealthy"}]}
CLEARED = {"conditions": [{"type": NODE_CONDITION, "status": "False", "reason": "GpusHealthy"}]}
OURS = {"annotations": {CORDON_ANNOTATION: NODE_CONDITION}}


def writes(registry: MachineTypeRegistry, spec: HealthSpec, *bodies: dict[str, Any]) -> list[
        tuple[str, bool | None, bool | None]]:  # fmt: skip
    facts = [observed(b, registry) for b in bodies]
    health = gpu_health([f for f in facts if f.is_gpu])
    return [(w.name, w.unhealthy, w.cordon) for w in node_writes(health, spec, facts)]


def test_off_writes_nothing_to_healthy_or_unhealthy_nodes(registry: MachineTypeRegistry) -> None:
    assert writes(registry, HealthSpec(), gpu("a", "0"), gpu("b"), cpu_node()) == []


def test_mark_an_unhealthy_node_once(registry: MachineTypeRegistry) -> None:
    assert writes(registry, MARK, gpu("a", "0"), gpu("b")) == [("a", True, None)]
    assert writes(registry, MARK, gpu("a", "0", status=MARKED), gpu("b")) == []


def test_recovery_and_off_clear_the_mark_and_uncordon_only_ours(
    registry: MachineTypeRegistry,
) -> None:

    mine = gpu("a", status=MARKED, metadata=OURS, spec={"unschedulable": True})
    theirs = gpu("b", spec={"unschedulable": True})
    assert writes(registry, CORDON, mine, theirs) == [("a", False, False)]
    assert writes(registry, HealthSpec(), gpu("a", "0", status=MARKED)) == [("a", False, None)]
    assert writes(registry, HealthSpec(), gpu("a", status=CLEARED)) == []


def test_cordon_only_what_is_schedulable(registry: MachineTypeRegistry) -> None:
    every = HealthSpec(remediation=Remediation.MARK_AND_CORDON, max_marked_percent=50)
    assert writes(registry, every, gpu("a", "0"), gpu("b", "0", spec={"unschedulable": True}),
                  gpu("c"), gpu("d")) == [("a", True, True), ("b", True, None)]  # fmt: skip


@pytest.mark.parametrize(("nodes", "percent", "marks"), [(10, 20, 2), (3, 20, 1), (1, 1, 1),
                                                         (100, 100, 100), (7, 50, 3)])  # fmt: skip
def test_the_share_of_a_pool(nodes: int, percent: int, marks: int) -> None:
    assert allowed(nodes, percent) == marks


def test_a_pool_gets_at_most_its_share_marked_ones_keep_their_place(
    registry: MachineTypeRegistry,
) -> None:
    pool = [gpu(f"n-{i}", "0") for i in range(5)] + [gpu(f"n-{i}") for i in range(5, 10)]
    pool[3] = gpu("n-3", "0", status=MARKED)
    other = [gpu("o-1", "0", pool="other")]
    found = writes(registry, MARK, *pool, *other)
    # 10 nodes at 20 %: 2 marks; n-3 holds one already, n-0 gets the other; o-1 is its own pool
    assert found == [("n-0", True, None), ("o-1", True, None)]


def test_a_wrong_model_is_reported_never_marked(registry: MachineTypeRegistry) -> None:
    wrong = gpu("a", metadata={"labels": {"nvidia.com/gpu.product": "NVIDIA-A10G"}})
    assert writes(registry, MARK, wrong) == []


def test_a_node_that_left_the_gpu_pools_is_cleared_never_marked(
    registry: MachineTypeRegistry,
) -> None:
    out = gpu("a", "0", status=MARKED, metadata={"labels": {"gpu.kyma-project.io/gpu": "false"}})
    assert writes(registry, MARK, out) == [("a", False, None)]


# -- the loop --


def _world(catalog: Catalog, spec: dict[str, Any], *bodies: dict[str, Any]) -> World:
    world = new_world(catalog, spec=spec)
    registry = catalog.machine_types
    world.store.replace(NODES, {b["metadata"]["name"]: Entry(1, observed(b, registry))
                                for b in bodies}, 1)  # fmt: skip
    world.api.nodes = {b["metadata"]["name"]: copy.deepcopy(b) for b in bodies}
    return installed(world)


def _set(world: World, body: dict[str, Any]) -> None:
    """The kubelet (or a test) changed a Node."""
    name = body["metadata"]["name"]
    world.api.nodes[name] = copy.deepcopy(body)
    facts = observed(body, world.loop.catalog.machine_types)
    world.store.put(NODES, name, Entry(int(world.api.next_version()), facts))


def _facts(world: World, name: str) -> ObservedNode:
    found = world.store.get(NODES, name)
    assert found is not None
    return found


def test_the_loop_marks_cordons_then_clears_and_writes_nothing_more(catalog: Catalog) -> None:
    world = _world(catalog, {"health": {"remediation": "MarkAndCordon"}}, gpu("a"), gpu("b"))
    world.run()
    assert world.run() is not MarksPhase.MARKING_NODES
    assert world.api.writes() == []
    _set(world, gpu("a", "0"))
    world.run()
    assert world.api.writes() == ["mark Node a", "cordon Node a", "status"]
    mark = mark_of(_facts(world, "a"))
    assert mark is not None
    assert (mark.unhealthy, mark.cordoned, mark.unschedulable) == (True, True, True)
    assert world.api.nodes["a"]["status"]["conditions"][0]["reason"] == "GpusUnhealthy"
    status = world.api.gpu["status"]
    assert status["gpus"] == "1/2"
    assert status["unhealthyNodes"][0]["marked"] is True
    world.run()
    assert world.api.writes() == []  # marked once: the write's answer is in the store
    _set(
        world,
        {
            **world.api.nodes["a"],
            "status": {**world.api.nodes["a"]["status"], "allocatable": {"nvidia.com/gpu": "1"}},
        },
    )
    world.run()
    mark = mark_of(_facts(world, "a"))
    assert mark is not None
    assert (mark.unhealthy, mark.cordoned, mark.unschedulable) == (False, False, False)
    assert world.api.gpu["status"]["gpus"] == "2/2"


def test_a_failed_mark_is_retried_and_the_status_still_shows_health(catalog: Catalog) -> None:
    world = _world(catalog, {"health": {"remediation": "MarkNodes"}}, gpu("a"), gpu("b"))
    world.run()
    world.api.fail = [503]
    _set(world, gpu("a", "0"))
    assert world.run() is Phase.FAILED
    assert world.api.gpu["status"]["unhealthyNodeCount"] == 1
    assert world.api.nodes["a"]["status"].get("conditions") is None


def test_a_deletion_clears_every_mark_before_it_releases_the_gpu(catalog: Catalog) -> None:
    world = _world(catalog, {"health": {"remediation": "MarkAndCordon"}}, gpu("a"), gpu("b"))
    _set(world, gpu("a", "0"))
    world.run()
    mark = mark_of(_facts(world, "a"))
    assert mark is not None
    assert (mark.unhealthy, mark.cordoned) == (True, True)
    world.edit(deletionTimestamp="2026-12-04T00:00:00Z")
    world.nothing_on_demand()
    assert world.run() is Phase.UNINSTALLING
    for plural in FLUX:
        world.store.replace(plural, {}, version_of(world.api.next_version()))
    assert world.run() is Phase.RELEASED
    assert world.api.calls[:2] == ["mark Node a", "cordon Node a"]
    mark = mark_of(_facts(world, "a"))
    assert mark is not None
    assert (mark.unhealthy, mark.cordoned, mark.unschedulable) == (False, False, False)


FAILED_UPGRADE = {"nvidia.com/gpu-driver-upgrade-state": "upgrade-failed"}
TENANT_LABELS = {"feature.node.kubernetes.io/pci-10de.present": "true",
                 "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "4"}  # fmt: skip
"""What NFD rules (spec.values, extraLabelNs) or a node itself can publish on any node."""


def _node(name: str, *, sections: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """builders.node, with `sections` (status, metadata, spec) merged in as gpu() does."""
    body = node(name, **kwargs)
    for key, value in (sections or {}).items():
        body.setdefault(key, {}).update(copy.deepcopy(value))
    return body


def _labelled_cpu(name: str = "cpu", pool: str = "cpu") -> dict[str, Any]:
    """An m5.large (no GPU, not in the registry) that NFD rules made look like a GPU node whose
    driver upgrade failed (issue 43)."""
    return node(name, instance_type="m5.large", pool=pool,
                labels={**TENANT_LABELS, **FAILED_UPGRADE})  # fmt: skip


@pytest.mark.parametrize(("body", "ground"), [
    (gpu("a"), MarkGround.REPORTED),
    (gpu("a", "0"), MarkGround.REPORTED),  # capacity 1, allocatable 0: the kubelet reported it
    (node("a", capacity={"nvidia.com/mig-1g.10gb": "7"}, instance_type="n1-x",
          labels=TENANT_LABELS), MarkGround.REPORTED),
    (node("a", labels=FAILED_UPGRADE), MarkGround.MACHINE_TYPE),  # g6.xlarge, no capacity yet
    (node("a", instance_type="n1-x", capacity={"nvidia.com/gpu": "0"}, labels=TENANT_LABELS),
     None),
    (_node("a", instance_type="n1-x", labels=TENANT_LABELS, sections={"status": MARKED}),
     MarkGround.MARKED),
    (_node("a", instance_type="n1-x", labels=TENANT_LABELS, sections={"status": CLEARED}),
     None),
    (_labelled_cpu(), None),
    (node("a", instance_type="m5.large", labels={"gpu.kyma-project.io/gpu": "true"}), None),
], ids=["capacity", "allocatable-0", "mig", "registry", "capacity-0", "marked", "cleared",
        "nfd-labels", "opt-in"])  # fmt: skip
def test_what_grounds_a_mark(
    registry: MachineTypeRegistry, body: dict[str, Any], ground: MarkGround | None
) -> None:
    """Only facts no tenant writes: the kubelet's GPU resources, the registry's machine type,
    the mark itself; never NFD's or GFD's labels, nor the opt-in label."""
    facts = observed(body, registry)
    assert facts.is_gpu
    assert mark_ground(facts) is ground


def test_a_cpu_node_with_nfd_labels_is_never_marked_or_cordoned(
    registry: MachineTypeRegistry,
) -> None:
    """Issue 43: an m5.large labelled by NFD rules is a GPU node to detection, judged
    DriverFailed, and still never marked nor cordoned, at any share of its pool."""
    every = HealthSpec(remediation=Remediation.MARK_AND_CORDON, max_marked_percent=50)
    facts = observed(_labelled_cpu(), registry)
    assert facts.is_gpu
    assert not markable(facts)
    health = gpu_health([facts])
    assert [(n.name, n.reason) for n in health.unhealthy] == [("cpu", HealthReason.DRIVER_FAILED)]
    assert writes(registry, every, _labelled_cpu()) == []
    assert writes(registry, MARK, _labelled_cpu()) == []


def test_a_node_it_may_not_mark_takes_no_place_in_the_share(
    registry: MachineTypeRegistry,
) -> None:
    """The labelled node sorts first in its pool: the pool's one mark goes to the real GPU."""
    fake = _labelled_cpu("a-fake", pool="gpu")
    assert writes(registry, MARK, fake, gpu("b", "0"), gpu("c")) == [("b", True, None)]


def test_a_label_alone_never_marks_a_node(registry: MachineTypeRegistry) -> None:
    """The upgrade controller's upgrade-failed and GPU feature discovery's count are labels:
    a NodeFeature object in any namespace NFD reads can write them (issue 49, finding 3). A
    g6.xlarge whose device plugin has not reported yet, or that reports its GPU, is reported
    DriverFailed / GpusMissing, and never marked."""
    bare = node("a", pool="gpu", labels=FAILED_UPGRADE)
    forged = node("b", pool="gpu", labels={"nvidia.com/gpu.count": "0"},
                  capacity={"nvidia.com/gpu": "1"})  # fmt: skip
    facts = [observed(b, registry) for b in (bare, forged)]
    health = gpu_health(facts)
    assert {(n.name, n.reason, n.grounded) for n in health.unhealthy} == {
        ("a", HealthReason.DRIVER_FAILED, False),
        ("b", HealthReason.GPUS_MISSING, False),
    }
    assert writes(registry, CORDON, bare, forged) == []


def test_a_failed_driver_the_kubelet_shows_is_marked(registry: MachineTypeRegistry) -> None:
    """upgrade-failed, and the device plugin withdrew the GPU (allocatable 0): the kubelet's
    own facts show it."""
    failed = _node("a", pool="gpu", labels=FAILED_UPGRADE, capacity={"nvidia.com/gpu": "1"},
                   sections={"status": {"allocatable": {"nvidia.com/gpu": "0"}}})  # fmt: skip
    assert writes(registry, CORDON, failed) == [("a", True, True)]


def test_fewer_gpu_resources_than_the_machine_type_has_is_marked(
    registry: MachineTypeRegistry,
) -> None:
    """A g6.12xlarge (4 GPUs) whose kubelet advertises 3: GpusMissing on the kubelet's facts
    and the registry's, whatever GPU feature discovery's label says."""
    short = node("a", pool="gpu", instance_type="g6.12xlarge", capacity={"nvidia.com/gpu": "3"},
                 labels={"nvidia.com/gpu.count": "4"})  # fmt: skip
    assert writes(registry, CORDON, short) == [("a", True, True)]


def test_a_marked_node_that_lost_its_gpus_keeps_its_mark_and_is_cleared(
    registry: MachineTypeRegistry,
) -> None:
    """An n1 with attached GPUs (no registry type) was marked while the kubelet reported them;
    with capacity 0 now it keeps the mark and gets its cordon ("has reported"), and is cleared
    when it recovers."""
    labels = {"nvidia.com/gpu.present": "true", "gpu.kyma-project.io/gpu-count": "1"}
    lost = _node("a", instance_type="n1-x", capacity={"nvidia.com/gpu": "0"}, labels=labels,
                 sections={"status": MARKED})  # fmt: skip
    assert writes(registry, CORDON, lost) == [("a", True, True)]  # now GpusMissing
    back = _node(
        "a",
        instance_type="n1-x",
        capacity={"nvidia.com/gpu": "1"},
        labels=labels,
        sections={"status": MARKED, "metadata": OURS, "spec": {"unschedulable": True}},
    )
    assert writes(registry, CORDON, back) == [("a", False, False)]


def test_node_marks_keep_their_facts_in_the_nodes_extras(registry: MachineTypeRegistry) -> None:
    """Issue 50, point 4: GPU health's devices and the mark are the extension's share of the
    Node fold (facts.py `node_fold`), kept in ObservedNode.extras; the core's fold alone keeps
    none, and a node the extension has nothing to say of shares the one empty tuple."""
    marked = gpu("a", "0", status=MARKED, metadata=OURS, spec={"unschedulable": True})
    assert observe_node(marked, registry).extras == ()
    kept = observed(marked, registry)
    assert [type(x) for x in kept.extras] == [GpuDevices, NodeMarkFacts]
    assert devices_of(kept) == GpuDevices(expected=1, capacity=1, allocatable=0, model_matches=True)
    mark = NodeMarkFacts(unhealthy=True, reason="GpusUnhealthy", unschedulable=True,
                         cordoned=True, condition=True)  # fmt: skip
    assert mark_of(kept) == mark
    assert observed(marked, registry).facts == observe_node(marked, registry).facts
    assert observed(cpu_node(), registry).extras is ()  # noqa: F632 (the shared empty tuple)
    assert mark_of(observed(gpu("b"), registry)) is None
