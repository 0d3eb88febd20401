"""The module's own Flux: its read and its action, carried out through the adapter's generic
calls."""

from __future__ import annotations

import logging
from typing import Any

from kyma_gpu.adapter import ListQuery, ObjectRef, Patch
from kyma_gpu.errors import NotFound
from kyma_gpu.extensions.base import Context
from kyma_gpu.extensions.own_flux.bundle import FLUX_CRD_KINDS
from kyma_gpu.extensions.own_flux.machine import FluxLeftovers, Leftover, ListFlux, RemoveFlux
from kyma_gpu.plan.provision import BUNDLE_HASH, PROVIDED_LABEL, crd_facts

log = logging.getLogger(__name__)

PER_KIND = 5
"""Flux objects listed of each kind: a few say whether others use the CRDs, and which."""


async def list_flux(read: ListFlux, context: Context) -> FluxLeftovers:
    """The Flux objects of every kind and namespace, a few per kind (metadata only), as
    Leftover facts; a kind whose CRD is gone has none."""
    found: list[Leftover] = []
    for kind in FLUX_CRD_KINDS:
        try:
            page = await context.writer.read_list(ListQuery(kind.path(), metadata_only=True),
                                                  PER_KIND)  # fmt: skip
        except NotFound:
            continue
        for item in page.get("items") or ():
            meta = item.get("metadata") or {}
            found.append(Leftover(kind.kind, f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                                  bool(meta.get("deletionTimestamp"))))  # fmt: skip
    return FluxLeftovers(tuple(found))


async def _hand_over(context: Context, ref: ObjectRef) -> dict[str, Any] | None:
    """Unlabel the CRD: a merge patch that removes the module's label and bundle hash, nothing
    else. None when it is gone."""
    unlabelled = {"metadata": {"labels": {PROVIDED_LABEL: None},
                               "annotations": {BUNDLE_HASH: None}}}  # fmt: skip
    try:
        return await context.writer.patch(ref, unlabelled, Patch.MERGE, what=f"unlabel {ref}")
    except NotFound:
        return None


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
            context.write_back.crd(await _hand_over(context, ref))
        else:
            context.write_back.crd(await writer.delete(ref))
        done += 1
    if removal.announce is not None:
        log.warning("%s", removal.announce.message)
        await context.recorder.announce(context.gpu, removal.announce)
    return done
