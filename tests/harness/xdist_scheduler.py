"""The pytest-xdist scheduler of `make test`: whole files, longest first, one at a time.

See tests/harness/scheduling.py for the why; this module is the part that needs xdist,
imported only when pytest runs with ``-n`` (tests/conftest.py's pytest_xdist_make_scheduler).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from xdist.scheduler.loadscope import LoadScopeScheduling

from .scheduling import file_of, load_durations, longest_first

if TYPE_CHECKING:
    import pytest
    from xdist.remote import Producer
    from xdist.workermanage import WorkerController


class LongestFileFirst(LoadScopeScheduling):
    """xdist's per-scope bookkeeping, with files as scopes, a longest-first queue and no
    look-ahead beyond the one test pytest needs to know the next item."""

    collection: list[str] | None
    workqueue: OrderedDict[str, dict[str, bool]]

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self.durations = load_durations()

    def _split_scope(self, nodeid: str) -> str:
        return file_of(nodeid)

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # a node joined later: give it work
            for node in self.nodes:
                self._reschedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        if not self.collection:
            return
        self.workqueue = longest_first(self.collection, self.durations)
        for node in self.nodes:
            if self.workqueue:
                self._assign_work_unit(node)
            else:
                node.shutdown()
        # A worker runs a test only once it knows the next one (or is told to shut down): a
        # file of one test needs its successor now, or that worker would wait for ever.
        for node in self.nodes:
            self._reschedule(node)

    def _reschedule(self, node: WorkerController) -> None:
        if node.shutting_down:
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return  # busy: its last test waits only for the next item, given below
        if self.workqueue:
            self._assign_work_unit(node)
        else:
            node.shutdown()
