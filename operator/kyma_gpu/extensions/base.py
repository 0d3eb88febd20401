"""The one interface of an extension: what it adds to the state machine and the loop.

An extension is an extra beyond the card (detect nodes, hand the Gpu to Flux, mirror Flux's
state into the status): it lives in one folder of kyma_gpu/extensions/ and is registered by
one line of `REGISTERED` (extensions/__init__.py). Removing it means deleting both; the core
(reconcile/machine.py's `Situation` and `ROWS`) does not name it.

What an extension brings:

- its situations, as a StrEnum of its own, and their rows (phase, step, retried or not);
- a classify hook per `Point` of the core's order: its situation there, or None;
- a list-watch of its own, observed only while the inputs want it (`watch`: a `Watch`; its
  facts are in the snapshot's `observed` under its resource key);
- its share of the Node fold (`node_fold`): what it keeps of each Node body, in
  `ObservedNode.extras`;
- a change to the plan's objects before they are compared and applied (`shapes`);
- its configuration, from the manager's environment and the loop's settings (`config`);
- its reads (what no informer watches; the answer is in the next snapshot's `reads`) and its
  actions, and how the loop carries each out (`reads`, `actions`, with a `Context`);
- its part of the Gpu's status (`status`): conditions after the core's, the deletion's waits
  before the core's Uninstalled, GpuStatus fields (status/aggregate.py `StatusPart`), and
  its part of the Events of a status write (`events`: its news, what they may not say);
- what the manager's account writes for it (`grants`), from which the tools compose the
  admission policies (config/admission/manager_policy.yaml).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from kyma_gpu.facts.gpu import GpuObject
from kyma_gpu.facts.node import NodeFold
from kyma_gpu.observe.informers import OnDemand
from kyma_gpu.reconcile.effects import ClusterApi, Recorder, WriteBack
from kyma_gpu.reconcile.machine import (
    ExtensionAction,
    ExtensionRead,
    Hook,
    Inputs,
    Point,
    Row,
    Shape,
)
from kyma_gpu.reconcile.settings import LoopSettings
from kyma_gpu.status.aggregate import StatusHook
from kyma_gpu.status.events import EventPart


@dataclass(frozen=True, slots=True)
class Context:
    """What the loop hands an extension's action: the Gpu, the writer (the adapter) and where
    answers go (the store's write-back, the Event recorder)."""

    gpu: GpuObject
    writer: ClusterApi
    write_back: WriteBack
    recorder: Recorder


Carry = Callable[[Any, Context], Awaitable[int]]
"""Carries one action (of the type it is registered for) out; returns the requests made."""

Configure = Callable[[Mapping[str, str], LoopSettings], object]
"""Builds an extension's configuration from the manager's environment and the loop's settings,
once; `decide` hands it over in `Inputs.config`, where the extension finds it by its type."""

Fetch = Callable[[Any, Context], Awaitable[object]]
"""Carries one read (of the type it is registered for) out; returns its answer, which the next
snapshot holds (`Snapshot.reads`)."""


class Grant(StrEnum):
    """What an extension needs the manager's account to write beyond the core's objects (the
    Gpu, its HelmRelease and chart source, its Lease, Events). Data only: the tools generate the
    admission policies' pieces that hold the account to these writes from the registered
    extensions' grants (kyma_gpu_tools/manager_policy.py); the runtime never reads them."""

    FLUX_BUNDLE = "the Flux bundle: its Deployments and CRDs, by name"
    NODES = "Nodes: a condition (nodes/status), the cordon and its annotation (nodes)"


@dataclass(frozen=True, slots=True)
class Watch:
    """An extension's list-watch on demand: observed only while `wanted` says so for a Gpu
    (the loop starts and stops it, observe/informers.py `Informers.observe`); its facts are in
    the snapshot's and the evidence's `observed` under `resource`, None until it is listed."""

    resource: str
    """The resource key: in the store, and in `Snapshot.observed`."""
    list_watch: OnDemand
    """Makes the list-watch, with the stack's namespaces."""
    wanted: Callable[[Inputs], bool]
    """True: this Gpu's decision needs it observed."""


@dataclass(frozen=True, slots=True)
class Extension:
    name: str
    situations: type[StrEnum]
    classify: Mapping[Point, Hook]
    """Where `classify` asks it (reconcile/machine.py's `Point`), and what it sees there."""
    rows: Mapping[StrEnum, Row]
    """One row per situation, in the order it checks them."""
    watch: Watch | None = None
    """A list-watch of its own, observed only while wanted (users' GPU pods)."""
    node_fold: NodeFold | None = None
    """What it keeps of each Node body beyond the NodeFacts (`ObservedNode.extras`)."""
    shapes: Shape | None = None
    """Changes the plan's objects before they are compared with the live ones and applied."""
    reads: Mapping[type[ExtensionRead], Fetch] = field(default_factory=lambda: MappingProxyType({}))
    """Its reads, and how the loop carries each out."""
    actions: Mapping[type[ExtensionAction], Carry] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """Its actions, and how the loop carries each out."""
    status: StatusHook | None = None
    """Its part of the Gpu's status: conditions, the deletion's waits, fields (pure)."""
    config: Configure | None = None
    """Its configuration (the module's own Flux: its images, how long a removal waits)."""
    events: EventPart | None = None
    """Its part of the Events of a status write: its news, what they may not say."""
    grants: frozenset[Grant] = frozenset()
    """What the manager's account writes for it: its pieces of the admission policies."""

    def __post_init__(self) -> None:
        if list(self.rows) != list(self.situations):
            raise ValueError(f"the extension {self.name} needs one row per situation, in order")
        # frozen: no module holds mutable state
        for name in ("classify", "rows", "reads", "actions"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
