"""All informers of one operator process, started together; the pod informer on demand."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from kyma_gpu.facts.machines import MachineTypeRegistry
from kyma_gpu.observe import watches
from kyma_gpu.observe.informer import GcPause, Informer, ListWatch, Reader, WatchSettings
from kyma_gpu.observe.store import Store

log = logging.getLogger(__name__)


@dataclass
class Informers:
    reader: Reader
    store: Store
    loop: asyncio.AbstractEventLoop
    running: dict[str, Informer] = field(default_factory=dict)
    stack_namespaces: tuple[str, ...] = ()
    """The module's and the GPU operator's namespaces: their pods are not users' workloads."""
    settings: WatchSettings = field(default_factory=WatchSettings)
    gc_pause: GcPause = field(default_factory=GcPause)
    """The collector's pause while an informer parses a page, one for all of them."""

    def start(self, registry: MachineTypeRegistry, module_ns: str, target_ns: str) -> None:
        """The Gpus, Nodes, operand DaemonSets, the operator's pods that cannot pull, our Flux
        objects, the ClusterPolicy, the GPUCluster and the CRDs."""
        self.stack_namespaces = tuple(dict.fromkeys((module_ns, target_ns)))
        self.store.listen(watches.CRDS, self._crd_changed)
        for watch in (
            watches.gpu_watch(),
            watches.node_watch(registry),
            watches.daemonset_watch(target_ns),
            watches.pull_watch(target_ns),
            *(watches.flux_watch(plural, module_ns) for plural in watches.FLUX),
            watches.cluster_policy_watch(),
            watches.gpu_cluster_watch(),
            watches.crd_watch(),
        ):
            self._start(watch)

    def watch_pods(self, wanted: bool) -> None:
        """GPU pods matter only while a deletion waits for them: observe them only then."""
        watching = watches.PODS in self.running
        if wanted and not watching:
            log.info("observing GPU pods: a deletion waits for them")
            self._start(watches.pod_watch(self.stack_namespaces))
        elif not wanted and watching:
            log.info("no longer observing pods")
            self.running.pop(watches.PODS).stop()
            self.store.forget(watches.PODS)

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
