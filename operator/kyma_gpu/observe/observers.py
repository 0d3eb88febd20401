"""All observers of one operator process, started together; the pod observer on demand."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from kyma_gpu.facts.machines import MachineTypeRegistry
from kyma_gpu.observe import sources
from kyma_gpu.observe.informer import GcPause, Informer, Reader, Source, WatchSettings
from kyma_gpu.observe.store import Store

log = logging.getLogger(__name__)


@dataclass
class Observers:
    reader: Reader
    store: Store
    loop: asyncio.AbstractEventLoop
    informers: dict[str, Informer] = field(default_factory=dict)
    stack_namespaces: tuple[str, ...] = ()
    """The module's and the GPU operator's namespaces: their pods are not users' workloads."""
    settings: WatchSettings = field(default_factory=WatchSettings)
    gc_pause: GcPause = field(default_factory=GcPause)
    """The collector's pause while an observer parses a page, one for all of them."""

    def start(self, registry: MachineTypeRegistry, module_ns: str, target_ns: str) -> None:
        """The Gpus, Nodes, operand DaemonSets, the operator's pods that cannot pull, our Flux
        objects, the ClusterPolicy, the GPUCluster and the CRDs."""
        self.stack_namespaces = tuple(dict.fromkeys((module_ns, target_ns)))
        self.store.listen(sources.CRDS, self._crd_changed)
        for source in (
            sources.gpu_source(),
            sources.node_source(registry),
            sources.daemonset_source(target_ns),
            sources.pull_source(target_ns),
            *(sources.flux_source(plural, module_ns) for plural in sources.FLUX),
            sources.cluster_policy_source(),
            sources.gpu_cluster_source(),
            sources.crd_source(),
        ):
            self._start(source)

    def watch_pods(self, wanted: bool) -> None:
        """GPU pods matter only while a deletion waits for them: observe them only then."""
        running = sources.PODS in self.informers
        if wanted and not running:
            log.info("observing GPU pods: a deletion waits for them")
            self._start(sources.pod_source(self.stack_namespaces))
        elif not wanted and running:
            log.info("no longer observing pods")
            self.informers.pop(sources.PODS).stop()
            self.store.forget(sources.PODS)

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def _start(self, source: Source) -> None:
        self.informers[source.resource] = Informer(
            self.reader, source, self.store, self.loop, self.settings, self.gc_pause
        ).start()

    def _crd_changed(self, name: str, facts: Any) -> None:
        served = sources.GATED.get(name)
        informer = self.informers.get(served) if served else None
        if informer is not None:
            informer.crd_present(facts is not None)
