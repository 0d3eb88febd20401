"""An informer of one resource, as in client-go: a paged LIST, then a WATCH from
the list's resourceVersion, each object folded into compact facts at once and its body
dropped; a new LIST after 410 Gone; backoff on errors; never more than two pages in memory
(the one folded and the next one arriving, adapter.list_pages).

It runs in a thread of its own (the API client is blocking) and hands facts to the store on
the event loop's thread. It filters unchanged facts itself, so that a Node heartbeat costs a
JSON parse and a comparison, and nothing crosses to the loop.

A resource whose CRD is not installed answers 404: the informer reports it absent (synced,
empty) and sleeps until `crd_present(True)` (the CRD informer calls it when the CRD appears)
or a long safety interval. While the CRD exists, a 404 means "not served yet" and is retried
with the short backoff; after `unserved_after` attempts the store hears that the CRD does not
serve the version (`Collection.unserved`), and the retries go on. A CRD that is replaced or
goes away ends the watch; the informer lists again, with a short backoff while the API
server's storage for it reinitializes (429/503). Other errors (the API server, the network)
back off like client-go's: doubling from 0.25 s up to 30 s, starting over once two minutes
passed without an error (`Backoff`).
Nothing here ever blocks another informer or the reconcile loop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from kyma_gpu.errors import ApiError, Gone, NotFound, TransientError
from kyma_gpu.observe.store import Entry, Store, version_of

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """How every informer lists, watches and backs off (part of reconcile.settings.Settings)."""

    starting_backoff: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 5.0)
    """Seconds between attempts while a resource whose CRD exists answers 404 (times 0.8 to
    1.2); the last one repeats. Short on purpose: a new CRD is served a moment after it is
    created."""
    error_backoff: float = 0.25
    """After any other error (the API server, the network): the first wait, doubled with each
    error up to `error_backoff_cap`. The first five waits are the starting ones: a CRD whose
    storage reinitializes answers 429 for a moment only."""
    error_backoff_cap: float = 30.0
    """The longest wait after an error, as client-go's: an API server that is down for minutes
    is asked every 30 s, not every 5."""
    error_backoff_reset: float = 120.0
    """After this long without an error the waits start over from `error_backoff` (client-go
    resets its backoff after two minutes of health)."""
    unserved_after: int = 5
    """404s in a row (about 8 s of backoff) after which a CRD that exists is taken as one that
    does not serve the version asked for (an older Flux), rather than one still starting."""
    absent_recheck: float = 300.0
    """A safety net only: an absent resource is listed again when its CRD appears."""
    watch_seconds: int = 60
    """The server ends each watch after this long and the informer resumes it from the last
    resourceVersion. Short on purpose: the client's read timeout is this plus 30 s
    (adapter.py), so a connection that went silent (an overloaded or restarted API server) is
    noticed within 90 s, not after many minutes."""


class Reader(Protocol):
    """The adapter's read side (kyma_gpu.adapter.KubeAdapter)."""

    def list_pages(self, query: Any, limit: int) -> Iterator[dict[str, Any]]: ...

    def watch(
        self, query: Any, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]: ...


Fold = Callable[[Mapping[str, Any]], Any]
"""Body -> compact facts, or None when the object is of no interest."""


class Cause(StrEnum):
    STARTING = "Starting"
    """404 while the resource's CRD exists: a new CRD is served a moment after it is created."""
    SERVER = "Server"
    """Any other error: the API server (5xx, 429), the network, or a bug of ours."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """The errors behind one informer: how many in a row (since its last good watch), how many
    on the server schedule, and when the last one was (monotonic seconds)."""

    in_a_row: int = 0
    server: int = 0
    last_error: float | None = None

    def failed(self, cause: Cause, clock: float, settings: WatchSettings) -> tuple[float, Backoff]:
        """The seconds to wait after an error of `cause` at `clock` (before jitter), and the
        backoff after it."""
        quiet = self.last_error is None or clock - self.last_error >= settings.error_backoff_reset
        server = 0 if quiet else self.server
        if cause is Cause.STARTING:
            starting = settings.starting_backoff
            delay = starting[min(self.in_a_row, len(starting) - 1)]
            return delay, Backoff(self.in_a_row + 1, server, clock)
        cap = settings.error_backoff_cap
        delay = cap if server >= 32 else min(settings.error_backoff * 2.0**server, cap)
        return delay, Backoff(self.in_a_row + 1, server + 1, clock)

    def succeeded(self) -> Backoff:
        """A list or watch went through: the errors in a row start over, the server schedule
        only once `error_backoff_reset` has passed since the last error."""
        return Backoff(0, self.server, self.last_error)


class GcPause:
    """The cyclic garbage collector off while any thread is inside (counted). The collector is
    the process's, so its holders share one pause: the Informers own it and hand it to every
    Informer of the process (handlers.start gives it to the allowed sources' one too). An
    Informer made without one (tests) gets its own; pauses that overlap still leave the
    collector on once all are left (the one that turned it off turns it on).

    Why: parsing a LIST page of large bodies (Nodes) makes tens of thousands of dicts and lists
    that live until the page is folded. With the collector on, they are promoted through its
    generations, and every few pages a full collection walks the whole heap (the imported
    modules, the client, pydantic): on a big fleet that made JSON parsing most of the start
    (docs/performance.md, "20,000 Nodes, with Flux and the NVIDIA controller"). Nothing a page
    holds is cyclic, and it is dropped before the collector is back on, so the pause defers no
    garbage but the page's own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._was_enabled = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._was_enabled:
                    gc.enable()


def freeze_heap() -> int:
    """Collect once, then move every object that survived into the collector's permanent
    generation (gc.freeze), where no later collection walks it. Called after the first
    reconcile: the compact facts of every Node, the rule catalog and the imported modules are
    long-lived, and a full collection over them grows with the fleet and is paid by whichever
    change happens to trigger it; frozen, it is bounded by what changed since (what it cost
    unfrozen: docs/performance.md, "20,000 Nodes without Flux, on a quiet machine"). Facts
    replaced later are freed by reference counting as before (they hold no cycles). Returns
    the objects frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def default_key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


@dataclass(frozen=True)
class ListWatch:
    """What one informer lists and watches (Kubernetes' ListWatch): the collection (a ListQuery),
    how to fold, how big the pages are, the key."""

    resource: str
    query: Any
    fold: Fold
    page_size: int = 500
    key: Callable[[Mapping[str, Any]], str] = default_key


class Informer:
    def __init__(
        self, reader: Reader, list_watch: ListWatch, store: Store, loop: asyncio.AbstractEventLoop,
        settings: WatchSettings = WatchSettings(), gc_pause: GcPause | None = None,
    ) -> None:  # fmt: skip
        self.reader, self.list_watch, self.store, self.loop = reader, list_watch, store, loop
        self.settings = settings
        self._gc_pause = gc_pause or GcPause()
        """Shared with the other informers of the process (`Informers.gc_pause`)."""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._known: dict[str, Any] = {}
        self._thread = threading.Thread(
            target=self._run, name=f"observe-{list_watch.resource}", daemon=True
        )
        self._said_absent = False
        self._crd_present = False

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop handing facts over at once; the thread ends when its watch returns."""
        self._stop.set()
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def crd_present(self, present: bool) -> None:
        """Its CRD appeared (list at once, and take 404s as "not yet served" for a while)
        or went away."""
        self._crd_present = present
        if present:
            self._wake.set()

    # -- the thread --

    def _run(self) -> None:
        backoff = Backoff()
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                version = self._watch(version)
                backoff = backoff.succeeded()
            except Gone:
                version = None  # expired: list again at once
            except NotFound as err:
                version = None
                if self._crd_present:  # a new CRD is served a moment after it is created
                    if backoff.in_a_row == self.settings.unserved_after:  # ... not this long after
                        self.loop.call_soon_threadsafe(
                            self._hand_over, self.store.mark_unserved, self.list_watch.resource
                        )
                    backoff = self._back_off(backoff, Cause.STARTING, err)
                else:
                    self._absent()
            except ApiError as err:
                backoff = self._back_off(backoff, Cause.SERVER, err)
            except Exception as err:  # a bug must not end observation for good
                log.exception("observe %s: unexpected error", self.list_watch.resource)
                backoff = self._back_off(backoff, Cause.SERVER, err)

    def _back_off(self, backoff: Backoff, cause: Cause, err: Exception) -> Backoff:
        delay, after = backoff.failed(cause, time.monotonic(), self.settings)
        delay *= random.uniform(0.8, 1.2)
        quiet = isinstance(err, TransientError) and backoff.in_a_row < 3
        log.log(logging.INFO if quiet else logging.WARNING, "observe %s: %s; again in %.1fs",
                self.list_watch.resource, err, delay)  # fmt: skip
        self._stop.wait(delay)
        return after

    def _absent(self) -> None:
        if not self._said_absent:
            log.info("observe %s: not served (CRD not installed); waiting for it",
                     self.list_watch.resource)  # fmt: skip
        self._said_absent, self._known = True, {}
        self.loop.call_soon_threadsafe(
            self._hand_over, self.store.replace, self.list_watch.resource, {}, None, True
        )
        self._wake.wait(self.settings.absent_recheck)
        self._wake.clear()

    def _relist(self) -> str:
        began, pages, seen = time.monotonic(), 0, 0
        entries: dict[str, Entry] = {}
        meta: dict[str, Any] = {}
        listing = self.reader.list_pages(self.list_watch.query, self.list_watch.page_size)
        while True:
            with self._gc_pause():  # the page is parsed, folded and dropped before gc runs again
                page = next(listing, None)
                if page is None:
                    break
                pages += 1
                for item in page.get("items") or ():
                    seen += 1
                    self._fold_into(entries, item)
                meta = dict(page.get("metadata") or {})
                del page
        version = str(meta.get("resourceVersion", ""))
        self._said_absent = False
        self._known = {key: entry.facts for key, entry in entries.items()}
        self.loop.call_soon_threadsafe(
            self._hand_over,
            self.store.replace,
            self.list_watch.resource,
            entries,
            version_of(version),
        )
        log.info("observe %s: listed %d objects (%d kept) in %d pages, %.2fs",
                 self.list_watch.resource, seen, len(entries), pages,
                 time.monotonic() - began)  # fmt: skip
        return version

    def _fold_into(self, entries: dict[str, Entry], item: Mapping[str, Any]) -> None:
        facts = self._fold(item)
        if facts is not None:
            meta = item.get("metadata") or {}
            entries[self.list_watch.key(item)] = Entry(
                version_of(meta.get("resourceVersion")), facts
            )

    def _fold(self, body: Mapping[str, Any]) -> Any:
        try:
            return self.list_watch.fold(body)
        except Exception:  # one odd object must not stop observation of the others
            log.exception("observe %s: cannot read %s", self.list_watch.resource, default_key(body))
            return None

    def _watch(self, version: str) -> str:
        """Each event's facts, when they differ from the last ones, to the store."""
        began, resource = time.monotonic(), self.list_watch.resource
        stream = self.reader.watch(self.list_watch.query, version, self.settings.watch_seconds)
        for event in stream:
            if self._stop.is_set():
                break
            obj = event.get("object") or {}
            written = (obj.get("metadata") or {}).get("resourceVersion")
            version = str(written or version)
            if event.get("type") == "BOOKMARK":
                continue
            key = self.list_watch.key(obj)
            facts = None if event.get("type") == "DELETED" else self._fold(obj)
            if self._known.get(key) == facts:
                continue  # a heartbeat, or an object of no interest: nothing crosses to the loop
            if facts is None:
                self._known.pop(key, None)
                put: tuple[Any, ...] = (key, None, version_of(written))  # deleted at
            else:
                self._known[key] = facts
                put = (key, Entry(version_of(written), facts))
            self.loop.call_soon_threadsafe(self._hand_over, self.store.put, resource, *put)
        if time.monotonic() - began < 1.0:
            self._stop.wait(1.0)  # a server that ends watches at once must not make us spin
        return version

    def _hand_over(self, func: Callable[..., Any], *args: Any) -> None:
        """`func(*args)`, on the event loop's thread (`loop.call_soon_threadsafe` brings it
        there): the store's change, unless the informer stopped in between."""
        if not self._stop.is_set():
            func(*args)
