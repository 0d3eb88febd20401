"""The module's own Flux: on a cluster without Flux the module installs source-controller and
helm-controller itself (the bundle, bundle.py and flux.yaml), keeps them current, shards the plan's
objects for them, and removes them (or hands their CRDs over) when the Gpu is deleted."""

from __future__ import annotations

from collections.abc import Mapping

from kyma_gpu.extensions.base import Extension
from kyma_gpu.extensions.own_flux.bundle import FluxBundle, FluxImages
from kyma_gpu.extensions.own_flux.effects import list_flux, remove_flux
from kyma_gpu.extensions.own_flux.machine import (
    ROWS,
    ListFlux,
    OwnFluxConfig,
    RemoveFlux,
    left,
    sharded,
    to_provide,
)
from kyma_gpu.reconcile.machine import Point


def configure(environ: Mapping[str, str]) -> OwnFluxConfig:
    """Its bundle with its controllers' images from the manager's environment
    (bundle.IMAGE_ENV), read when first needed."""
    return OwnFluxConfig(FluxBundle(FluxImages.from_env(environ)))


EXTENSION = Extension(
    name="own-flux",
    rows=ROWS,
    classify={Point.FLUX: to_provide, Point.UNINSTALLED: left},
    shapes=sharded,
    effects={ListFlux: list_flux, RemoveFlux: remove_flux},
    config=configure,
)
