"""kopf wiring, for the Gpu only.

kopf watches the Gpu and runs the process (startup, cleanup, liveness); a Lease picks the
replica that writes (reconcile/election.py). It has no
change-detecting handler and no daemon, so it writes nothing to the Gpu: no annotations,
no finalizer of its own. The finalizer `gpu.kyma-project.io/finalizer` belongs to the
reconcile loop, which adds it before the first apply and removes it when Flux has
uninstalled.

Everything else the operator sees comes from the observers (kyma_gpu.observe): paged LISTs and
WATCHes of Nodes, the operand DaemonSets, our Flux objects, the ClusterPolicy and the CRDs,
kept as compact facts in one store, and, observed here, the one ConfigMap of allowed chart
sources (kyma-system/kyma-gpu-chart-sources, by a field selector on its name). The reconcile
loop (kyma_gpu.reconcile) wakes when those facts change.
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
from typing import Any

import kopf
from aiohttp import web

from kyma_gpu.adapter import KubeAdapter, ListQuery
from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME
from kyma_gpu.api.models import API_GROUP, API_VERSION, PLURAL
from kyma_gpu.errors import ApiError
from kyma_gpu.facts.gpu import gpu_object
from kyma_gpu.metrics import Metrics, serve
from kyma_gpu.observe import Entry, Observers, Store
from kyma_gpu.observe.informer import Informer, Source
from kyma_gpu.observe.sources import REQUIRED
from kyma_gpu.observe.store import Resource, version_of
from kyma_gpu.plan import Origins, origins_of
from kyma_gpu.plan.provision import FluxImages
from kyma_gpu.reconcile.election import Elector
from kyma_gpu.reconcile.loop import GPUS, Loop
from kyma_gpu.reconcile.settings import KopfSettings, Settings
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.engine import RuleError

GPU = (API_GROUP, API_VERSION, PLURAL)
CHART_SOURCES: Resource[Origins] = Resource("chartsources")
"""The allowed chart sources: the facts of the one ConfigMap (absent: NVIDIA's only)."""
log = logging.getLogger(__name__)


def chart_sources_source(namespace: str) -> Source:
    """The ConfigMap kyma-gpu-chart-sources only: a field selector on its name, which the
    manager's Role allows to list and watch by that resourceName."""
    query = ListQuery(f"/api/v1/namespaces/{namespace}/configmaps",
                      field_selector=f"metadata.name={CONFIG_MAP_NAME}")  # fmt: skip
    return Source(CHART_SOURCES, query, origins_of, key=lambda _: CONFIG_MAP_NAME)


def chart_origins(store: Store) -> Origins:
    """What the watch holds; the default while there is no ConfigMap."""
    return store.get(CHART_SOURCES, CONFIG_MAP_NAME) or Origins()


def _store(memo: Any) -> Store:
    store: Store = memo.store
    return store


class _Forever:
    """kopf's request retries (KopfSettings), then the last for as long as it takes."""

    def __init__(self, settings: KopfSettings) -> None:
        self.settings = settings

    def __iter__(self) -> Iterator[float]:
        then = itertools.repeat(self.settings.request_backoff_forever)
        return itertools.chain(self.settings.request_backoffs, then)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ours: Settings = memo.settings
    settings.posting.level = logging.WARNING  # no Event per handler run
    settings.watching.server_timeout = ours.kopf.gpu_watch_seconds
    settings.networking.error_backoffs = _Forever(ours.kopf)
    catalog = Catalog()  # checked in run(): broken rule data never gets this far
    identity: str = memo.identity
    metrics = Metrics.for_process()
    adapter = KubeAdapter.connect(identity, metrics)
    store = Store()
    observers = Observers(adapter, store, asyncio.get_running_loop(), settings=ours.watching)
    namespace = catalog.defaults.module_namespace
    memo.stopped, memo.elector = asyncio.Event(), None
    if memo.leader_election:
        memo.elector = Elector(adapter, namespace, ours.election.lease_name, identity,
                               settings=ours.election)  # fmt: skip
    loop = Loop(store, adapter, catalog, watch_pods=observers.watch_pods,
                may_write=memo.elector.may_write if memo.elector else lambda: True,
                module_namespace=namespace, settings=ours.loop, metrics=metrics,
                flux_images=FluxImages.from_env(os.environ),
                origins=lambda: chart_origins(store),
                required=(*REQUIRED, CHART_SOURCES))  # fmt: skip
    metrics.observe(loop.scrape)
    memo.metrics_server = await _serve_metrics(memo.metrics_address, metrics, loop)
    observers.start(catalog.machine_types, namespace, catalog.defaults.target_namespace)
    memo.chart_sources = Informer(adapter, chart_sources_source(namespace), store,
                                  asyncio.get_running_loop(), ours.watching).start()  # fmt: skip
    if memo.elector is not None:
        memo.elector_task = asyncio.create_task(memo.elector.run(memo.stopped), name="election")
    memo.store, memo.observers = store, observers
    memo.loop_task = asyncio.create_task(loop.run(memo.stopped), name="reconcile-loop")
    memo.loop_task.add_done_callback(_loop_ended)
    await _until_gpus_served(adapter, ours.kopf)


async def _until_gpus_served(adapter: KubeAdapter, settings: KopfSettings) -> None:
    """Return once discovery lists the Gpu resource. kopf resolves its resources once, after
    the startup handlers, and later only when a CRD changes: had it looked while the API
    server was starting (the CRDs not loaded yet), it would never watch a Gpu."""
    waits = itertools.chain(settings.served_poll, itertools.repeat(settings.served_poll[-1]))
    said = False
    while True:
        try:
            if await asyncio.to_thread(adapter.serves, API_GROUP, API_VERSION, PLURAL):
                return
            reason = "not served yet"
        except ApiError as err:
            reason = str(err)
        if not said:
            log.info("waiting for the API server to serve %s.%s/%s (%s)",
                     PLURAL, API_GROUP, API_VERSION, reason)  # fmt: skip
            said = True
        await asyncio.sleep(next(waits))


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
    memo.stopped.set()
    memo.observers.stop()
    memo.chart_sources.stop()
    try:
        await asyncio.wait_for(memo.loop_task, timeout=10)
    except TimeoutError:
        memo.loop_task.cancel()
    if memo.elector is not None:  # after the last write: hand over at once
        await memo.elector.release()
    if memo.metrics_server is not None:
        await memo.metrics_server.cleanup()


@kopf.on.event(*GPU)
def gpu_changed(type: str, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Keep the Gpu's compact facts; the store wakes the loop when they changed."""
    if type == "DELETED":
        gone_at = version_of((body.get("metadata") or {}).get("resourceVersion"))
        _store(memo).put(GPUS, name, None, gone_at)
        return
    obj = gpu_object(body)
    _store(memo).put(GPUS, name, Entry(version_of(obj.resource_version), obj))


def own_identity(environ: Mapping[str, str]) -> str:
    """Who this process is, for kopf, the Lease and the user agent: the pod's name (the
    Deployment's POD_NAME), else host and pid. Never the login name: the image's numeric user
    65532 has no passwd entry, and containerd, the runtime of every Gardener node, writes none
    into the container (podman and Docker do). kopf's own default identity asks
    getpass.getuser(), which raises KeyError there: the manager crashed at start."""
    return environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def run(
    liveness: str | None = None, leader_election: bool = False, metrics_address: str | None = None,
    settings: Settings | None = None,
) -> None:  # fmt: skip
    """`kyma-gpu run`: the operator process."""
    try:
        Catalog().check()
    except RuleError as err:  # the operator does not half-start on broken rule data
        print(f"kyma-gpu run: broken rule data: {err}", file=sys.stderr)
        sys.exit(2)
    kopf.configure(verbose=False)
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    identity = own_identity(os.environ)
    os.environ["POD_ID"] = identity  # kopf's documented source of its identity (detect_own_id)
    # kopf only watches the Gpu and runs the process: no peering (it would pause every replica
    # of equal priority); the Lease picks the one that writes.
    kopf.run(
        clusterwide=True,
        liveness_endpoint=liveness,
        standalone=True,
        memo=kopf.Memo(
            identity=identity,
            leader_election=leader_election,
            metrics_address=metrics_address,
            settings=settings or Settings(),
        ),
    )
