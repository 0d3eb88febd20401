"""The one interface of an extension: what it adds to the state machine, the observation and
the loop.

An extension is an extra beyond the card (detect nodes, hand the Gpu to Flux, mirror Flux's
state into the status): it lives in one folder of kyma_gpu/extensions/ and is registered by
one line of `REGISTERED` (extensions/__init__.py). Removing it means deleting both; the core
does not name it. What an extension brings, and which of the three uses it:

- `rows`: its situations (a StrEnum of its own) and their rows (phase, step, retried or not),
  in the order it checks them (all three);
- `classify`: a hook per `Point` of the core's order, its situation there or None (all three);
- `watch`: a list-watch of its own, observed only while the inputs want it; its facts are in
  the snapshot's `observed` under its resource key (workload protection: users' GPU pods);
- `node_fold`: its share of the Node fold, what it keeps of each Node body in
  `ObservedNode.extras` (node marks: GPU devices, the mark);
- `shapes`: a change to the plan's objects before they are compared and applied (the own
  Flux: its sharding label);
- `effects`: its actions (writes) and reads (what no informer watches; the answer is in the
  next snapshot's `reads`), by type, and how the loop carries each out with a `Context` (node
  marks: MarkNodes; the own Flux: ListFlux, RemoveFlux);
- `config`: its configuration, from the manager's environment (the own Flux: its bundle and
  images);
- `status`: what it says of the Gpu (status/events.py `Report`): its status part (conditions
  after the core's, the deletion's waits, GpuStatus fields), the conditions it writes with
  their reasons, its news and what the Events may not say (workload protection, node marks).
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
from kyma_gpu.reconcile.machine import Hook, Inputs, Point, Row, Shape
from kyma_gpu.status.events import Report


@dataclass(frozen=True, slots=True)
class Context:
    """What the loop hands an extension's action or read: the Gpu, the writer (the adapter)
    and where answers go (the store's write-back, the Event recorder)."""

    gpu: GpuObject
    writer: ClusterApi
    write_back: WriteBack
    recorder: Recorder


Effect = Callable[[Any, Context], Awaitable[Any]]
"""Carries one action or read (of the type it is registered for) out: an action returns the
requests it made (an int), a read its answer, which the next snapshot holds (`Snapshot.reads`)."""

Configure = Callable[[Mapping[str, str]], object]
"""Builds an extension's configuration from the manager's environment, once (the loop);
`decide` hands it over in `Inputs.config`, where the extension finds it by its type."""


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
    rows: Mapping[StrEnum, Row]
    """One row per situation (the members of one StrEnum of its own), in the order it checks
    them."""
    classify: Mapping[Point, Hook]
    """Where `classify` asks it (reconcile/machine.py's `Point`), and what it sees there."""
    watch: Watch | None = None
    """A list-watch of its own, observed only while wanted."""
    node_fold: NodeFold | None = None
    """What it keeps of each Node body beyond the NodeFacts (`ObservedNode.extras`)."""
    shapes: Shape | None = None
    """Changes the plan's objects before they are compared with the live ones and applied."""
    effects: Mapping[type, Effect] = field(default_factory=lambda: MappingProxyType({}))
    """Its actions (`ExtensionAction`) and reads (`ExtensionRead`) by type, and how the loop
    carries each out."""
    config: Configure | None = None
    """Its configuration, built once by the loop."""
    status: Report | None = None
    """What it says of the Gpu: its status part (pure), its conditions, its Events."""

    def __post_init__(self) -> None:
        kinds = {type(situation) for situation in self.rows}
        if len(kinds) != 1 or list(self.rows) != list(kinds.pop()):
            raise ValueError(f"the extension {self.name} needs one row per situation, in order")
        # frozen: no module holds mutable state
        for name in ("classify", "rows", "effects"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
