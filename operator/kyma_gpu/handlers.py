"""kopf's part: the process. The module's informers and reconcile loop do the rest.

kopf runs the process and nothing else: the event loop, the signals, the startup handler
(`start`, which starts everything below) and the cleanup handler (`stop`), and the liveness
endpoint (`--liveness`, /healthz in the Deployment), which answers while that event loop runs.
It has no resource handler: it watches nothing, writes nothing, posts no Event. It runs
standalone, without peering (a Lease picks the replica that writes: reconcile/election.py) and
without scanning (it follows no CRD). Its memo carries the process's state from `start` to
`stop`: one entry, a `Runtime`, read with `runtime(memo)`.

Everything else is the module's own. The informers (kyma_gpu.observe) keep paged LISTs and
WATCHes of the Gpus, Nodes, the operand DaemonSets, the operand's pods that cannot pull, our
Flux objects, the ClusterPolicy, the GPUCluster and the CRDs (and an extension's list-watch
while it wants it, extensions/base.py `Watch`) as compact facts in one store, and, observed
here, the one ConfigMap of allowed chart sources (kyma-system/kyma-gpu-chart-sources, by a
field selector on its name).
The reconcile loop (kyma_gpu.reconcile.loop) wakes when those facts change, decides, and
makes every write: Flux and the operand's Flux objects, the Gpu's status and its Events, and
the finalizer `gpu.kyma-project.io/finalizer`, which it adds before the first apply and
removes when Flux has uninstalled. /metrics and the readiness probe /readyz are the module's
own server (kyma_gpu.metrics), on both replicas.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from aiohttp import web

from kyma_gpu.adapter import KubeAdapter, ListQuery
from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME
from kyma_gpu.extensions import EXTENSIONS
from kyma_gpu.metrics import Metrics, serve
from kyma_gpu.observe import Informers, Store
from kyma_gpu.observe.informer import Informer, ListWatch
from kyma_gpu.observe.store import Resource
from kyma_gpu.observe.watches import REQUIRED
from kyma_gpu.plan import AllowedSources, allowed_sources_of
from kyma_gpu.reconcile.election import Elector
from kyma_gpu.reconcile.loop import Loop
from kyma_gpu.reconcile.settings import KopfSettings, Settings
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.engine import RuleError

ALLOWED_SOURCES: Resource[AllowedSources] = Resource("chartsources")
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
    """The facts of everything observed, the Gpus' among them."""
    stopped: asyncio.Event
    """Set by `stop`: the loop and the elector end."""
    informers: Informers
    allowed_sources_informer: Informer
    loop_task: asyncio.Task[None]
    elector: Elector | None
    """None without leader election: this replica always writes."""
    elector_task: asyncio.Task[None] | None
    """Held only so that it lives: asyncio keeps no strong reference to a task."""
    metrics_server: web.AppRunner | None
    """None without --metrics-address."""


@dataclass
class Runtime:
    """The process's state, the one entry of kopf's memo (`runtime(memo)`): what `run` knows,
    then what `start` started, for `stop`."""

    options: Options
    started: Started | None = None


MEMO_KEY = "runtime"


def runtime(memo: kopf.Memo) -> Runtime:
    """The Runtime in kopf's memo (put there by `run`)."""
    found = memo.get(MEMO_KEY)
    if not isinstance(found, Runtime):
        raise TypeError(f"kopf's memo holds no Runtime under {MEMO_KEY!r}: {found!r}")
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
    """kopf's request retries (KopfSettings), then the last for as long as it takes: kopf still
    reads the API's discovery once at its start, and a request that gives up ends kopf, so the
    process (an API server that is down when the manager starts is waited for, as the
    informers wait for it)."""

    def __init__(self, settings: KopfSettings) -> None:
        self.settings = settings

    def __iter__(self) -> Iterator[float]:
        then = itertools.repeat(self.settings.request_backoff_forever)
        return itertools.chain(self.settings.request_backoffs, then)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    state = runtime(memo)
    given, ours = state.options, state.options.settings
    settings.scanning.disabled = True  # kopf serves no resource: it need not follow the CRDs
    settings.networking.error_backoffs = _Forever(ours.kopf)
    catalog = Catalog()  # checked in run(): broken rule data never gets this far
    metrics = Metrics.for_process()
    adapter = KubeAdapter.connect(given.identity, metrics)
    store = Store()
    on_demand = {e.watch.resource: e.watch.list_watch for e in EXTENSIONS if e.watch is not None}
    informers = Informers(adapter, store, asyncio.get_running_loop(), on_demand=on_demand,
                          settings=ours.watching)  # fmt: skip
    namespace = catalog.defaults.module_namespace
    stopped = asyncio.Event()
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
    elector_task = None
    if elector is not None:
        elector_task = asyncio.create_task(elector.run(stopped), name="election")
    loop_task = asyncio.create_task(loop.run(stopped), name="reconcile-loop")
    loop_task.add_done_callback(_loop_ended)
    state.started = Started(
        store=store, stopped=stopped, informers=informers,
        allowed_sources_informer=allowed_sources_informer, loop_task=loop_task, elector=elector,
        elector_task=elector_task,
        metrics_server=metrics_server,
    )  # fmt: skip


async def _serve_metrics(address: str | None, metrics: Metrics, loop: Loop) -> web.AppRunner | None:
    """/metrics and /readyz, on both replicas. Before anything else runs: a port that cannot
    be bound stops the operator (kopf retries a startup handler that raises anything else)."""
    if not address:
        return None
    try:
        return await serve(address, metrics, loop.waiting_for)
    except OSError as err:
        raise kopf.PermanentError(f"cannot serve metrics on {address}: {err}") from err


def _loop_ended(task: asyncio.Task[None]) -> None:
    """The loop ends only on shutdown. If it died, stop the process: a restart beats a
    manager that answers its liveness probe but reconciles nothing."""
    if not task.cancelled() and task.exception() is not None:
        log.error("the reconcile loop died; stopping", exc_info=task.exception())
        os.kill(os.getpid(), signal.SIGTERM)


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    """kopf runs it only after `start` succeeded, when the process is asked to stop."""
    started = runtime(memo).started
    if started is None:
        return
    started.stopped.set()
    started.informers.stop()
    started.allowed_sources_informer.stop()
    try:
        await asyncio.wait_for(started.loop_task, timeout=10)
    except TimeoutError:
        started.loop_task.cancel()
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
    os.environ["POD_ID"] = identity  # kopf's documented source of its identity (detect_own_id)
    # kopf only runs the process: no peering (it would pause every replica of equal priority);
    # the Lease picks the one that writes.
    options = Options(identity, leader_election, metrics_address)
    kopf.run(
        clusterwide=True,
        liveness_endpoint=liveness,
        standalone=True,
        memo=kopf.Memo({MEMO_KEY: Runtime(options)}),
    )
