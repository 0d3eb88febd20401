"""kopf's memo holds one typed Runtime (kyma_gpu.handlers.runtime), and the Gpu watch feeds the
store through it (handlers.gpu_changed).

kopf hands each Gpu's handlers a shallow copy of the operator's memo, made when it first sees
that Gpu: every copy must reach the one Runtime, and so what `start` put there."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import cast
from unittest.mock import Mock

import kopf
import pytest

from kyma_gpu import handlers
from kyma_gpu.handlers import MEMO_KEY, Options, Runtime, Started, runtime
from kyma_gpu.observe import Store
from kyma_gpu.reconcile.loop import GPUS


def _body(version: str) -> kopf.Body:
    return kopf.Body(cast(kopf.RawBody, {
        "apiVersion": "gpu.kyma-project.io/v1beta1",
        "kind": "Gpu",
        "metadata": {"name": "gpu", "uid": "u-1", "generation": 1, "resourceVersion": version},
        "spec": {},
    }))  # fmt: skip


def _memo() -> kopf.Memo:
    return kopf.Memo({MEMO_KEY: Runtime(Options("manager-0"))})


def _start(memo: kopf.Memo, store: Store) -> None:
    """What `start` leaves behind, without a cluster: the store is real, the rest stand-ins."""
    runtime(memo).started = Started(store, asyncio.Event(), Mock(), Mock(), Mock(), None, None,
                                    None)  # fmt: skip


def _event(memo: kopf.Memo, type: str, body: kopf.Body) -> None:
    """kopf's call, with the arguments gpu_changed reads (kopf types it as any watch handler)."""
    gpu_changed = cast(Callable[..., None], handlers.gpu_changed)
    gpu_changed(type=type, name="gpu", body=body, memo=memo)


def test_every_copy_of_the_memo_holds_the_one_runtime() -> None:
    memo = _memo()
    per_gpu = copy.copy(memo)  # kopf, the first time it sees a Gpu
    store = Store()
    _start(memo, store)
    assert runtime(per_gpu) is runtime(memo)
    assert runtime(per_gpu).started.store is store
    assert runtime(memo).options.settings is not None  # run()'s default


def test_the_gpu_watch_feeds_the_store() -> None:
    memo, store = _memo(), Store()
    _start(memo, store)
    _event(memo, "ADDED", _body("7"))
    held = store.get(GPUS, "gpu")
    assert held is not None
    assert (held.uid, held.resource_version) == ("u-1", "7")
    _event(memo, "DELETED", _body("8"))
    assert store.get(GPUS, "gpu") is None


def test_nothing_runs_before_start() -> None:
    with pytest.raises(RuntimeError, match="startup handler has not run"):
        _event(_memo(), "ADDED", _body("7"))


def test_a_memo_without_a_runtime_says_so() -> None:
    with pytest.raises(TypeError, match="no Runtime"):
        runtime(kopf.Memo(store=Store()))
