"""The module's own Flux: its read and its action, carried out through the adapter."""

from __future__ import annotations

import logging

from kyma_gpu.adapter import ObjectRef
from kyma_gpu.extensions.base import Context
from kyma_gpu.extensions.own_flux.machine import FluxLeftovers, Leftover, ListFlux, RemoveFlux
from kyma_gpu.plan.provision import BUNDLE_HASH, PROVIDED_LABEL, crd_facts

log = logging.getLogger(__name__)


async def list_flux(read: ListFlux, context: Context) -> FluxLeftovers:
    """The Flux objects of every kind and namespace, a few per kind, as Leftover facts."""
    return FluxLeftovers(tuple(
        Leftover(kind, f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                 bool(meta.get("deletionTimestamp")))
        for kind, item in await context.writer.flux_objects(per_kind=5)
        for meta in [item.get("metadata") or {}]
    ))  # fmt: skip


async def remove_flux(removal: RemoveFlux, context: Context) -> int:
    """The module's own Flux goes: its controllers, then its CRDs (deleted, or unlabelled
    and left to the owners of the objects that use them). Only CRDs that still carry the
    module's label: kyma-gpu-manager refuses any other write to a Flux CRD, so a retry
    after a partial hand-over must not touch the ones already handed over."""
    writer, done = context.writer, 0
    for obj in removal.workloads:
        log.info("removing the module's Flux: %s", ObjectRef.of(obj))
        await writer.delete(ObjectRef.of(obj))
        done += 1
    for name in removal.crds:
        ref = ObjectRef("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name)
        current = await writer.read(ref)
        if current is None or not crd_facts(current.get("metadata") or {}).provided:
            continue  # gone, or handed over by an earlier try: no longer the module's
        if removal.hand_over:
            context.write_back.crd(await writer.unlabel(ref, PROVIDED_LABEL, BUNDLE_HASH))
        else:
            context.write_back.crd(await writer.delete(ref))
        done += 1
    if removal.announce is not None:
        log.warning("%s", removal.announce.message)
        await context.recorder.announce(context.gpu, removal.announce)
    return done
