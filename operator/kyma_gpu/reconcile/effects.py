"""What the reconcile loop is made of besides deciding and stepping (reconcile/loop.py):

- `WriteBack`: what a write answered is the new live state, put into the store at once, so
  that the next `decide` sees it (and the Flux objects whose planned fields the server dropped);
- `Recorder`: the Events on a Gpu, within their budget and without repeats (events.to_post);
- `StatusWriter`: the status, written only when it differs, coalesced while only messages
  and counts change, and its Events;
- `Retries`: when a failed write is tried again, like client-go's rate limiter.

Each is a small object with the writer it needs; the Loop wires them in its constructor.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from pydantic import ValidationError

from kyma_gpu.adapter import ListQuery, ObjectRef, Patch
from kyma_gpu.api.models import GpuStatus
from kyma_gpu.api.resources import FLUX_KINDS
from kyma_gpu.errors import ApiError, PermanentError
from kyma_gpu.facts.gpu import GpuObject, gpu_object
from kyma_gpu.metrics import ErrorKind
from kyma_gpu.observe.store import Entry, Store, version_of
from kyma_gpu.observe.watches import CRDS, GPUS, NODES, flux_facts
from kyma_gpu.plan.actions import LiveObject, live_object, missing
from kyma_gpu.plan.provision import crd_facts
from kyma_gpu.reconcile.machine import Failure
from kyma_gpu.reconcile.settings import LoopSettings
from kyma_gpu.status.events import (
    EVENT_WINDOW_SECONDS,
    GpuEvent,
    GpuRef,
    News,
    Report,
    Sent,
    events_for,
    to_post,
)

log = logging.getLogger(__name__)

_FLUX_PLURAL = MappingProxyType({k.kind: k.plural for k in FLUX_KINDS})


class ClusterApi(Protocol):
    """The adapter's write side (kyma_gpu.adapter.KubeAdapter), and the reads a step makes:
    one object again (the periodic safety pass), the first page of a LIST (an extension's
    read). Generic calls: an extension's writes and reads are made of them."""

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    async def patch(
        self, ref: ObjectRef, body: Sequence[Mapping[str, Any]] | Mapping[str, Any],
        how: Patch = Patch.JSON, subresource: str = "", what: str = "",
    ) -> dict[str, Any]: ...  # fmt: skip

    async def delete(self, ref: ObjectRef) -> dict[str, Any] | None: ...

    async def apply_status(self, name: str, status: Mapping[str, Any]) -> dict[str, Any]: ...

    async def set_finalizers(
        self, name: str, finalizers: list[str], resource_version: str
    ) -> dict[str, Any]: ...

    async def post_event(self, namespace: str, gpu: GpuRef, event: GpuEvent) -> None: ...

    async def read(self, ref: ObjectRef) -> dict[str, Any] | None: ...

    async def read_list(self, query: ListQuery, limit: int) -> dict[str, Any]: ...


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


FluxKey = tuple[str, str, str]
"""kind, namespace, name of one of the module's Flux objects."""


def error_kind(err: ApiError) -> ErrorKind:
    return ErrorKind.PERMANENT if isinstance(err, PermanentError) else ErrorKind.TRANSIENT


def flux_key(obj: LiveObject) -> FluxKey:
    return (obj.kind, obj.namespace, obj.name)


def normalized(status: Mapping[str, Any] | GpuStatus) -> dict[str, Any]:
    """A status as the API stores it, for comparison ({} when unreadable)."""
    try:
        model = status if isinstance(status, GpuStatus) else GpuStatus.model_validate(status)
    except ValidationError:
        return {}
    result: dict[str, Any] = json.loads(model.model_dump_json(by_alias=True, exclude_none=True))
    return result


def transition(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes a status change a transition: the state, the generation it speaks of, each
    condition's status and reason, and how many GPU nodes are unhealthy (a GPU lost shows at
    once; other messages, counts and node lists wait for the coalescing)."""
    conditions = tuple(
        (c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or ()
    )
    unhealthy = status.get("unhealthyNodeCount")
    return (status.get("state"), status.get("observedGeneration"), conditions, unhealthy)


@dataclass
class WriteBack:
    """What the API answered is the new live state: into the store at once."""

    store: Store
    node_fold: Callable[[Mapping[str, Any]], Any] = lambda _: None
    """A Node body -> its ObservedNode (observe/watches.py node_watch)."""
    as_applied: dict[FluxKey, tuple[str | None, int]] = field(default_factory=dict)
    """Flux objects whose apply answer lacked planned fields (the server dropped them): their
    spec hash and generation then. Not applied again while both stay (plan/actions.py
    up_to_date)."""

    def gpu(self, body: Mapping[str, Any]) -> None:
        obj = gpu_object(body)
        self.store.put(GPUS, obj.name, Entry(version_of(obj.resource_version), obj))

    def node(self, body: Mapping[str, Any] | None) -> None:
        """A Node as a write left it: the next step must not write it again."""
        meta = (body or {}).get("metadata") or {}
        facts = self.node_fold(body) if body is not None and body.get("kind") == "Node" else None
        if facts is not None:
            self.store.put(NODES, str(meta["name"]), Entry(version_of(meta.get("resourceVersion")),
                                                           facts))  # fmt: skip

    def crd(self, body: Mapping[str, Any] | None) -> None:
        """A Flux CRD as a write answered it: the next step must not apply the bundle again."""
        meta = (body or {}).get("metadata") or {}
        if body is not None and body.get("kind") == "CustomResourceDefinition" and meta.get("name"):
            entry = Entry(version_of(meta.get("resourceVersion")), crd_facts(meta))
            self.store.put(CRDS, str(meta["name"]), entry)

    def applied(self, obj: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
        self._note_dropped(obj, answer)
        self.flux(obj["kind"], answer)

    def flux(self, kind: str, body: Mapping[str, Any]) -> None:
        if kind not in _FLUX_PLURAL:  # another kind (an extension's): only CRDs are observed
            self.crd(body)
            return
        plural = _FLUX_PLURAL[kind]
        meta = body.get("metadata") or {}
        entry = Entry(version_of(meta.get("resourceVersion")), flux_facts(plural, body))
        self.store.put(plural, str(meta.get("name")), entry)

    def deleted(self, live: LiveObject, answer: Mapping[str, Any] | None) -> None:
        meta = (answer or {}).get("metadata") or {}
        if answer is not None and answer.get("kind") == live.kind and meta.get("deletionTimestamp"):
            self.flux(live.kind, answer)
        else:  # gone at once, or already gone
            self.store.put(_FLUX_PLURAL[live.kind], live.name, None)

    def read(self, live: LiveObject, answer: Mapping[str, Any] | None) -> None:
        """One of the module's Flux objects as a read answered it (None: not there)."""
        if answer is None:
            self.store.put(_FLUX_PLURAL[live.kind], live.name, None)
        else:
            self.flux(live.kind, answer)

    def _note_dropped(self, obj: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
        """An answer that lacks planned fields: the server dropped them (an older Flux's CRD
        has no such field). Said once; not applied again until the object changes."""
        if obj["kind"] not in _FLUX_PLURAL:
            return
        live = live_object(answer)
        lacking = missing(live.spec, obj.get("spec") or {})
        if not lacking:
            self.as_applied.pop(flux_key(live), None)
            return
        if flux_key(live) not in self.as_applied:
            log.warning("the API server dropped %s of %s %s/%s, which the module applies "
                        "(a Flux whose CRD lacks them?); not applying again for them",
                        ", ".join(lacking), live.kind, live.namespace, live.name)  # fmt: skip
        self.as_applied[flux_key(live)] = (live.applied_hash, live.generation)


@dataclass
class Recorder:
    """The Events on a Gpu; losing one is logged, never retried (the status has it all)."""

    writer: ClusterApi
    namespace: str = "kyma-system"
    """The module's namespace, where the Events go (status/events.py says why)."""
    sent: dict[str, tuple[Sent, ...]] = field(default_factory=dict)
    """Each Gpu's recent Events by its uid (a new Gpu of the same name starts afresh), for
    their budget and deduplication (events.to_post)."""

    async def announce(self, gpu: GpuObject, event: GpuEvent | None) -> None:
        if event is not None:
            await self.post(gpu, News(transition=event))

    async def post(self, gpu: GpuObject, news: News) -> None:
        """The Events of `news` that their budget and deduplication let through (to_post)."""
        offered = len(news.findings) + (news.transition is not None)
        clock = time.monotonic()
        events, self.sent[gpu.uid] = to_post(self.sent.get(gpu.uid, ()), news, clock)
        self.sent = {uid: sent for uid, sent in self.sent.items()
                     if sent and clock - sent[-1].at < EVENT_WINDOW_SECONDS}  # fmt: skip
        if len(events) < offered:
            log.info("Gpu %s: %d of %d Events not posted (said already, or over budget)",
                     gpu.name, offered - len(events), offered)  # fmt: skip
        for event in events:
            try:
                await self.writer.post_event(self.namespace, GpuRef(gpu.name, gpu.uid), event)
            except ApiError as err:
                log.warning("posting an Event on Gpu %s failed: %s", gpu.name, err)


@dataclass
class StatusWriter:
    """Gpu.status, written only when it differs from the live one; while only messages and
    counts change, at most once per `LoopSettings.status_seconds` (a transition at once)."""

    writer: ClusterApi
    write_back: WriteBack
    recorder: Recorder
    failed: Callable[[ErrorKind], None]
    """Counts a failed write."""
    settings: LoopSettings = field(default_factory=LoopSettings)
    written: dict[str, float] = field(default_factory=dict)
    """When each Gpu's status was last written (monotonic)."""
    due: dict[str, float] = field(default_factory=dict)
    """A coalesced (or failed) status write waits until then."""
    events: tuple[Report, ...] = ()
    """What the extensions say: their parts of the Events of a status write."""

    async def write(self, gpu: GpuObject, status: GpuStatus) -> bool:
        """True when the status was written."""
        wanted = normalized(status)
        live = normalized(gpu.status)
        self.due.pop(gpu.name, None)
        if wanted == live:
            return False
        interval = self.settings.status_seconds
        due = self.written.get(gpu.name, -interval) + interval
        if transition(wanted) == transition(live) and time.monotonic() < due:
            self.due[gpu.name] = due
            return False
        try:
            self.write_back.gpu(await self.writer.apply_status(gpu.name, wanted))
        except ApiError as err:
            log.warning("writing the status of Gpu %s failed: %s", gpu.name, err)
            self.failed(error_kind(err))
            self.due[gpu.name] = time.monotonic() + self.settings.status_retry_seconds
            return False
        self.written[gpu.name] = time.monotonic()
        await self.recorder.post(gpu, events_for(live, wanted, self.events))
        return True


@dataclass
class Retries:
    """When a failed write is tried again, by Gpu, like client-go's rate limiter (`failed` is
    its When, `forget` its Forget, `Failure.attempts` its NumRequeues). A failure counts its
    attempts while the same writes (the step's key) fail; transient errors wait from the front
    of `LoopSettings.retry_seconds`, permanent ones from `permanent_from`."""

    settings: LoopSettings = field(default_factory=LoopSettings)
    failures: dict[str, Failure] = field(default_factory=dict)
    """The last failed write of each Gpu, until a write of it goes through."""

    def failed(self, name: str, key: str, err: ApiError, clock: float) -> Failure:
        previous = self.failures.get(name)
        attempts = previous.attempts + 1 if previous and previous.key == key else 1
        permanent = isinstance(err, PermanentError)
        retries = self.settings.retry_seconds
        delays = retries[self.settings.permanent_from :] if permanent else retries
        delay = delays[min(attempts - 1, len(delays) - 1)]
        failure = self.failures[name] = Failure(key, str(err), permanent, attempts, clock + delay)
        return failure

    def forget(self, name: str) -> None:
        """A write of the Gpu went through."""
        self.failures.pop(name, None)

    def reset(self) -> None:
        """The world changed under every failure (the served Flux kinds: Flux installed or
        removed): try each at once instead of at its retry time."""
        self.failures.clear()

    def last(self, name: str) -> Failure | None:
        """The Gpu's last failed write, for `decide`."""
        return self.failures.get(name)
