"""The store's typed resource keys (observe/store.py `Resource`): typed facts to mypy, the
plain name at run time, so that a typed key and its string find the same collection."""

from __future__ import annotations

from kyma_gpu.observe.sources import CRDS, FLUX, FLUX_RESOURCES, NODES
from kyma_gpu.observe.store import Entry, Resource, Store
from kyma_gpu.plan.provision import CrdFacts


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
