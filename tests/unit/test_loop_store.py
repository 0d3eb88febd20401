"""The store's typed resource keys (observe/store.py `Resource`): typed facts to mypy, the
plain name at run time, so that a typed key and its string find the same collection. And what
the store keeps of an unchanged object, which the plan cache relies on."""

from __future__ import annotations

from kyma_gpu.api.models import GpuSpec
from kyma_gpu.facts import MachineTypeRegistry, cluster_facts, node_facts, observe_node
from kyma_gpu.observe.store import Entry, Resource, Store
from kyma_gpu.observe.watches import CRDS, FLUX, FLUX_RESOURCES, NODES
from kyma_gpu.plan import AllowedSources, Owner
from kyma_gpu.plan.provision import CrdFacts
from kyma_gpu.reconcile.loop import Loop
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import cpu_node, node


def test_a_typed_key_is_its_name() -> None:
    assert NODES == "nodes"
    assert isinstance(NODES, str)
    assert hash(CRDS) == hash("crds")
    assert list(FLUX_RESOURCES) == list(FLUX)


def test_a_typed_key_and_its_name_reach_the_same_collection() -> None:
    store = Store()
    store.put("crds", "a", Entry(1, CrdFacts(uid="a")))
    facts: CrdFacts | None = store.get(CRDS, "a")  # typed: no cast needed
    assert facts == CrdFacts(uid="a")
    assert store.facts(CRDS) == [CrdFacts(uid="a")]
    store.put(CRDS, "b", Entry(1, CrdFacts(uid="b")))
    assert sorted(f.uid for f in store.facts("crds")) == ["a", "b"]
    assert list(store.collections) == ["crds"]


def test_a_resource_has_no_dict() -> None:
    """A key is made once per resource; it carries nothing but its name."""
    key: Resource[int] = Resource("things")
    assert not hasattr(key, "__dict__")


def test_a_heartbeat_keeps_the_facts_object_and_a_change_replaces_it(
    registry: MachineTypeRegistry,
) -> None:
    """Equal facts keep their object (the plan memo compares the cluster's facts by identity
    per Node); the entry's version still moves, so an older event stays refused."""
    store = Store()
    first = observe_node(node("gpu-1"), registry)
    store.put(NODES, "gpu-1", Entry(1, first))
    again = observe_node(node("gpu-1"), registry)
    assert again == first
    assert again is not first
    assert store.put(NODES, "gpu-1", Entry(2, again)) is False
    assert store.get(NODES, "gpu-1") is first
    assert store.collection(NODES).entries["gpu-1"].version == 2
    changed = observe_node(node("gpu-1", pool="other"), registry)
    assert store.put(NODES, "gpu-1", Entry(1, changed)) is False  # older than the entry
    assert store.put(NODES, "gpu-1", Entry(3, changed)) is True
    assert store.get(NODES, "gpu-1") is changed


def test_equal_cluster_facts_hash_alike_and_find_the_memoized_plan(
    registry: MachineTypeRegistry, catalog: Catalog
) -> None:
    bodies = [node(f"gpu-{i}") for i in range(3)] + [cpu_node("cpu-1")]
    nodes = [node_facts(b, registry) for b in bodies]
    a, b = cluster_facts(nodes), cluster_facts(list(reversed(nodes)))
    assert a == b
    assert a is not b
    assert hash(a) == hash(b)
    other = cluster_facts(nodes[:2])
    assert other != a
    loop = Loop(store=Store(), writer=None, catalog=catalog)  # type: ignore[arg-type]
    spec, owner = GpuSpec(), Owner(uid="u")
    planned = loop.plan(spec, a, owner, AllowedSources())
    assert loop.plan(spec, b, owner, AllowedSources()) is planned
    assert loop.plan(spec, other, owner, AllowedSources()) is not planned
