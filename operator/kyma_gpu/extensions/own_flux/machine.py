"""The module's own Flux: its situations, rows, read and action. Pure.

A cluster without Flux gets the module's own (the bundle, bundle.py): the manager
applies it once the plan is compatible (FluxToProvide), keeps it current, and labels the
plan's objects for its shard (`shapes`). A deletion, once Flux uninstalled the release,
removes it: the Flux objects of every kind are listed first (`ListFlux`, no informer watches
them all), then its controllers go, and its CRDs too unless objects the module did not create
use them (then they are handed over, unlabelled). Without this extension a cluster with no
Flux waits in FluxNotServed."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from kyma_gpu.extensions.own_flux.bundle import SHARD, SHARD_LABEL, FluxBundle
from kyma_gpu.facts.echo import listed
from kyma_gpu.plan import Plan
from kyma_gpu.plan.provision import PROVIDED_LABEL, FluxApi, FluxMode, which_flux
from kyma_gpu.reconcile.machine import (
    Apply,
    ExtensionAction,
    ExtensionRead,
    Inputs,
    Row,
    Seen,
    Step,
    loud_status,
)
from kyma_gpu.status.events import EventType, GpuEvent


class Situation(StrEnum):
    FLUX_TO_PROVIDE = "FluxToProvide"
    OWN_FLUX_UNLISTED = "OwnFluxUnlisted"
    OWN_FLUX_TERMINATING = "OwnFluxTerminating"
    OWN_FLUX_IN_USE = "OwnFluxInUse"
    OWN_FLUX_UNUSED = "OwnFluxUnused"


class Phase(StrEnum):
    PROVIDING_FLUX = "ProvidingFlux"
    REMOVING_FLUX = "RemovingFlux"


class EventReason(StrEnum):
    """The reasons of the Events this extension asks for."""

    FLUX_HANDED_OVER = "FluxHandedOver"


FLUX_REMOVE = "flux-remove"
"""The key of the list of Flux objects and of the removal of the module's Flux: a failed
removal holds the next list back until its retry is due."""


class Removal(StrEnum):
    WAIT = "Wait"
    """An object of the module is still terminating: its controller must finish it."""
    DELETE_CRDS = "DeleteCrds"
    HAND_OVER = "HandOver"
    """Others' objects use the CRDs: keep them, unlabelled, for their owners."""


@dataclass(frozen=True, slots=True)
class Leftover:
    """A Flux object found when the module's Flux goes: kind, namespace/name, terminating."""

    kind: str
    name: str
    terminating: bool


def removal(leftovers: Sequence[Leftover], module_namespace: str) -> Removal:
    if any(o.terminating and o.name.startswith(f"{module_namespace}/") for o in leftovers):
        return Removal.WAIT
    return Removal.HAND_OVER if leftovers else Removal.DELETE_CRDS


def hand_over_message(leftovers: Sequence[Leftover]) -> str:
    shown = listed([f"{o.kind} {o.name}" for o in leftovers], 5)
    return (
        f"the Flux CRDs the module installed stay: objects it did not create use them "
        f"({shown}); the module's Flux controllers were removed, the CRDs are no longer "
        f"labelled {PROVIDED_LABEL}"
    )


@dataclass(frozen=True, slots=True)
class OwnFluxConfig:
    """The module's own Flux's configuration (`Extension.config`): its bundle with its
    controllers' images (bundle.IMAGE_ENV in the manager's environment), read when first
    needed, and how long a removal waits for one of the module's objects that terminates."""

    bundle: FluxBundle = field(default_factory=FluxBundle)
    removal_wait_seconds: float = 5.0
    """RemovingFlux waits while one of the module's Flux objects terminates (a HelmChart its
    source-controller finalizes): no informer watches that kind, so the machine looks again
    after this long (a list of the Flux objects of every kind each time)."""


def _config(inputs: Inputs) -> OwnFluxConfig:
    """The loop's; without it (a test's `decide`) the bundle's own images, the default wait."""
    found = (c for c in inputs.config if isinstance(c, OwnFluxConfig))
    return next(found, None) or OwnFluxConfig()


@dataclass(frozen=True, slots=True)
class ListFlux(ExtensionRead):
    """List the Flux objects of every kind (metadata only): how the module's own Flux goes
    depends on them. The answer is a `FluxLeftovers` in the next snapshot's `reads`."""


@dataclass(frozen=True, slots=True)
class FluxLeftovers:
    """What `ListFlux` found: the Flux objects of every kind and namespace, a few per kind."""

    found: tuple[Leftover, ...] = ()


@dataclass(frozen=True, slots=True)
class RemoveFlux(ExtensionAction):
    """Delete the module's own Flux controllers (`workloads`), then its CRDs (`crds`), or, when
    objects the module did not create use them, unlabel the CRDs and leave them (`hand_over`;
    `announce` says so)."""

    workloads: tuple[Mapping[str, Any], ...]
    crds: tuple[str, ...]
    hand_over: bool
    announce: GpuEvent | None = None


@dataclass(frozen=True, slots=True)
class Listed(Seen):
    """A situation of the removal, with what the list found."""

    leftovers: tuple[Leftover, ...] = ()


def to_provide(inputs: Inputs, plan: Plan | None) -> Seen | None:
    """The plan's Flux compatible: no Flux CRDs, or the module's own Flux with an older
    bundle hash."""
    api = inputs.snap.flux_api
    wanted = which_flux(api).mode in (FluxMode.ABSENT, FluxMode.PROVIDED)
    if wanted and not _config(inputs).bundle.current(api):
        return Seen(Situation.FLUX_TO_PROVIDE, plan)
    return None


def shard(objects: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The plan's Flux objects, labelled for the module's own Flux (and the HelmChart that
    helm-controller creates from a HelmRelease, through spec.chart.metadata.labels)."""
    out = []
    for obj in objects:
        copied = copy.deepcopy(dict(obj))
        copied["metadata"].setdefault("labels", {})[SHARD_LABEL] = SHARD
        chart = (copied.get("spec") or {}).get("chart")
        if copied["kind"] == "HelmRelease" and isinstance(chart, dict):
            chart.setdefault("metadata", {}).setdefault("labels", {})[SHARD_LABEL] = SHARD
        out.append(copied)
    return tuple(out)


def sharded(
    inputs: Inputs, objects: tuple[Mapping[str, Any], ...]
) -> tuple[Mapping[str, Any], ...]:
    """The module's own Flux reconciles only objects with its sharding label."""
    provided = which_flux(inputs.snap.flux_api).mode is FluxMode.PROVIDED
    return shard(objects) if provided else objects


def left(inputs: Inputs, plan: Plan | None) -> Seen | None:
    """Uninstalled: the module's own Flux goes, once the Flux objects of every kind are listed."""
    snap = inputs.snap
    if not _own_flux_left(snap.flux_api):
        return None
    listed = next((r for r in snap.reads if isinstance(r, FluxLeftovers)), None)
    if listed is None:
        return Seen(Situation.OWN_FLUX_UNLISTED)
    situation = {
        Removal.WAIT: Situation.OWN_FLUX_TERMINATING,
        Removal.HAND_OVER: Situation.OWN_FLUX_IN_USE,
        Removal.DELETE_CRDS: Situation.OWN_FLUX_UNUSED,
    }[removal(listed.found, inputs.module_namespace)]
    return Listed(situation, leftovers=listed.found)


def _own_flux_left(api: FluxApi) -> bool:
    """The module's own Flux is still there (and not already on its way out)."""
    return which_flux(api).mode is FluxMode.PROVIDED and not all(
        c.deleting for c in api.crds.values()
    )


def _providing_flux(seen: Seen, inputs: Inputs) -> Step:
    assert seen.plan is not None
    bundle = _config(inputs).bundle
    key = f"flux-bundle-{bundle.hash}"
    return Step(Phase.PROVIDING_FLUX, Apply(bundle.objects()), key=key,
                status_if_failed=loud_status(inputs, seen.plan, key))  # fmt: skip


def _list_flux(seen: Seen, inputs: Inputs) -> Step:
    return Step(Phase.REMOVING_FLUX, read=ListFlux(), key=FLUX_REMOVE)


def _removal_waits(seen: Seen, inputs: Inputs) -> Step:
    # no informer watches the terminating kind: look (and list) again after a while
    return Step(Phase.REMOVING_FLUX, requeue_after=_config(inputs).removal_wait_seconds)


def _hand_over(seen: Seen, inputs: Inputs) -> Step:
    assert isinstance(seen, Listed)
    message = hand_over_message(seen.leftovers)
    event = GpuEvent(EventType.NORMAL, EventReason.FLUX_HANDED_OVER, message)
    bundle = _config(inputs).bundle
    removal = RemoveFlux(bundle.workloads(), bundle.crds(), hand_over=True, announce=event)
    return Step(Phase.REMOVING_FLUX, removal, key=FLUX_REMOVE)


def _remove_flux(seen: Seen, inputs: Inputs) -> Step:
    bundle = _config(inputs).bundle
    removal = RemoveFlux(bundle.workloads(), bundle.crds(), hand_over=False)
    return Step(Phase.REMOVING_FLUX, removal, key=FLUX_REMOVE)


S = Situation
ROWS: Mapping[StrEnum, Row] = MappingProxyType({
    S.FLUX_TO_PROVIDE: Row(
        "no Flux CRDs, or the module's own Flux carries an older bundle hash",
        Phase.PROVIDING_FLUX,
        "apply the Flux bundle (its `flux.yaml`), the helmreleases CRD last", True,
        _providing_flux),
    S.OWN_FLUX_UNLISTED: Row(
        "being deleted, uninstalled, the module's own Flux left, Flux objects not listed in "
        "this pass", Phase.REMOVING_FLUX,
        "list the Flux objects of all kinds (metadata only)", True, _list_flux),
    S.OWN_FLUX_TERMINATING: Row(
        "... one of the module's Flux objects still terminates", Phase.REMOVING_FLUX,
        "look and list again after `OwnFluxConfig.removal_wait_seconds` (nothing observes a "
        "HelmChart)", False, _removal_waits),
    S.OWN_FLUX_IN_USE: Row(
        "... objects the module did not create use its Flux CRDs", Phase.REMOVING_FLUX,
        "delete the Flux controllers, hand the CRDs over (unlabel, Event `FluxHandedOver`)",
        True, _hand_over),
    S.OWN_FLUX_UNUSED: Row(
        "... nothing else uses them", Phase.REMOVING_FLUX,
        "delete the Flux controllers and CRDs", True, _remove_flux),
})  # fmt: skip
del S
