"""kopf's memo holds one typed Runtime (kyma_gpu.handlers.runtime): what `run` knows, then what
`start` started, for the Gpu's handlers and `stop`; and kopf serves the Gpu and nothing else
(its events: tests/unit/test_gpu_watch.py)."""

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
    runtime(memo).started = Started(store, Mock(), asyncio.Event(), Mock(), Mock(), None, None,
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


def test_kopf_serves_the_gpu_and_nothing_else() -> None:
    """kopf watches the Gpu (an event handler and a daemon per Gpu, with the module's
    finalizer) and answers the liveness probe; no change handler (which would write its
    progress and diff base on the Gpu), no index, no webhook: the fleet is the informers'."""
    registry = kopf.get_default_registry()
    ids = {str(h.id) for h in registry._activities.get_all_handlers()}
    assert {"start", "stop", "reconcile"} <= ids
    assert [str(h.id) for h in registry._watching.get_all_handlers()] == ["gpu_event"]
    daemons = list(registry._spawning.get_all_handlers())
    assert [str(h.id) for h in daemons] == ["gpu_daemon"]
    assert {h.selector.any_name for h in (*daemons, *registry._watching.get_all_handlers())
            if h.selector is not None} == {"gpus"}  # fmt: skip
    for resource_handlers in (registry._changing, registry._indexing, registry._webhooks):
        assert list(resource_handlers.get_all_handlers()) == []


def test_a_memo_without_a_runtime_says_so() -> None:
    with pytest.raises(TypeError, match="no Runtime"):
        runtime(kopf.Memo(store=Store()))


def test_a_deletion_goes_on_and_the_operators_exit_ends_the_gpus_loop() -> None:
    """kopf's daemon flag fires once: for the Gpu's deletion the loop goes on (its uninstall
    must finish) and waits for changes, not for the flag; the operator's exit ends it."""
    from kopf._cogs.aiokits.aioenums import FlagSetter, FlagWaiter

    from kyma_gpu.handlers import DaemonStop

    async def main() -> None:
        setter: FlagSetter[kopf.DaemonStoppingReason] = FlagSetter()
        stop = DaemonStop(FlagWaiter(setter), recheck=0.01)
        wake = asyncio.Event()
        assert not stop.ended()
        setter.set(kopf.DaemonStoppingReason.RESOURCE_DELETED)
        assert not stop.ended()
        began = asyncio.get_running_loop().time()
        await stop.wait(wake, 0.1)  # no change: the whole timeout, rechecking the flag
        assert asyncio.get_running_loop().time() - began >= 0.09
        wake.set()
        await asyncio.wait_for(stop.wait(wake, None), 1.0)  # a change ends the wait at once
        wake.clear()
        setter.set(kopf.DaemonStoppingReason.OPERATOR_EXITING)
        assert stop.ended()
        await asyncio.wait_for(stop.wait(wake, None), 1.0)

    asyncio.run(main())
