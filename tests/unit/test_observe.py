"""The store and the informer, with a scripted reader in place of the API server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kyma_gpu.errors import Gone, NotFound, TransientError
from kyma_gpu.observe.informer import Informer, ListWatch, WatchSettings
from kyma_gpu.observe.store import Entry, Store

# -- the store --


def test_a_stale_event_does_not_roll_back_what_a_write_returned() -> None:
    store = Store()
    store.replace("things", {}, 1)
    assert store.put("things", "a", Entry(20, "written"))
    assert not store.put("things", "a", Entry(15, "older event"))
    assert store.get("things", "a") == "written"
    assert store.put("things", "a", Entry(21, "newer"))


def test_equal_facts_wake_nothing() -> None:
    store = Store()
    store.replace("things", {"a": Entry(1, "x")}, 1)
    store.changed.clear()
    assert not store.put("things", "a", Entry(2, "x"))
    assert not store.changed.is_set()
    assert store.collection("things").entries["a"].version == 2


def test_a_relist_keeps_entries_written_after_it_was_taken() -> None:
    store = Store()
    store.replace("things", {"a": Entry(5, "old")}, 5)
    store.put("things", "b", Entry(30, "created by a write"))
    store.put("things", "a", Entry(31, "updated by a write"))
    store.replace("things", {"a": Entry(6, "listed")}, 25)
    assert store.get("things", "a") == "updated by a write"
    assert store.get("things", "b") == "created by a write"
    store.replace("things", {}, 40)
    assert store.facts("things") == []


def test_a_version_never_served_counts_as_synced() -> None:
    """Started next to an older Flux's CRDs, the first list never succeeds: the loop must not
    wait for it (seen in CI: 60 s of "waiting for the first list of helmreleases")."""
    store = Store()
    assert not store.synced("helmreleases")
    store.mark_unserved("helmreleases")
    coll = store.collection("helmreleases")
    assert (coll.synced, coll.unserved) == (True, True)
    assert store.changed.is_set()
    store.changed.clear()
    store.mark_unserved("helmreleases")  # said once
    assert not store.changed.is_set()
    store.replace("helmreleases", {}, 3)  # served after all
    assert (coll.synced, coll.unserved) == (True, False)


def test_first_sync_wakes_even_when_empty_and_forget_unsyncs() -> None:
    store = Store()
    store.replace("pods", {}, 1)
    assert store.changed.is_set()
    assert store.synced("pods")
    store.forget("pods")
    assert not store.synced("pods")


# -- the informer --


@dataclass
class ScriptedReader:
    """Pages to list, and per watch call a list of events or an error."""

    pages: list[list[dict[str, Any]]]
    watches: list[list[dict[str, Any]] | Exception] = field(default_factory=list)
    list_errors: list[Exception] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def list_page(self, query: Any, limit: int, token: str | None = None) -> dict[str, Any]:
        with self.lock:
            self.calls.append(f"list {token or ''}".strip())
            if self.list_errors:
                raise self.list_errors.pop(0)
        index = int(token or 0)
        more = index + 1 < len(self.pages)
        meta = {"resourceVersion": "100", "continue": str(index + 1) if more else ""}
        return {"items": self.pages[index], "metadata": meta}

    def list_pages(self, query: Any, limit: int) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            page = self.list_page(query, limit, token)
            yield page
            token = page["metadata"]["continue"] or None
            if token is None:
                return

    def watch(self, query: Any, resource_version: str, timeout_seconds: int
              ) -> Iterator[dict[str, Any]]:  # fmt: skip
        with self.lock:
            self.calls.append(f"watch {resource_version}")
            script = self.watches.pop(0) if self.watches else []
        if isinstance(script, Exception):
            raise script
        yield from script
        if not self.watches:
            time.sleep(0.05)


def obj(name: str, rv: int, color: str = "red") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "color": color}


def fold(body: Mapping[str, Any]) -> Any:
    return None if body.get("color") == "ignored" else body.get("color")


def run_informer(
    reader: ScriptedReader, until: Callable[[Store], bool],
    then: Callable[[Informer], None] = lambda _: None,
    settings: WatchSettings | None = None,
) -> Store:  # fmt: skip
    async def main() -> Store:
        store = Store()
        list_watch = ListWatch("things", None, fold, page_size=2)
        loop = asyncio.get_running_loop()
        informer = Informer(reader, list_watch, store, loop, settings or WatchSettings()).start()
        await asyncio.sleep(0.2)
        then(informer)
        deadline = time.monotonic() + 5
        while not until(store) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        informer.stop()
        return store

    return asyncio.run(main())


def test_pages_are_folded_and_uninteresting_objects_dropped() -> None:
    reader = ScriptedReader(pages=[[obj("a", 1), obj("b", 2)], [obj("c", 3, "ignored")]])
    store = run_informer(reader, lambda s: s.synced("things"))
    assert sorted(store.collection("things").entries) == ["a", "b"]
    assert reader.calls[:2] == ["list", "list 1"]


def test_watch_events_update_the_store() -> None:
    events = [
        {"type": "MODIFIED", "object": obj("a", 101, "blue")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "102"}}},
        {"type": "DELETED", "object": obj("b", 103)},
        {"type": "ADDED", "object": obj("d", 104, "green")},
    ]
    reader = ScriptedReader(pages=[[obj("a", 1), obj("b", 2)]], watches=[events])
    store = run_informer(reader, lambda _: "watch 104" in reader.calls)
    assert store.get("things", "a") == "blue"
    assert store.get("things", "b") is None
    assert "watch 104" in reader.calls  # the next watch resumes where the last one ended


def test_gone_lists_again() -> None:
    reader = ScriptedReader(pages=[[obj("a", 1)]], watches=[Gone("watch", 410)])
    run_informer(reader, lambda _: reader.calls.count("list") >= 2)
    assert reader.calls[:3] == ["list", "watch 100", "list"]


def test_not_found_is_absent_until_rechecked() -> None:
    reader = ScriptedReader(pages=[[obj("a", 1)]], list_errors=[NotFound("list", 404)])
    store = run_informer(reader, lambda s: s.get("things", "a") == "red",
                         settings=WatchSettings(absent_recheck=0.2))  # fmt: skip
    assert store.synced("things")
    assert not store.collection("things").absent


def test_transient_errors_back_off_and_recover() -> None:
    errors: list[Exception] = [TransientError("list", 429), TransientError("list", 503)]
    reader = ScriptedReader(pages=[[obj("a", 1)]], list_errors=errors)
    store = run_informer(reader, lambda s: s.synced("things"))
    assert store.get("things", "a") == "red"
    assert reader.calls[:3] == ["list", "list", "list"]


def test_an_appearing_crd_wakes_an_absent_informer_and_404s_are_retried_meanwhile() -> None:
    # The CRD is announced while the resource still answers 404 (not served yet).
    errors: list[Exception] = [NotFound("list", 404), NotFound("list", 404)]
    reader = ScriptedReader(pages=[[obj("a", 1)]], list_errors=errors)
    store = run_informer(reader, lambda s: s.get("things", "a") == "red",
                         then=lambda informer: informer.crd_present(True))  # fmt: skip
    assert reader.calls[:3] == ["list", "list", "list"]
    assert store.synced("things")


def test_freeze_heap_leaves_the_survivors_to_no_later_collection() -> None:
    """In a process of its own: freezing is process-wide, and this one is pytest's."""
    code = (
        "import gc\n"
        "from kyma_gpu.observe.informer import freeze_heap\n"
        "kept = [{'node': i} for i in range(1000)]\n"
        "frozen = freeze_heap()\n"
        "assert gc.get_freeze_count() == frozen >= 1000, frozen\n"
        "assert not any(gc.get_objects(generation) for generation in (1, 2)), 'left tracked'\n"
        "print(frozen)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 1000
