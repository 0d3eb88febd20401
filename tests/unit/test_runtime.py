"""kopf's memo holds one typed Runtime (kyma_gpu.handlers.runtime): what `run` knows, then what
`start` started, for `stop`. kopf has no resource handler (the Gpu is observed like every other
kind: tests/unit/test_gpu_watch.py)."""

from __future__ import annotations

import asyncio
import copy
from unittest.mock import Mock

import kopf
import pytest

from kyma_gpu.handlers import MEMO_KEY, Options, Runtime, Started, runtime
from kyma_gpu.observe import Store


def _memo() -> kopf.Memo:
    return kopf.Memo({MEMO_KEY: Runtime(Options("manager-0"))})


def _start(memo: kopf.Memo, store: Store) -> None:
    """What `start` leaves behind, without a cluster: the store is real, the rest stand-ins."""
    runtime(memo).started = Started(store, asyncio.Event(), Mock(), Mock(), Mock(), None, None,
                                    None)  # fmt: skip


def test_every_copy_of_the_memo_holds_the_one_runtime() -> None:
    memo = _memo()
    copied = copy.copy(memo)  # kopf copies the memo shallowly, per object it serves
    store = Store()
    _start(memo, store)
    assert runtime(copied) is runtime(memo)
    started = runtime(copied).started
    assert started is not None
    assert started.store is store
    assert runtime(memo).options.settings is not None  # Options' default


def test_stop_finds_nothing_before_start() -> None:
    assert runtime(_memo()).started is None


def test_kopf_serves_no_resource() -> None:
    """handlers registers the startup and cleanup handlers only: kopf watches nothing."""
    registry = kopf.get_default_registry()
    ids = {str(h.id) for h in registry._activities.get_all_handlers()}
    assert {"start", "stop"} <= ids
    for resource_handlers in (registry._watching, registry._changing, registry._spawning,
                              registry._indexing, registry._webhooks):  # fmt: skip
        assert list(resource_handlers.get_all_handlers()) == []


def test_a_memo_without_a_runtime_says_so() -> None:
    with pytest.raises(TypeError, match="no Runtime"):
        runtime(kopf.Memo(store=Store()))
