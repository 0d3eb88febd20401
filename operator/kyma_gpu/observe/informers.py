"""All informers of one operator process, started together; the extensions' list-watches on
demand (`observe`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kyma_gpu.facts.machines import MachineTypeRegistry
from kyma_gpu.facts.node import NodeFold
from kyma_gpu.observe import watches
from kyma_gpu.observe.informer import GcPause, Informer, ListWatch, Reader, WatchSettings
from kyma_gpu.observe.store import Store

log = logging.getLogger(__name__)

OnDemand = Callable[[tuple[str, ...]], ListWatch]
"""An extension's list-watch, made with the stack's namespaces (the module's and the GPU
operator's), observed only while the loop wants it (extensions/base.py `Watch`)."""


@dataclass
class Informers:
    reader: Reader
    store: Store
    loop: asyncio.AbstractEventLoop
    running: dict[str, Informer] = field(default_factory=dict)
    on_demand: Mapping[str, OnDemand] = field(default_factory=lambda: MappingProxyType({}))
    """The extensions' list-watches by their resource key, observed only while wanted."""
    node_folds: tuple[NodeFold, ...] = ()
    """The extensions' shares of the Node fold (`Extension.node_fold`)."""
    stack_namespaces: tuple[str, ...] = ()
    """The module's and the GPU operator's namespaces, for the list-watches on demand."""
    settings: WatchSettings = field(default_factory=WatchSettings)
    gc_pause: GcPause = field(default_factory=GcPause)
    """The collector's pause while an informer parses a page, one for all of them."""

    def start(self, registry: MachineTypeRegistry, module_ns: str, target_ns: str) -> None:
        """Nodes, operand DaemonSets, the operator's pods that cannot pull, our Flux objects, the
        ClusterPolicy, the GPUCluster and the CRDs (the Gpus are kopf's: handlers.py)."""
        self.stack_namespaces = tuple(dict.fromkeys((module_ns, target_ns)))
        self.store.listen(watches.CRDS, self._crd_changed)
        for watch in (
            watches.node_watch(registry, self.node_folds),
            watches.daemonset_watch(target_ns),
            watches.pull_watch(target_ns),
            *(watches.flux_watch(plural, module_ns) for plural in watches.FLUX),
            watches.cluster_policy_watch(),
            watches.gpu_cluster_watch(),
            watches.crd_watch(),
        ):
            self._start(watch)

    def observe(self, wanted: Collection[str]) -> None:
        """The list-watches on demand: those `wanted` (their resource keys) start, the others
        stop and their facts are forgotten."""
        for resource, make in self.on_demand.items():
            watching = resource in self.running
            if resource in wanted and not watching:
                log.info("observing %s: an extension wants them", resource)
                self._start(make(self.stack_namespaces))
            elif resource not in wanted and watching:
                log.info("no longer observing %s", resource)
                self.running.pop(resource).stop()
                self.store.forget(resource)

    def stop(self) -> None:
        for informer in self.running.values():
            informer.stop()

    def _start(self, watch: ListWatch) -> None:
        self.running[watch.resource] = Informer(
            self.reader, watch, self.store, self.loop, self.settings, self.gc_pause
        ).start()

    def _crd_changed(self, name: str, facts: Any) -> None:
        served = watches.GATED.get(name)
        informer = self.running.get(served) if served else None
        if informer is not None:
            informer.crd_present(facts is not None)
