"""kopf's part: the process and the Gpu's lifecycle. The module's informers observe the rest.

kopf runs the process (the event loop, the signals, `start` and `stop`, the liveness endpoint
`--liveness` with the probe `reconcile`) and the Gpu:

- it watches the Gpus (`gpu_event`: each event's compact facts into the store, where the
  reconcile loop reads them with everything else);
- one daemon per Gpu (`gpu_daemon`) runs the Gpu's reconcile loop (reconcile/loop.py
  `Loop.serve`): woken by any change of the store (the Gpu's own events and the informers' of
  Nodes, Flux objects, DaemonSets, ...), a retry or the safety pass, it decides (the state
  machine, pure) and carries one step out at a time;
- kopf's finalizer, named `gpu.kyma-project.io/finalizer` (machine.FINALIZER), is added by
  kopf before the daemon writes anything; on deletion the daemon keeps going until Flux has
  uninstalled, removes the finalizer (the Released step) and ends. Not kopf: kopf notices a
  daemon's end only when it next looks (DELETION_POLL_SECONDS, with a patch of its own), and
  a follower's kopf, whose daemon must never end a deletion, would look too;
- a pass that fails on a bug ends the daemon with kopf.TemporaryError: kopf starts it again
  after LoopSettings.failed_pass_seconds.

A daemon rather than create/update/delete handlers: most of what a Gpu's status and steps
follow is not the Gpu (Nodes join, Flux reconciles, DaemonSets roll), and kopf's change
handlers would write their progress and diff base on the Gpu at every spec change (a third
write beside the HelmRelease and the status). The daemon writes nothing of kopf's; kopf writes
the finalizer once and removes it once.

Not kopf's, and why: the Events go to the module's namespace (kopf posts those of a
cluster-scoped object to `default`, where anyone with a RoleBinding there reads them:
status/events.py), so kopf's posting is off; a replica writes only while it holds the Lease
kyma-system/kyma-gpu-manager (reconcile/election.py), not by kopf's peering (which needs its own
cluster-wide CRDs, and pauses every replica of equal priority): kopf runs standalone, a
follower's daemons observe and never write, and never end a deletion, so only the leader's
kopf removes the finalizer. The fleet (Nodes, ...) is observed by the module's informers:
docs/performance.md measured kopf's watching beside them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import kopf
from aiohttp import web

from kyma_gpu.adapter import KubeAdapter, ListQuery
from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME
from kyma_gpu.api.models import API_GROUP, API_VERSION, PLURAL
from kyma_gpu.extensions import EXTENSIONS, NODE_FOLDS
from kyma_gpu.facts.gpu import gpu_object
from kyma_gpu.metrics import Metrics, serve
from kyma_gpu.observe import Informers, Store
from kyma_gpu.observe.informer import Informer, ListWatch
from kyma_gpu.observe.store import Entry, Resource, version_of
from kyma_gpu.observe.watches import CRDS, GPU_CRD, GPUS, REQUIRED
from kyma_gpu.plan import AllowedSources, allowed_sources_of
from kyma_gpu.reconcile.election import Elector
from kyma_gpu.reconcile.loop import Loop, first_of
from kyma_gpu.reconcile.machine import FINALIZER
from kyma_gpu.reconcile.settings import KopfSettings, Settings
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.engine import RuleError

ALLOWED_SOURCES: Resource[AllowedSources] = Resource("chartsources")
DELETION_POLL_SECONDS = 600.0
"""While a Gpu's deletion runs, kopf looks whether its daemon ended this often, with a patch
of its own on the Gpu (its touch of the deletion's delay): the daemon removes the finalizer
itself when Flux has uninstalled, so kopf's look decides nothing, and a follower's kopf,
whose daemon never ends a deletion, writes at most this rarely."""
"""The allowed chart sources: the facts of the one ConfigMap (absent: NVIDIA's only)."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    """What kyma-gpu-manager is given (kyma_gpu/main.py); fixed for the life of the process."""

    identity: str
    """The pod's name (own_identity): kopf's, the Lease holder's, the user agent's."""
    leader_election: bool = False
    metrics_address: str | None = None
    settings: Settings = field(default_factory=Settings)


@dataclass(frozen=True)
class Started:
    """What `start` started, and `stop` stops."""

    store: Store
    """The facts of everything observed, the Gpus' among them (kopf's events)."""
    loop: Loop
    """The reconcile loop, which each Gpu's daemon runs (`Loop.serve`)."""
    stopped: asyncio.Event
    """Set by `stop`: the elector ends."""
    informers: Informers
    allowed_sources_informer: Informer
    elector: Elector | None
    """None without leader election: this replica always writes."""
    elector_task: asyncio.Task[None] | None
    """Held only so that it lives: asyncio keeps no strong reference to a task."""
    metrics_server: web.AppRunner | None
    """None without --metrics-address."""


@dataclass
class Runtime:
    """The process's state, the one entry of kopf's memo (`runtime(memo)`): what `run` knows,
    then what `start` started, for the Gpu's handlers and `stop`."""

    options: Options
    started: Started | None = None


MEMO_KEY = "runtime"


def runtime(memo: kopf.Memo) -> Runtime:
    """The Runtime in kopf's memo (put there by `run`)."""
    found = memo.get(MEMO_KEY)
    if not isinstance(found, Runtime):
        raise TypeError(f"kopf's memo holds no Runtime under {MEMO_KEY!r}: {found!r}")
    return found


def started(memo: kopf.Memo) -> Started:
    """What `start` started (kopf runs no handler before `start` returns)."""
    found = runtime(memo).started
    if found is None:
        raise RuntimeError("a Gpu handler ran before the operator started")
    return found


def allowed_sources_watch(namespace: str) -> ListWatch:
    """The ConfigMap kyma-gpu-chart-sources only: a field selector on its name, which the
    manager's Role allows to list and watch by that resourceName."""
    query = ListQuery(f"/api/v1/namespaces/{namespace}/configmaps",
                      field_selector=f"metadata.name={CONFIG_MAP_NAME}")  # fmt: skip
    return ListWatch(ALLOWED_SOURCES, query, allowed_sources_of, key=lambda _: CONFIG_MAP_NAME)


def allowed_sources(store: Store) -> AllowedSources:
    """What the watch holds; the default while there is no ConfigMap."""
    return store.get(ALLOWED_SOURCES, CONFIG_MAP_NAME) or AllowedSources()


class _Forever:
    """kopf's request retries (KopfSettings), then the last for as long as it takes: a request
    of kopf's that gives up (its discovery of the Gpu's API at its start, its Gpu watch) ends
    kopf, and so the process; an API server that is down is waited for, as the informers wait
    for it."""

    def __init__(self, settings: KopfSettings) -> None:
        self.settings = settings

    def __iter__(self) -> Iterator[float]:
        then = itertools.repeat(self.settings.request_backoff_forever)
        return itertools.chain(self.settings.request_backoffs, then)


def _configure(settings: kopf.OperatorSettings, ours: Settings) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.posting.enabled = False  # Events go to kyma-system (module docstring)
    settings.scanning.disabled = True  # `start` waits for the Gpu's CRD: kopf reads it once
    settings.networking.error_backoffs = _Forever(ours.kopf)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    state = runtime(memo)
    given, ours = state.options, state.options.settings
    _configure(settings, ours)
    catalog = Catalog()  # checked in run(): broken rule data never gets this far
    metrics = Metrics.for_process()
    adapter = KubeAdapter.connect(given.identity, metrics)
    store = Store()
    on_demand = {e.watch.resource: e.watch.list_watch for e in EXTENSIONS if e.watch is not None}
    informers = Informers(adapter, store, asyncio.get_running_loop(), on_demand=on_demand,
                          node_folds=NODE_FOLDS, settings=ours.watching)  # fmt: skip
    namespace = catalog.defaults.module_namespace
    elector = None
    if given.leader_election:
        elector = Elector(adapter, namespace, ours.election.lease_name, given.identity,
                          settings=ours.election)  # fmt: skip
    loop = Loop(store, adapter, catalog, observe=informers.observe,
                may_write=elector.may_write if elector else lambda: True,
                module_namespace=namespace, settings=ours.loop, metrics=metrics,
                environ=os.environ,
                allowed_sources=lambda: allowed_sources(store),
                required=(*REQUIRED, ALLOWED_SOURCES))  # fmt: skip
    metrics.observe(loop.scrape)
    metrics_server = await _serve_metrics(given.metrics_address, metrics, loop)
    informers.start(catalog.machine_types, namespace, catalog.defaults.target_namespace)
    allowed_sources_informer = Informer(adapter, allowed_sources_watch(namespace), store,
                                        asyncio.get_running_loop(), ours.watching,
                                        informers.gc_pause).start()  # fmt: skip
    stopped = asyncio.Event()
    elector_task = None
    if elector is not None:
        elector_task = asyncio.create_task(elector.run(stopped), name="election")
    state.started = Started(
        store=store, loop=loop, stopped=stopped, informers=informers,
        allowed_sources_informer=allowed_sources_informer, elector=elector,
        elector_task=elector_task, metrics_server=metrics_server,
    )  # fmt: skip
    await _gpu_api_served(store, ours.loop.sync_report_seconds)


async def _gpu_api_served(store: Store, every: float) -> None:
    """Until the Gpu's CRD is there: kopf resolves the Gpu's API once, after `start`."""
    wake = store.changed.subscribe()
    try:
        while store.get(CRDS, GPU_CRD) is None:
            wake.clear()
            await first_of((wake.wait(),), every)
            if store.get(CRDS, GPU_CRD) is None and store.synced(CRDS):
                log.info("waiting for the Gpu's CRD %s", GPU_CRD)
    finally:
        store.changed.unsubscribe(wake)


async def _serve_metrics(address: str | None, metrics: Metrics, loop: Loop) -> web.AppRunner | None:
    """/metrics and /readyz, on both replicas. Before anything else runs: a port that cannot
    be bound stops the operator (kopf retries a startup handler that raises anything else)."""
    if not address:
        return None
    try:
        return await serve(address, metrics, loop.waiting_for)
    except OSError as err:
        raise kopf.PermanentError(f"cannot serve metrics on {address}: {err}") from err


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
def gpu_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """A Gpu's event from kopf's watch: its facts into the store (which wakes its daemon)."""
    take_gpu_event(started(memo).store, event)


def take_gpu_event(store: Store, event: Mapping[str, Any]) -> bool:
    """The Gpu's facts (managedFields read: `pruned_values`) into the store at the event's
    resourceVersion; a deletion leaves None at its version. True when the facts changed."""
    body = event["object"]
    meta = body.get("metadata") or {}
    name, version = str(meta.get("name")), version_of(meta.get("resourceVersion"))
    if event.get("type") == "DELETED":
        return store.put(GPUS, name, None, version)
    return store.put(GPUS, name, Entry(version, gpu_object(body)))


@kopf.daemon(API_GROUP, API_VERSION, PLURAL, cancellation_timeout=None,
             cancellation_polling=DELETION_POLL_SECONDS)  # fmt: skip
async def gpu_daemon(name: str | None, stopped: kopf.DaemonStopped, memo: kopf.Memo,
                     **_: Any) -> None:  # fmt: skip
    """The Gpu's reconcile loop, for as long as the Gpu lives (module docstring)."""
    loop = started(memo).loop
    try:
        await loop.serve(str(name), DaemonStop(stopped, loop.settings.exit_check_seconds))
    except Exception as err:  # logged and counted by the loop
        raise kopf.TemporaryError(f"reconcile pass failed: {err}",
                                  delay=loop.settings.failed_pass_seconds) from err  # fmt: skip


@dataclass(frozen=True)
class DaemonStop:
    """kopf's daemon flag, as the Gpu's loop needs it. kopf sets it once, for the Gpu's
    deletion or the operator's exit: a deletion goes on (its uninstall must finish), the exit
    ends the loop. The flag cannot be awaited a second time, so while a deletion runs the loop
    looks at it every `recheck` seconds."""

    stopped: kopf.DaemonStopped
    recheck: float

    def ended(self) -> bool:
        reason = self.stopped.reason
        return reason is not None and bool(reason & ~kopf.DaemonStoppingReason.RESOURCE_DELETED)

    async def wait(self, wake: asyncio.Event, timeout: float | None) -> None:
        if not self.stopped.is_set():
            await first_of((wake.wait(), self.stopped.wait()), timeout)
            return
        end = None if timeout is None else time.monotonic() + timeout
        while not self.ended() and not wake.is_set():  # deleting: only the exit can end it
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return
            await first_of(
                (wake.wait(),), self.recheck if left is None else min(left, self.recheck)
            )


@kopf.on.probe(id="reconcile")
def reconcile_probe(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    """On the liveness endpoint: what the loop still waits for, and whether it writes."""
    found = runtime(memo).started
    if found is None:
        return {"started": False}
    return {"started": True, "leader": found.loop.may_write(),
            "waitingFor": found.loop.waiting_for()}  # fmt: skip


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    """kopf runs it only after `start` succeeded, when the process is asked to stop, once the
    Gpus' daemons have ended."""
    started = runtime(memo).started
    if started is None:
        return
    started.stopped.set()
    started.informers.stop()
    started.allowed_sources_informer.stop()
    if started.elector is not None:  # after the last write: hand over at once
        await started.elector.release()
    if started.metrics_server is not None:
        await started.metrics_server.cleanup()


def own_identity(environ: Mapping[str, str]) -> str:
    """Who this process is, for kopf, the Lease and the user agent: the pod's name (the
    Deployment's POD_NAME), else host and pid. Never the login name: the image's numeric user
    65532 has no passwd entry, and containerd, the runtime of every Gardener node, writes none
    into the container (podman and Docker do). kopf's own default identity asks
    getpass.getuser(), which raises KeyError there: the manager crashed at start."""
    return environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def run(
    liveness: str | None = None, leader_election: bool = False, metrics_address: str | None = None
) -> None:
    """The manager process (kyma-gpu-manager, `python -m kyma_gpu`: kyma_gpu/main.py)."""
    try:
        Catalog().check()
    except RuleError as err:  # the operator does not half-start on broken rule data
        print(f"kyma-gpu-manager: broken rule data: {err}", file=sys.stderr)
        sys.exit(2)
    kopf.configure(verbose=False)
    identity = own_identity(os.environ)
    # No peering (it would pause every replica of equal priority): the Lease picks the one that
    # writes.
    options = Options(identity, leader_election, metrics_address)
    kopf.run(
        clusterwide=True,
        liveness_endpoint=liveness,
        standalone=True,
        identity=cast(Any, identity),  # kopf's Identity, a NewType of str it does not export
        memo=kopf.Memo({MEMO_KEY: Runtime(options)}),
    )
