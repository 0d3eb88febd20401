"""The store of compact facts: what the informers saw, as the reconcile loop reads it.

One `Collection` per watched resource, keyed by "namespace/name" (or the name). Every entry
keeps the object's resourceVersion next to its facts, so that a watch event older than what a
write returned (server-side apply answers with the object as stored) is ignored rather than
rolling the store back. Resource versions are compared as integers: etcd revisions, which
the API server has always served (and KEP-5504 makes comparable by contract).

The store lives on the event loop's thread; informers hand their results over with
`loop.call_soon_threadsafe`. Any change of facts sets `changed`, which wakes the loop.
Equal facts (a Node heartbeat) change nothing and wake nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

log = logging.getLogger(__name__)

T = TypeVar("T")


class Resource(str, Generic[T]):
    """A collection's name that says which facts it holds: to mypy, `store.get(NODES, name)`
    is an `ObservedNode | None` (observe/watches.py), `store.get("nodes", name)` only Any. At run
    time it is the plain string."""

    __slots__ = ()


Listener = Callable[[str, Any], None]
"""Called with (key, facts or None) when an entry of a collection changes."""


def version_of(resource_version: Any) -> int | None:
    """A resourceVersion as a number, or None where it is not one."""
    text = str(resource_version or "")
    return int(text) if text.isdigit() else None


def newer(candidate: int | None, current: int | None) -> bool:
    """True unless both versions are known and the candidate is older."""
    return candidate is None or current is None or candidate >= current


GONE_KEPT = 256
"""Deleted keys remembered per resource (Collection.gone)."""


@dataclass(frozen=True, slots=True)
class Entry:
    version: int | None
    facts: Any


@dataclass
class Collection:
    """The entries of one resource, and whether its first LIST has completed."""

    entries: dict[str, Entry] = field(default_factory=dict)
    synced: bool = False
    absent: bool = False
    """The resource type is not served (its CRD is not installed)."""
    unserved: bool = False
    """Its CRD exists but does not serve the version asked for (an older Flux)."""
    gone: dict[str, int] = field(default_factory=dict)
    """Keys deleted, with the resourceVersion of their deletion (at most GONE_KEPT, oldest
    dropped first). A write's answer older than that does not bring the object back: the
    answer to a DELETE (the object with its deletionTimestamp) can arrive after the watch's
    DELETED event, and would leave a ghost the loop waits on for ever."""

    def facts(self) -> list[Any]:
        return [entry.facts for entry in self.entries.values()]

    def delete(self, key: str, gone_at: int | None) -> bool:
        """Drop the entry of `key` (deleted at resourceVersion `gone_at` if known). True when
        there was one."""
        if gone_at is not None:
            self.gone.pop(key, None)
            self.gone[key] = gone_at
            while len(self.gone) > GONE_KEPT:
                del self.gone[next(iter(self.gone))]
        return self.entries.pop(key, None) is not None


@dataclass
class Changes:
    """Says that the store changed, to everyone who waits for it: an Event of its own per
    waiter (`subscribe`; a kopf daemon per Gpu), so that one that clears its own never hides a
    change from another; and one shared Event (`set`, `clear`, `is_set`, `wait`), for a single
    waiter."""

    shared: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: set[asyncio.Event] = field(default_factory=set)

    def set(self) -> None:
        self.shared.set()
        for waiter in self.waiters:
            waiter.set()

    def clear(self) -> None:
        self.shared.clear()

    def is_set(self) -> bool:
        return self.shared.is_set()

    async def wait(self) -> bool:
        return await self.shared.wait()

    def subscribe(self) -> asyncio.Event:
        """An Event that every later change sets (set now: what changed before is news)."""
        waiter = asyncio.Event()
        waiter.set()
        self.waiters.add(waiter)
        return waiter

    def unsubscribe(self, waiter: asyncio.Event) -> None:
        self.waiters.discard(waiter)


@dataclass
class Store:
    collections: dict[str, Collection] = field(default_factory=dict)
    changed: Changes = field(default_factory=Changes)
    listeners: dict[str, list[Listener]] = field(default_factory=dict)

    def collection(self, resource: str) -> Collection:
        return self.collections.setdefault(resource, Collection())

    def listen(self, resource: str, listener: Listener) -> None:
        self.listeners.setdefault(resource, []).append(listener)

    @overload
    def facts(self, resource: Resource[T]) -> list[T]: ...
    @overload
    def facts(self, resource: str) -> list[Any]: ...
    def facts(self, resource: str) -> list[Any]:
        return self.collection(resource).facts()

    @overload
    def get(self, resource: Resource[T], key: str) -> T | None: ...
    @overload
    def get(self, resource: str, key: str) -> Any: ...
    def get(self, resource: str, key: str) -> Any:
        entry = self.collection(resource).entries.get(key)
        return entry.facts if entry is not None else None

    def synced(self, *resources: str) -> bool:
        return all(self.collection(r).synced for r in resources)

    def put(self, resource: str, key: str, entry: Entry | None, gone_at: int | None = None) -> bool:
        """One object changed (None: deleted, at resourceVersion `gone_at` if known). True
        when the facts changed."""
        coll = self.collection(resource)
        old = coll.entries.get(key)
        if entry is None:
            if not coll.delete(key, gone_at):
                return False
        elif old is not None and not newer(entry.version, old.version):
            return False  # a stale event: a write already told us more
        elif old is None and entry.version is not None and entry.version <= coll.gone.get(key, -1):
            return False  # deleted since: the answer of a write made before the deletion
        elif old is not None and old.facts == entry.facts:
            # the same facts (a heartbeat): keep their object, so the plan cache's compare of
            # the cluster's facts stays an identity check per Node (facts.cluster.ClusterFacts)
            coll.gone.pop(key, None)
            coll.entries[key] = Entry(entry.version, old.facts)
            return False
        else:
            coll.gone.pop(key, None)
            coll.entries[key] = entry
        facts = None if entry is None else entry.facts
        for listener in self.listeners.get(resource, ()):
            listener(key, facts)
        self.changed.set()
        return True

    def replace(
        self, resource: str, entries: Mapping[str, Entry], list_version: int | None,
        absent: bool = False,
    ) -> bool:  # fmt: skip
        """A fresh LIST: its entries replace the old ones, except entries a write made newer."""
        coll = self.collection(resource)
        fresh = dict(entries)
        for key, old in coll.entries.items():
            kept = fresh.get(key)
            if (kept is None and not newer(list_version, old.version)) or (
                kept is not None and not newer(kept.version, old.version)
            ):
                fresh[key] = old  # written after the list was taken
        before = {k: e.facts for k, e in coll.entries.items()}
        first = not coll.synced or coll.absent != absent
        coll.entries, coll.synced, coll.absent, coll.unserved = fresh, True, absent, False
        changed_keys = _diff(before, {k: e.facts for k, e in fresh.items()})
        for key in changed_keys:
            for listener in self.listeners.get(resource, ()):
                listener(key, self.get(resource, key))
            self.changed.set()
        if first and not changed_keys:
            self.changed.set()  # a first sync is news even when empty
        return bool(changed_keys)

    def mark_unserved(self, resource: str) -> None:
        """Its CRD exists, but listing the version asked for keeps answering 404. That is known
        now (synced): an operator that starts next to an older Flux's CRDs must not wait for a
        first list that never comes, but say FluxIncompatible."""
        coll = self.collection(resource)
        if not coll.unserved or not coll.synced:
            coll.unserved, coll.synced = True, True
            self.changed.set()

    def forget(self, resource: str) -> None:
        """Stop tracking a resource (its informer stopped): empty and not synced."""
        coll = self.collection(resource)
        had = bool(coll.entries)
        coll.entries, coll.synced = {}, False
        if had:
            self.changed.set()


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    keys: Iterable[str] = {*before, *after}
    return sorted(k for k in keys if before.get(k) != after.get(k))
