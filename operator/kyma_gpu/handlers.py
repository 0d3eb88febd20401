"""kopf wiring. Each handler is a few lines: read inputs, call the core, write via the adapter.

Watches and what they keep (compact records, never whole bodies):

    nodes                      index node_facts        NodeFacts per Node
    pods (requesting GPUs)     index gpu_workloads     "namespace/name"
    apps/v1 daemonsets         index gpu_operands      DaemonSetFacts, target namespace only
    Flux HelmRelease/sources   index flux_objects      LiveObject (+ HelmReleaseFacts), ours only
    nvidia.com ClusterPolicy   index cluster_policies  ClusterPolicyFacts

An event handler per kind compares the new facts with the last seen ones and wakes the
reconcile loop (a daemon per Gpu) only on a real change: a Node heartbeat wakes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from kyma_gpu.adapter import AdapterError, Conflict, KubeAdapter
from kyma_gpu.api.models import API_GROUP, API_VERSION, PLURAL, SINGLETON_NAME
from kyma_gpu.facts import node_facts as compute_node_facts
from kyma_gpu.plan.actions import LiveObject, live_object
from kyma_gpu.plan.flux import LABELS
from kyma_gpu.reconciler import Reconciler, Snapshot, needs_retry
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status import (
    ClusterPolicyFacts,
    DaemonSetFacts,
    HelmReleaseFacts,
    asks_for_gpu,
    cluster_policy_facts,
    daemonset_facts,
    helm_release_facts,
    requests_gpu,
)

GPU = (API_GROUP, API_VERSION, PLURAL)
OURS = {"app.kubernetes.io/part-of": LABELS["app.kubernetes.io/part-of"]}
FLUX_KINDS = (
    ("helm.toolkit.fluxcd.io", "v2", "helmreleases"),
    ("source.toolkit.fluxcd.io", "v1", "helmrepositories"),
    ("source.toolkit.fluxcd.io", "v1", "ocirepositories"),
)
CLUSTER_POLICY = ("nvidia.com", "v1", "clusterpolicies")
WAIT_SECONDS = 300.0
RETRY_SECONDS = 20.0
SETTLE_SECONDS = 0.5
"""After a wake-up, let a burst of events (a release's DaemonSets appearing or going one by
one) settle before the next pass: one status write instead of one per event."""

FluxEntry = tuple[LiveObject, HelmReleaseFacts]


def _rec(memo: Any) -> Reconciler:
    reconciler: Reconciler = memo.reconciler
    return reconciler


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Keep kopf's bookkeeping in our own annotations; Gpu.status is ours alone.
    settings.persistence.finalizer = f"{API_GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # no Event per successful handler run
    settings.watching.server_timeout = 600
    settings.batching.error_delays = (1, 2, 5, 10, 30, 60)
    # A just-created CRD answers 429 "storage is (re)initializing" for a moment, and kopf holds
    # all event processing until every watched resource is listed: retry quickly at first.
    settings.networking.error_backoffs = (0.5, 0.5, 1, 1, 2, 3, 5, 8, 13, 21)
    if getattr(memo, "reconciler", None) is None:
        memo.reconciler = Reconciler(catalog=Catalog(), adapter=KubeAdapter.connect())


# -- indexes --------------------------------------------------------------------------------


@kopf.index("nodes")
def node_facts(name: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    return {name: compute_node_facts(body, _rec(memo).catalog.machine_types)}


def _uses_gpu(body: kopf.Body, **_: Any) -> bool:
    return requests_gpu(body)


@kopf.index("pods", when=_uses_gpu)
def gpu_workloads(namespace: str | None, name: str, **_: Any) -> str:
    return f"{namespace}/{name}"


def _in_target_namespace(namespace: str | None, memo: Any, **_: Any) -> bool:
    return namespace == _rec(memo).catalog.defaults.target_namespace


@kopf.index("apps", "v1", "daemonsets", when=_in_target_namespace)
def gpu_operands(name: str, body: kopf.Body, **_: Any) -> dict[str, DaemonSetFacts]:
    return {name: daemonset_facts(body)}


def _flux_entry(body: kopf.Body) -> dict[str, FluxEntry]:
    obj = live_object(body)
    return {f"{obj.kind}/{obj.namespace}/{obj.name}": (obj, helm_release_facts(body))}


@kopf.index(*FLUX_KINDS[0], labels=OURS)
def flux_releases(body: kopf.Body, **_: Any) -> dict[str, FluxEntry]:
    return _flux_entry(body)


@kopf.index(*FLUX_KINDS[1], labels=OURS)
def flux_helm_repositories(body: kopf.Body, **_: Any) -> dict[str, FluxEntry]:
    return _flux_entry(body)


@kopf.index(*FLUX_KINDS[2], labels=OURS)
def flux_oci_repositories(body: kopf.Body, **_: Any) -> dict[str, FluxEntry]:
    return _flux_entry(body)


@kopf.index(*CLUSTER_POLICY)
def cluster_policies(name: str, body: kopf.Body, **_: Any) -> dict[str, ClusterPolicyFacts]:
    return {name: cluster_policy_facts(body)}


def _one(index: Any, key: str) -> Any:
    store = index.get(key) if index is not None else None
    return next(iter(store), None) if store else None


def _values(index: Any) -> list[Any]:
    return [value for store in (index or {}).values() for value in store]


def snapshot(kwargs: dict[str, Any]) -> Snapshot:
    flux: list[FluxEntry] = [
        *_values(kwargs.get("flux_releases")),
        *_values(kwargs.get("flux_helm_repositories")),
        *_values(kwargs.get("flux_oci_repositories")),
    ]
    return Snapshot(
        nodes=tuple(_values(kwargs.get("node_facts"))),
        flux=tuple(obj for obj, _ in flux),
        flux_status=tuple(facts for _, facts in flux),
        daemonsets=tuple(_values(kwargs.get("gpu_operands"))),
        cluster_policy=_one(kwargs.get("cluster_policies"), "cluster-policy"),
        gpu_workloads=tuple(sorted(_values(kwargs.get("gpu_workloads")))),
    )


# -- change detection: wake the loop only when compact facts change -------------------------


@kopf.on.event("nodes")
def node_changed(type: str, name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    facts = None if type == "DELETED" else _one(kwargs.get("node_facts"), name)
    _rec(memo).observe("node", name, facts)


@kopf.on.event("apps", "v1", "daemonsets", when=_in_target_namespace)
def operand_changed(type: str, name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    facts = None if type == "DELETED" else _one(kwargs.get("gpu_operands"), name)
    _rec(memo).observe("daemonset", name, facts)


@kopf.on.event(*CLUSTER_POLICY)
def cluster_policy_changed(type: str, name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    facts = None if type == "DELETED" else _one(kwargs.get("cluster_policies"), name)
    _rec(memo).observe("clusterpolicy", name, facts)


def _flux_changed(type: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    entry = None if type == "DELETED" else next(iter(_flux_entry(body).values()))
    key = f"{body.get('kind')}/{body.metadata.namespace}/{body.metadata.name}"
    _rec(memo).observe("flux", key, entry)


for _kind in FLUX_KINDS:
    kopf.on.event(*_kind, labels=OURS, id=f"flux-{_kind[2]}-changed")(_flux_changed)


@kopf.on.event("pods")
def workload_changed(
    type: str, namespace: str | None, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    # No `when` filter: a GPU pod that finishes stops matching one, and that very event
    # must wake a deletion that waits for it. GPU pods matter only while one waits.
    reconciler = _rec(memo)
    if reconciler.deleting and asks_for_gpu(body):
        reconciler.poke()  # rare: GPU pods changing while a deletion waits for them


@kopf.on.event(*GPU)
def gpu_changed(memo: kopf.Memo, **_: Any) -> None:
    _rec(memo).poke()


# -- the Gpu ---------------------------------------------------------------------------------


@kopf.daemon(*GPU, cancellation_timeout=10.0)
async def reconcile_gpu(
    body: kopf.Body,
    memo: kopf.Memo,
    stopped: kopf.DaemonStopped,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    """The reconcile loop: one pass now, then one per change until the Gpu goes away."""
    reconciler = _rec(memo)
    if body.metadata.name != SINGLETON_NAME:
        await reconciler.reconcile(body, snapshot(kwargs))  # writes the refusal once
        await stopped.wait()
        return
    while not stopped:
        reconciler.changed.clear()
        retry: float | None = None
        try:
            if needs_retry(await reconciler.reconcile(body, snapshot(kwargs))):
                retry = RETRY_SECONDS
            elif reconciler.awaiting_watch:  # an apply the watch has not confirmed yet
                retry = reconciler.settle_seconds
        except (AdapterError, Conflict) as err:
            logger.warning("reconcile failed, retrying in %.0fs: %s", RETRY_SECONDS, err)
            retry = RETRY_SECONDS
        waiter = asyncio.ensure_future(reconciler.changed.wait())
        stopper = asyncio.ensure_future(stopped.wait())
        try:
            await asyncio.wait(
                {waiter, stopper}, timeout=retry, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            waiter.cancel()
            stopper.cancel()
        if not stopped:
            await stopped.wait(SETTLE_SECONDS)


@kopf.on.delete(*GPU)
async def delete_gpu(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any) -> None:
    """Protect GPU workloads, remove the HelmRelease, wait until Flux has uninstalled."""
    reconciler = _rec(memo)
    if body.metadata.name != SINGLETON_NAME:
        return  # a refused Gpu owns nothing
    reconciler.deleting = True
    while True:
        reconciler.changed.clear()
        snap = snapshot(kwargs)
        if not snap.gpu_workloads and not snap.flux:
            # Nothing left: no last status write, which would only race kopf's finalizer removal.
            logger.info("Flux objects are gone; releasing the Gpu")
            reconciler.deleting = False
            return
        await reconciler.reconcile(body, snap, deleting=True)
        if snap.gpu_workloads:
            logger.warning("deletion waits for GPU workloads: %s", ", ".join(snap.gpu_workloads))
        else:
            await reconciler.remove_flux_objects(snap.flux)
        await reconciler.wait_for_change(WAIT_SECONDS)
        await asyncio.sleep(SETTLE_SECONDS)


def run(liveness: str | None = None, peering: str | None = None, standalone: bool = False) -> None:
    """`kyma-gpu run`: the operator process."""
    kopf.configure(verbose=False)
    # kopf logs every event handler run at INFO; on Node heartbeats that is noise.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    kopf.run(
        clusterwide=True,
        liveness_endpoint=liveness,
        peering_name=peering,
        standalone=standalone or peering is None,
    )
