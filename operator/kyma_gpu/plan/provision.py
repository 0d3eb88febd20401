"""Which Flux the module relies on: the cluster's own, or one it installs itself. Pure.

    no Flux CRDs at all ................... Absent: none yet (an extension may install one)
    CRDs labelled gpu.kyma-project.io/flux  Provided: the module's own Flux
    CRDs of someone else, APIs served ..... External: use it, never write its objects or CRDs
    CRDs of someone else, an API missing .. Incompatible: an Error, nothing is written

This module says which Flux there is, from the Flux CRDs' metadata (`CrdFacts`). Installing,
keeping, sharding for and removing the module's own Flux is an extension's, which the core does
not name (extensions/__init__.py registers it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from kyma_gpu.api.resources import FLUX_KINDS

PROVIDED_LABEL = "gpu.kyma-project.io/flux"
"""On the CRDs of the module's own Flux (value PROVIDED): which_flux tells it from another."""
PROVIDED = "provided"
BUNDLE_HASH = "gpu.kyma-project.io/flux-bundle-hash"
"""The annotation of the bundle's hash on the CRDs of the module's own Flux (`CrdFacts`)."""

REQUIRED_APIS = MappingProxyType({k.crd_name: k.api_version for k in FLUX_KINDS})
"""CRD name -> the API version the module writes (Flux 2.6 or newer serves all three)."""


class FluxMode(StrEnum):
    UNKNOWN = "Unknown"
    ABSENT = "Absent"
    PROVIDED = "Provided"
    EXTERNAL = "External"
    INCOMPATIBLE = "Incompatible"


class Api(StrEnum):
    """What listing one Flux resource at the module's API version answered."""

    UNKNOWN = "Unknown"
    ABSENT = "Absent"
    SERVED = "Served"
    NOT_SERVED = "NotServed"
    """The CRD exists but the version 404s: an older Flux."""


@dataclass(frozen=True, slots=True)
class CrdFacts:
    """What the module keeps of a Flux CRD: metadata only."""

    uid: str
    provided: bool = False
    bundle_hash: str | None = None
    deleting: bool = False


def crd_facts(meta: Mapping[str, Any]) -> CrdFacts:
    labels = meta.get("labels") or {}
    return CrdFacts(
        uid=str(meta.get("uid", "")),
        provided=labels.get(PROVIDED_LABEL) == PROVIDED,
        bundle_hash=(meta.get("annotations") or {}).get(BUNDLE_HASH),
        deleting=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True, slots=True)
class FluxApi:
    """The Flux CRDs present (by name) and how each required API answers."""

    crds: Mapping[str, CrdFacts] = field(default_factory=dict)
    apis: Mapping[str, Api] = field(default_factory=dict)
    synced: bool = True


def external_flux() -> FluxApi:
    """A compatible Flux of the cluster's own, every API served (the default of a Snapshot)."""
    return FluxApi(
        crds={name: CrdFacts(uid=name) for name in REQUIRED_APIS},
        apis=dict.fromkeys(REQUIRED_APIS, Api.SERVED),
    )


@dataclass(frozen=True, slots=True)
class WhichFlux:
    """Which Flux the module relies on, and what the FluxAvailable condition says of it."""

    mode: FluxMode
    message: str
    served: bool = False
    """Every API the module writes answers: objects can be applied."""


def which_flux(api: FluxApi) -> WhichFlux:
    if not api.synced:
        return WhichFlux(FluxMode.UNKNOWN, "Flux CRDs not observed yet")
    present = [name for name in REQUIRED_APIS if name in api.crds]
    served = all(api.apis.get(name) is Api.SERVED for name in REQUIRED_APIS)
    if not present:
        return WhichFlux(FluxMode.ABSENT, "no Flux on the cluster: the module installs its own")
    if any(api.crds[name].provided for name in present):
        return WhichFlux(FluxMode.PROVIDED, _provided_message(served), served)
    missing = [name for name in REQUIRED_APIS if name not in api.crds]
    if missing:
        return WhichFlux(FluxMode.INCOMPATIBLE, _incomplete_message(missing))
    unserved = [n for n in REQUIRED_APIS if api.apis.get(n) is Api.NOT_SERVED]
    if unserved:
        return WhichFlux(FluxMode.INCOMPATIBLE, _unserved_message(unserved))
    message = "using the cluster's Flux (the module changes none of its objects or CRDs)"
    return WhichFlux(FluxMode.EXTERNAL, message, served)


def _provided_message(served: bool) -> str:
    where = "source-controller and helm-controller in kyma-system"
    if served:
        return f"the module's own Flux: {where}, for the module's objects only"
    return f"installing the module's own Flux ({where}); waiting for its CRDs to be served"


def _incomplete_message(missing: Sequence[str]) -> str:
    return (
        f"the cluster's Flux lacks the CRDs {', '.join(missing)}: the module needs "
        "source-controller and helm-controller of Flux 2.6 or newer; install them, "
        "or remove the partial Flux so that the module installs its own"
    )


def _unserved_message(unserved: Sequence[str]) -> str:
    wanted = ", ".join(f"{name} at {REQUIRED_APIS[name]}" for name in unserved)
    return (
        f"the cluster's Flux is too old: the module needs {wanted} (Flux 2.6 or newer); "
        "upgrade Flux, the module does not touch a Flux it did not install"
    )
