"""kopf 1.45 as an observer of the fleet: an index of the Nodes' compact facts.

    python -m benchmarks.kopf_fleet.kopf_observer [--chunk-size 250 | --streaming]

The kopf way to keep facts of every Node, with what kopf 1.45 offers for large lists
(kopf/_cogs/configs/configuration.py ``WatchingSettings``, read in 1.45.2's source):

- ``@kopf.index('nodes')`` returns ``{name: ObservedNode}``: the same compact facts, by name,
  as the informer's store holds them (``observe_node`` with the Catalog's machine-type registry);
- ``settings.watching.chunk_size``: the initial LIST in pages (``limit``/``continue``), 250 as
  the informer's Node pages; or ``--streaming``: ``initial_streaming``, no LIST at all but a
  watch with ``sendInitialEvents=true`` (a streaming list, Kubernetes' WatchList), whose first
  bookmark ends the initial events. kopf asks for bookmarks (``allowWatchBookmarks``) always;
- server-side selectors (``settings.watching.{label,field}_selectors``) where one applies: a
  field selector ``metadata.name=gpu`` on the Gpu. None applies to the Nodes: the facts of
  every Node are kept (a GPU node is also known by its machine type or its capacity, not only
  by a label), as the informer keeps them;
- ``@kopf.on.event`` on the Gpu stands for the reconcile: kopf calls no handler of any resource
  before every index of every resource is complete (``operator_indexed``,
  kopf/_core/reactor/processing.py), so its first call is the honest "all Nodes indexed" and
  says ``ready`` with the index's size;
- standalone (no peering), cluster-wide, no CRD scanning, no Kubernetes Events posted; an
  on.event handler and an index make kopf write nothing (no finalizer, no annotations).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from benchmarks.kopf_fleet.report import report_counts, say
from kyma_gpu.api.models import API_GROUP, PLURAL
from kyma_gpu.facts import NodeError, ObservedNode, observe_node
from kyma_gpu.rules.catalog import Catalog

GPU_NAME = "gpu"


@dataclass
class Options:
    chunk_size: int | None = 250
    streaming: bool = False


@dataclass
class Progress:
    indexed: int = 0
    """Calls of the index function: during the start, the Nodes indexed so far."""
    index: Any = None
    """The index, once the Gpu's handler was called (kopf's readiness)."""

    def nodes(self) -> int:
        return self.indexed if self.index is None else len(self.index)


OPTIONS = Options()
PROGRESS = Progress()
REGISTRY = Catalog().machine_types


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.scanning.disabled = True  # serve no CRD: no need to follow the CRDs
    settings.posting.enabled = False  # no Kubernetes Events: no writes
    settings.watching.chunk_size = OPTIONS.chunk_size
    settings.watching.initial_streaming = OPTIONS.streaming
    settings.watching.field_selectors[API_GROUP, PLURAL] = f"metadata.name={GPU_NAME}"


@kopf.index("nodes")
async def fleet(body: kopf.Body, name: str, **_: Any) -> dict[str, ObservedNode]:
    """The Node's compact facts by its name, as node_watch folds them. A coroutine: kopf runs
    a plain function in its thread pool, one hop per event for a fold of microseconds."""
    PROGRESS.indexed += 1
    try:
        return {name: observe_node(body, REGISTRY)}
    except NodeError:
        return {}


@kopf.on.event(API_GROUP, PLURAL)
async def gpu(**kwargs: Any) -> None:
    """Called only once every index is complete: the first call is kopf's readiness. The
    index comes as the keyword ``fleet`` (the index function's name)."""
    if PROGRESS.index is None:
        PROGRESS.index = kwargs["fleet"]
        say("ready", nodes=len(PROGRESS.index), indexed=PROGRESS.indexed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--chunk-size", type=int, default=250, help="LIST page size (0: none)")
    parser.add_argument("--streaming", action="store_true", help="a streaming list, no LIST")
    parser.add_argument("--standalone", action="store_true", help="ignored (the harness adds it)")
    args = parser.parse_args(argv)
    OPTIONS.chunk_size = args.chunk_size or None
    OPTIONS.streaming = args.streaming
    say("started")
    report_counts(PROGRESS.nodes)
    kopf.configure(verbose=False)  # as the manager (handlers.run): INFO
    kopf.run(clusterwide=True, standalone=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
