"""The module's own Flux: on a cluster without Flux the module installs source-controller and
helm-controller itself (the bundle, plan/provision.py), keeps them current, shards the plan's
objects for them, and removes them (or hands their CRDs over) when the Gpu is deleted."""

from __future__ import annotations

from kyma_gpu.extensions.base import Extension, Grant
from kyma_gpu.extensions.own_flux.effects import list_flux, remove_flux
from kyma_gpu.extensions.own_flux.machine import (
    ROWS,
    ListFlux,
    RemoveFlux,
    Situation,
    left,
    sharded,
    to_provide,
)
from kyma_gpu.reconcile.machine import Point

EXTENSION = Extension(
    name="own-flux",
    situations=Situation,
    classify={Point.FLUX: to_provide, Point.UNINSTALLED: left},
    rows=ROWS,
    shapes=sharded,
    reads={ListFlux: list_flux},
    actions={RemoveFlux: remove_flux},
    grants=frozenset({Grant.FLUX_BUNDLE}),
)
