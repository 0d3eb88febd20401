"""A deleted object stays deleted when a write's answer from before its deletion arrives later.

Seen in tests/e2e/test_flux_provided.py: the loop deleted the HelmRepository; Flux removed its
finalizer at once, so the watch's DELETED event reached the store before the loop wrote the
DELETE's answer (the object with its deletionTimestamp) back. That answer brought the object
back, and the Gpu waited for it to go, for ever."""

from __future__ import annotations

from kyma_gpu.observe.store import GONE_KEPT, Entry, Store

REPOS = "helmrepositories"


def _store_with_repo(version: int) -> Store:
    store = Store()
    store.replace(REPOS, {"gpu-operator": Entry(version, "live")}, version)
    return store


def test_an_answer_older_than_the_deletion_does_not_bring_it_back() -> None:
    store = _store_with_repo(10)
    assert store.put(REPOS, "gpu-operator", None, gone_at=12)  # the watch: DELETED at 12
    assert not store.put(REPOS, "gpu-operator", Entry(11, "deleting"))  # the DELETE's answer
    assert store.get(REPOS, "gpu-operator") is None


def test_an_object_made_again_after_its_deletion_is_there() -> None:
    store = _store_with_repo(10)
    store.put(REPOS, "gpu-operator", None, gone_at=12)
    assert store.put(REPOS, "gpu-operator", Entry(15, "new"))
    assert store.get(REPOS, "gpu-operator") == "new"
    store.put(REPOS, "gpu-operator", None, gone_at=20)
    assert store.get(REPOS, "gpu-operator") is None


def test_without_a_deletion_version_an_answer_still_counts() -> None:
    """A deletion without a version (as before) keeps the old behaviour: the next write wins."""
    store = _store_with_repo(10)
    store.put(REPOS, "gpu-operator", None)
    assert store.put(REPOS, "gpu-operator", Entry(11, "written"))


def test_the_deleted_keys_kept_are_bounded() -> None:
    store = Store()
    for index in range(GONE_KEPT + 50):
        store.put(REPOS, f"r{index}", None, gone_at=index)
    gone = store.collection(REPOS).gone
    assert len(gone) == GONE_KEPT
    assert "r0" not in gone  # the oldest go first
    assert f"r{GONE_KEPT + 49}" in gone
