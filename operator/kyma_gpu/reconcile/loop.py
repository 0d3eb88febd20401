"""The reconcile loop: wait for a change, run the state machine, carry its step out.

One loop serves every Gpu (there is one, `gpu`; others only get a refusal). A pass takes a
snapshot of the store, asks `machine.decide` for a step, and performs it through the writer
(the adapter). What a write returns is the new live state: it goes into the store at once,
and the next `decide` sees it, so there is no "recently applied" bookkeeping and no waiting
for the watch to catch up. A pass ends with a step that has nothing left to write; the loop
then sleeps until the store changes, or until a retry is due.

The parts it is made of are in reconcile/effects.py (the write-back into the store, the Event
recorder, the status writer, the retries of failed writes), its timings in `LoopSettings`
(reconcile/settings.py); the constructor wires them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol, assert_never

from kyma_gpu.adapter import ObjectRef
from kyma_gpu.errors import ApiError
from kyma_gpu.extensions import EXTENSIONS
from kyma_gpu.extensions.base import Context, Extension
from kyma_gpu.facts.gpu import GpuObject
from kyma_gpu.metrics import ErrorKind, Metrics, PoolGpus, Scraped
from kyma_gpu.observe.informer import freeze_heap
from kyma_gpu.observe.store import Store
from kyma_gpu.observe.watches import (
    CLUSTER_POLICIES,
    CRDS,
    DAEMONSETS,
    FLUX_RESOURCES,
    GATED,
    GPU_CLUSTERS,
    GPUS,
    NODES,
    PULLS,
    REQUIRED,
    node_watch,
)
from kyma_gpu.plan import AllowedSources
from kyma_gpu.plan.actions import LiveObject, object_key
from kyma_gpu.plan.ownership import removals
from kyma_gpu.plan.plan import PlanMemo
from kyma_gpu.plan.provision import REQUIRED_APIS, Api, FluxApi
from kyma_gpu.reconcile.effects import (
    ClusterApi,
    FluxKey,
    Recorder,
    Retries,
    StatusWriter,
    WriteBack,
    flux_key,
    now,
)
from kyma_gpu.reconcile.machine import (
    FINALIZER,
    Action,
    Apply,
    Delete,
    ExtensionAction,
    ExtensionRead,
    Inputs,
    Machine,
    Phase,
    Planner,
    Reclaim,
    RemoveFinalizer,
    Step,
)
from kyma_gpu.reconcile.settings import LoopSettings
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status.events import foreign_removed
from kyma_gpu.status.snapshot import Snapshot

__all__ = ("GPUS", "ClusterApi", "Done", "Loop", "Stop", "StopEvent", "flux_api", "now", "snapshot")
"""GPUS lives in observe/watches.py, ClusterApi and now in reconcile/effects.py; they are the
loop's words too."""

log = logging.getLogger(__name__)

_ENDS = (Phase.RELEASED, Phase.REFUSED)
"""The phases of a deleted Gpu's last step: nothing is left to do for it."""


def snapshot(
    store: Store,
    as_applied: Mapping[FluxKey, tuple[str | None, int]] | None = None,
    allowed_sources: AllowedSources | None = None,
    on_demand: Collection[str] = (),
) -> Snapshot:
    """The store's facts; `as_applied` (key -> spec hash, generation) marks the Flux objects
    that still are the answer to an apply whose planned fields the API server dropped;
    `allowed_sources` are the chart sources allowed (the Loop's `allowed_sources()`);
    `on_demand` the resource keys of the extensions' list-watches on demand."""
    flux = [facts for resource in FLUX_RESOURCES for facts in store.facts(resource)]
    marks = as_applied or {}
    answered = frozenset(
        object_key(obj)
        for obj, _ in flux
        if marks.get(flux_key(obj)) == (obj.applied_hash, obj.generation)
    )
    return Snapshot(
        nodes=tuple(store.facts(NODES)),
        flux=tuple(obj for obj, _ in flux),
        as_applied=answered,
        flux_status=tuple(status for _, status in flux),
        daemonsets=tuple(sorted(store.facts(DAEMONSETS), key=lambda d: d.name)),
        cluster_policy=store.get(CLUSTER_POLICIES, "cluster-policy"),
        gpu_cluster=store.get(GPU_CLUSTERS, "gpu-cluster"),
        observed={resource: _observed(store, resource) for resource in on_demand},
        image_pulls=tuple(sorted(store.facts(PULLS))),
        flux_api=flux_api(store),
        allowed_sources=allowed_sources or AllowedSources(),
    )


def _observed(store: Store, resource: str) -> tuple[object, ...] | None:
    """A list-watch on demand's facts, in the order of their keys; None until it is listed."""
    if not store.synced(resource):
        return None
    return tuple(entry.facts for _, entry in sorted(store.collection(resource).entries.items()))


def flux_api(store: Store) -> FluxApi:
    """The Flux CRDs present and how the informers of the APIs the module writes fare."""
    crds = {name: store.get(CRDS, name) for name in REQUIRED_APIS}
    return FluxApi(
        crds={name: facts for name, facts in crds.items() if facts is not None},
        apis={name: _api(store, GATED[name]) for name in REQUIRED_APIS},
        synced=store.synced(CRDS),
    )


def _api(store: Store, resource: str) -> Api:
    coll = store.collection(resource)
    if coll.unserved:
        return Api.NOT_SERVED
    if not coll.synced:
        return Api.UNKNOWN
    return Api.ABSENT if coll.absent else Api.SERVED


@dataclass(frozen=True, slots=True)
class Done:
    """What carrying one step out did."""

    writes: int = 0
    """Write requests made, a failed one included."""
    decide_again: bool = False
    """Decide again at once: the step's action or read went through (its answers are in the
    store, or in `answer`) or failed (the status of the failure is the next step's). A step
    that only wrote a status, or wrote nothing, ends the pass."""
    reads: int = 0
    answer: object | None = None
    """What the step's read found: in the next snapshots' `reads` of this pass."""


@dataclass
class Loop:
    store: Store
    writer: ClusterApi
    catalog: Catalog
    observe: Callable[[frozenset[str]], None] = lambda _: None
    """Observes the extensions' list-watches on demand that a pass wants (their resource keys),
    and stops the others (observe/informers.py `Informers.observe`)."""
    may_write: Callable[[], bool] = lambda: True
    """False while another replica leads (reconcile/election.py): then nothing is written."""
    module_namespace: str = "kyma-system"
    """Where the module's Flux objects (and its own Flux) live, and the Gpu's Events."""
    allowed_sources: Callable[[], AllowedSources] = AllowedSources
    """The chart sources a cluster administrator allows (handlers.py: the watched ConfigMap)."""
    required: tuple[str, ...] = REQUIRED
    """Listed before the first reconcile (handlers.py adds the chart sources' ConfigMap)."""
    flux_served: tuple[bool, ...] = ()
    """Which Flux kinds are served: when that changes (Flux installed), failed writes are
    retried at once instead of at their retry time."""
    settings: LoopSettings = field(default_factory=LoopSettings)
    metrics: Metrics = field(default_factory=Metrics)
    environ: Mapping[str, str] = field(default_factory=dict)
    """The manager's environment, which the extensions' configurations read (the module's own
    Flux: its controllers' images, provision.IMAGE_ENV)."""
    extensions: tuple[Extension, ...] = EXTENSIONS
    """The extras beyond the card (kyma_gpu/extensions/): their rows, and their actions."""
    error_count: int = 0
    """Failed writes and failed passes so far: a reconcile that adds one did not succeed."""
    write_back: WriteBack = field(init=False)
    recorder: Recorder = field(init=False)
    status: StatusWriter = field(init=False)
    retries: Retries = field(init=False)
    plans: PlanMemo = field(init=False)
    plan: Planner = field(init=False)
    """The planner `decide` gets: `plans.plan`, the memo's (a test may put another)."""
    machine: Machine = field(init=False)
    config: tuple[object, ...] = field(init=False)
    """The extensions' configurations (`Extension.config`, from `environ`), for
    `Inputs.config`."""
    on_demand: tuple[str, ...] = field(init=False)
    """The resource keys of the extensions' list-watches on demand (`Extension.watch`)."""
    wanted: dict[str, frozenset[str]] = field(default_factory=dict)
    """Each Gpu's last step's list-watches on demand: their union is observed."""
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    """One pass at a time per Gpu."""
    resync_at: float = field(init=False)
    frozen: bool = False
    first_synced: bool = False

    def __post_init__(self) -> None:
        self.machine = Machine(self.extensions)
        self.config = tuple(e.config(self.environ) for e in self.extensions if e.config is not None)
        self.on_demand = tuple(e.watch.resource for e in self.extensions if e.watch is not None)
        self.plans = PlanMemo(self.catalog)
        self.plan = self.plans.plan
        folds = tuple(e.node_fold for e in self.extensions if e.node_fold is not None)
        self.write_back = WriteBack(self.store, node_watch(self.catalog.machine_types, folds).fold)
        self.recorder = Recorder(self.writer, self.module_namespace)
        self.retries = Retries(self.settings)
        events = tuple(e.status for e in self.extensions if e.status is not None)
        self.status = StatusWriter(self.writer, self.write_back, self.recorder, self._error,
                                   self.settings, events=events)  # fmt: skip
        self.resync_at = time.monotonic() + self.settings.resync_seconds

    # -- the loop of one Gpu (kopf's daemon for it: handlers.py) --

    async def serve(self, name: str, stop: Stop) -> None:
        """Reconcile the Gpu `name` on every change of the store, retry and safety pass, while
        this replica leads, until `stop` says so or its deletion is through (the Released
        step: kopf then removes its finalizer). A pass that fails on a bug raises
        kopf.TemporaryError in the caller (handlers.py): kopf starts the daemon again after
        LoopSettings.failed_pass_seconds."""
        wake = self.store.changed.subscribe()
        try:
            await self._wait_synced(stop, wake)
            while self.store.get(GPUS, name) is None and not stop.ended():
                wake.clear()  # kopf's event of the Gpu is on its way (handlers.py gpu_event)
                await stop.wait(wake, None)
            while not stop.ended():
                if not self.may_write():  # a follower (leader election): observe, never write
                    await stop.wait(wake, self.settings.follower_seconds)
                    continue
                await self._resync_due()
                wake.clear()  # what the reads changed is this pass's, too
                try:
                    requeue, released = await self.pass_for(name)
                except Exception:  # handlers.py: kopf starts the daemon again, later
                    log.exception("reconcile pass of Gpu %s failed", name)
                    self._error(ErrorKind.INTERNAL)
                    raise
                if released:
                    return
                self._freeze_once()
                await stop.wait(wake, self._timeout(requeue))
                await asyncio.sleep(self.settings.burst_seconds)
        finally:
            self.store.changed.unsubscribe(wake)
            self.wanted.pop(name, None)

    async def _resync_due(self) -> None:
        """The periodic safety pass's reads, every LoopSettings.resync_seconds (one clock for
        every Gpu)."""
        if time.monotonic() >= self.resync_at:
            self.resync_at = time.monotonic() + self.settings.resync_seconds
            await self.reread()

    def _timeout(self, requeue: float | None) -> float:
        resync = max(self.resync_at - time.monotonic(), 0.0)
        return resync if requeue is None else min(requeue, resync)

    def _freeze_once(self) -> None:
        if self.settings.freeze_heap and not self.frozen:
            self.frozen = True
            log.debug("heap after the first pass: %d objects frozen", freeze_heap())

    async def pass_for(self, name: str) -> tuple[float | None, bool]:
        """Reconcile the Gpu `name` once. Returns the seconds until a retry is due (None: none),
        and whether its deletion is through (or it is gone): nothing is left to do for it."""
        gpu = self.store.get(GPUS, name)
        if gpu is None:
            return None, True
        served = tuple(not self.store.collection(plural).absent for plural in FLUX_RESOURCES)
        if served != self.flux_served:
            self.flux_served = served
            self.retries.reset()
        async with self.locks.setdefault(name, asyncio.Lock()):
            step = await self.reconcile(gpu)
        self.wanted[name] = step.watches
        self.observe(frozenset().union(*self.wanted.values()))
        clock = time.monotonic()
        requeues = [max(due - clock, 0.0) for due in self.status.due.values()]
        if step.requeue_after is not None:
            requeues.append(step.requeue_after)
        gone = self.store.get(GPUS, name) is None
        through = gpu.deleting and step.action is None and step.phase in _ENDS
        return min(requeues, default=None), gone or through

    async def reread(self) -> int:
        """The safety pass's reads: each of the module's Flux objects the store holds, read
        again (a GET) and its answer put into the store, as a watch event would be: a change
        behind the store's back, or an object gone that the store still holds, is seen by the
        pass that follows. Equal facts change nothing. Returns the reads made."""
        reads = 0
        for resource in FLUX_RESOURCES:
            for live, _ in self.store.facts(resource):
                ref = ObjectRef(live.api_version, live.kind, live.namespace, live.name)
                reads += 1
                try:
                    self.write_back.read(live, await self.writer.read(ref))
                except ApiError as err:  # the pass goes on with the store as it is
                    log.warning("reading %s again failed: %s", ref, err)
        return reads

    async def _wait_synced(self, stop: Stop, wake: asyncio.Event) -> None:
        began, every = time.monotonic(), self.settings.sync_report_seconds
        while not self.store.synced(*self.required) and not stop.ended():
            wake.clear()
            await stop.wait(wake, every)
            if time.monotonic() - began >= every:
                missing = [r for r in self.required if not self.store.synced(r)]
                log.info("waiting for the first list of %s", ", ".join(missing))
        if not self.first_synced:
            self.first_synced = True
            log.info("observed %d nodes; first reconcile after %.2fs",
                     len(self.store.facts(NODES)), time.monotonic() - began)  # fmt: skip

    async def reconcile(self, gpu: GpuObject) -> Step:
        """Steps until one has nothing left to write; logs the pass."""
        began, writes, reads, errors = time.monotonic(), 0, 0, self.error_count
        answers: dict[type, object] = {}  # the reads of this pass, for its snapshots
        for _ in range(self.settings.max_steps):
            snap = replace(snapshot(self.store, self.write_back.as_applied, self.allowed_sources(),
                                    self.on_demand), reads=tuple(answers.values()))  # fmt: skip
            step = self.machine.decide(Inputs(gpu, snap, self.plan, self.retries.last(gpu.name),
                                 time.monotonic(), now(), self.module_namespace, self.config,
                                 allowlist=self.catalog.values_allowlist))  # fmt: skip
            done = await self.perform(gpu, step)
            writes, reads = writes + done.writes, reads + done.reads
            if done.answer is not None:
                answers[type(done.answer)] = done.answer
            current = self.store.get(GPUS, gpu.name)
            if current is None:  # deleted: the watch's DELETED came before the write's answer
                break
            gpu = current
            if not done.decide_again:
                break
        failed = self.error_count > errors or self.retries.last(gpu.name) is not None
        self.metrics.reconciled(step.phase, time.monotonic() - began, failed, time.time())
        log.info("reconciled: phase=%s writes=%d reads=%d in %.0f ms", step.phase, writes, reads,
                 (time.monotonic() - began) * 1000)  # fmt: skip
        return step

    # -- carrying a step out --

    async def perform(self, gpu: GpuObject, step: Step) -> Done:
        """The step's read, or its action and then its status."""
        if not self.may_write():
            return Done()
        if step.read is not None:
            return await self._read(gpu, step, step.read)
        acted = 0
        if step.action is not None:
            try:
                acted = await self._act(gpu, step.action)
            except ApiError as err:
                self._failed(gpu, step, err)
                return Done(1, decide_again=True)  # the status of the failure is the next step's
            self.retries.forget(gpu.name)
        wrote = step.status is not None and await self.status.write(gpu, step.status)
        return Done(acted + wrote, decide_again=acted > 0)

    async def _read(self, gpu: GpuObject, step: Step, read: ExtensionRead) -> Done:
        """What the next snapshot needs and no informer watches, read by the extension that
        registers its type. A failed read is held back like a failed write; one that goes
        through does not end a failure: the writes it leads to may still fail."""
        fetch = next(e.effects[type(read)] for e in self.extensions if type(read) in e.effects)
        try:
            found = await fetch(read, self._context(gpu))
        except ApiError as err:
            self._failed(gpu, step, err)
            return Done(reads=1, decide_again=True)
        return Done(reads=1, decide_again=True, answer=found)

    async def _act(self, gpu: GpuObject, action: Action) -> int:
        """Carries one action out. Returns how many requests it made."""
        match action:
            case Apply(objects, stale):
                for obj in objects:
                    log.info("applying %s", ObjectRef.of(obj))
                    self.write_back.applied(obj, await self.writer.apply(obj))
                for live in stale:
                    await self._delete(live)
                return len(objects) + len(stale)
            case RemoveFinalizer():
                others = [f for f in gpu.finalizers if f != FINALIZER]
                self.write_back.gpu(await self.writer.set_finalizers(
                    gpu.name, others, gpu.resource_version))  # fmt: skip
                return 1
            case Reclaim(objects):
                return await self._reclaim(gpu, objects)
            case Delete(objects):
                for live in objects:
                    await self._delete(live)
                return len(objects)
            case ExtensionAction():
                return await self._carry(gpu, action)
            case _:
                assert_never(action)

    async def _carry(self, gpu: GpuObject, action: ExtensionAction) -> int:
        """An extension's action, carried out by the extension that registers its type."""
        carry = next(e.effects[type(action)] for e in self.extensions
                     if type(action) in e.effects)  # fmt: skip
        requests: int = await carry(action, self._context(gpu))
        return requests

    def _context(self, gpu: GpuObject) -> Context:
        return Context(gpu, self.writer, self.write_back, self.recorder)

    async def _reclaim(self, gpu: GpuObject, objects: tuple[LiveObject, ...]) -> int:
        """Remove what others wrote to the module's Flux objects; a Warning names it."""
        for live in objects:
            ref = ObjectRef(live.api_version, live.kind, live.namespace, live.name)
            log.warning("removing from %s what others wrote: %s", ref,
                        ", ".join(f"{f.dotted} ({f.manager})" for f in live.foreign))  # fmt: skip
            answer = await self.writer.patch(ref, removals(live.guarded, live.foreign))
            self.write_back.flux(live.kind, answer)
        await self.recorder.announce(gpu, foreign_removed(objects))
        return len(objects)

    async def _delete(self, live: LiveObject) -> None:
        log.info("deleting %s/%s/%s", live.kind, live.namespace, live.name)
        ref = ObjectRef(live.api_version, live.kind, live.namespace, live.name)
        self.write_back.deleted(live, await self.writer.delete(ref))

    def _failed(self, gpu: GpuObject, step: Step, err: ApiError) -> None:
        clock = time.monotonic()
        failure = self.retries.failed(gpu.name, step.key, err, clock)
        log.warning("%s failed (attempt %d), again in %.0fs: %s", step.phase, failure.attempts,
                    failure.retry_at - clock, err)  # fmt: skip
        self._error(ErrorKind.PERMANENT if failure.permanent else ErrorKind.TRANSIENT)

    def _error(self, kind: ErrorKind) -> None:
        self.error_count += 1
        self.metrics.reconcile_failed(kind)

    # -- what /metrics and /readyz read (kyma_gpu.metrics), on the event loop --

    def waiting_for(self) -> list[str]:
        """What the first reconcile still waits for (not yet listed): readiness."""
        return [resource for resource in REQUIRED if not self.store.synced(resource)]

    def scrape(self) -> Scraped:
        nodes = self.store.facts(NODES) if self.store.synced(NODES) else None
        return Scraped(
            leader=self.may_write(),
            gpu_states={g.name: str(g.status.get("state") or "") for g in self.store.facts(GPUS)},
            gpu_nodes=None if nodes is None else sum(1 for node in nodes if node.is_gpu),
            pools=tuple(
                PoolGpus.of(p)
                for g in self.store.facts(GPUS)
                for p in g.status.get("pools") or ()
                if isinstance(p, Mapping)
            ),
        )


class Stop(Protocol):
    """When a Gpu's loop ends (handlers.py: kopf's daemon flag, read as the module needs it)."""

    def ended(self) -> bool:
        """The loop must end now (the operator stops)."""
        ...

    async def wait(self, wake: asyncio.Event, timeout: float | None) -> None:
        """Until `wake` is set, the loop must end, or `timeout` passes."""
        ...


@dataclass
class StopEvent:
    """A Stop of an asyncio Event: for a loop run outside kopf (benchmarks, tests)."""

    event: asyncio.Event = field(default_factory=asyncio.Event)

    def ended(self) -> bool:
        return self.event.is_set()

    async def wait(self, wake: asyncio.Event, timeout: float | None) -> None:
        await first_of((wake.wait(), self.event.wait()), timeout)


async def first_of(waits: Iterable[Awaitable[object]], timeout: float | None) -> None:
    """Wait until one of the waits ends (an Event's `wait()`, kopf's flag's), or the timeout
    passes."""
    waiters = {asyncio.ensure_future(w) for w in waits}
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
