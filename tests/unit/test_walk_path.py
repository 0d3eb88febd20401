"""The walked path of docs/architecture.md ("One spec change, from the watch event to the
HelmRelease write"), measured: every function of the module on the call stack when a spec
change is read from the watch stream, folded, handed over and stored, when the loop wakes,
when the HelmRelease is rendered and when it is applied.

The Gpu's informer runs over the real adapter (its API client answers from memory), the loop
over test_loop.py's in-memory world (`Loop.run`, woken by the store); the adapter's apply runs
alone over the same in-memory client. `sys.setprofile` (and `threading.setprofile` for the
informer's and the adapter's threads) records the module's frames on the stack at each of
those moments. `python -m tests.unit.test_walk_path` prints the path, file by file.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from kyma_gpu.adapter import KubeAdapter
from kyma_gpu.facts.gpu import gpu_object
from kyma_gpu.observe.informer import Informer, WatchSettings
from kyma_gpu.observe.watches import gpu_watch
from kyma_gpu.reconcile.loop import GPUS
from kyma_gpu.reconcile.settings import LoopSettings
from kyma_gpu.rules.catalog import Catalog
from tests.unit.fake_api import FakeApi
from tests.unit.test_loop import installed, new_world

PACKAGE = Path(gpu_object.__code__.co_filename).parents[1]
"""operator/kyma_gpu/: the module's frames are those of its files."""

MOST_FUNCTIONS = 25
MOST_FILES = 8
"""What docs/architecture.md says the path takes (at most)."""


class _Response:
    def __init__(self, data: bytes = b"", lines: tuple[bytes, ...] = ()) -> None:
        self.status, self.reason, self.data, self.lines = 200, "OK", data, lines

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        yield from self.lines

    def release_conn(self) -> None:
        pass


class _Call:
    def __init__(self, response: _Response) -> None:
        self.response = response


class _Client:
    """kubernetes.client.ApiClient's two methods the adapter calls, answered from memory: a
    LIST of the Gpu, a WATCH with one event, a PATCH answered with its body."""

    def __init__(
        self, listed: dict[str, Any], event: dict[str, Any], walk: _Walk | None = None
    ) -> None:
        self.listed, self.event, self.walk = listed, event, walk
        self.watching = threading.Event()

    def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[Any, ...]:
        return method, (path, tuple(kwargs["query_params"])), kwargs["header_params"], \
            kwargs["body"], None  # fmt: skip

    def call_api(self, method: str, url: Any, **kwargs: Any) -> _Call:
        _, params = url
        if method == "PATCH":
            return _Call(_Response(json.dumps(kwargs["body"]).encode()))
        if ("watch", "true") in params:
            self.watching.set()
            if self.walk is not None:
                self.walk.on = True  # the LIST before it is not the change's path
            return _Call(_Response(lines=(json.dumps(self.event).encode() + b"\n",)))
        meta = {"resourceVersion": self.listed["metadata"]["resourceVersion"]}
        return _Call(_Response(json.dumps({"items": [self.listed], "metadata": meta}).encode()))


class _Walk:
    """The module's functions on the stack at the moments recorded, in order."""

    def __init__(self) -> None:
        self.functions: dict[str, None] = {}
        self.on = False

    def record(self, frame: FrameType | None) -> None:
        stack = []
        while frame is not None:
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(PACKAGE):
                stack.append(f"{path.relative_to(PACKAGE)}:{frame.f_code.co_qualname}")
            frame = frame.f_back
        self.functions.update(dict.fromkeys(reversed(stack)))

    def profile(self, moments: Callable[[FrameType], bool]) -> Any:
        def hook(frame: FrameType, event: str, arg: Any) -> None:
            if self.on and event == "call" and moments(frame):
                self.record(frame)

        return hook


def _in_module(frame: FrameType | None) -> bool:
    return frame is not None and Path(frame.f_code.co_filename).is_relative_to(PACKAGE)


def _event_path(catalog: Catalog, walk: _Walk) -> None:
    """From the watch stream to the loop's apply of the HelmRelease (the in-memory writer)."""
    world = new_world(catalog)
    installed(world)
    world.run()
    gpu = copy.deepcopy(world.api.gpu)
    gpu["spec"] = {"components": {"dcgmExporter": False}}
    gpu["metadata"].update(resourceVersion=world.api.next_version(),
                           generation=gpu["metadata"]["generation"] + 1)  # fmt: skip
    client = _Client(world.api.gpu, {"type": "MODIFIED", "object": gpu}, walk)
    stored: list[str] = []
    applied = threading.Event()

    def store_listener(key: str, facts: Any) -> None:
        stored.append(key)

    def thread() -> bool:
        return threading.current_thread() is not threading.main_thread()

    def from_flux_objects(frame: FrameType) -> bool:
        return frame.f_back is not None and frame.f_back.f_code.co_filename.endswith(
            "flux_objects.py"
        )

    def helm_release(frame: FrameType) -> bool:
        if frame.f_locals["obj"]["kind"] != "HelmRelease":
            return False
        applied.set()
        return True

    moments: dict[CodeType, Callable[[FrameType], bool]] = {
        _Response.stream.__code__: lambda _: True,  # the read
        gpu_object.__code__: lambda _: thread(),  # the informer's fold, not the answers'
        asyncio.BaseEventLoop.call_soon_threadsafe.__code__:  # the hand-over
            lambda f: thread() and _in_module(f.f_back),
        store_listener.__code__: lambda _: not stored,  # the store took the change
        asyncio.wait.__code__: lambda f: _in_module(f.f_back),  # the loop wakes
        copy.deepcopy.__code__: from_flux_objects,  # the HelmRelease rendered
        FakeApi.apply.__code__: helm_release,  # ... and applied
    }  # fmt: skip

    def moment(frame: FrameType) -> bool:
        found = moments.get(frame.f_code)
        return found is not None and found(frame)

    world.store.listen(GPUS, store_listener)
    world.loop.settings = LoopSettings(status_seconds=0.0, freeze_heap=False)

    async def run() -> None:
        stopped = asyncio.Event()
        task = asyncio.create_task(world.loop.run(stopped))
        await asyncio.sleep(0.2)  # its first pass (nothing to do); sooner or later changes no bound
        adapter = KubeAdapter(api=client)  # type: ignore[arg-type]
        informer = Informer(adapter, gpu_watch(), world.store, asyncio.get_running_loop(),
                            WatchSettings())  # fmt: skip
        informer.start()
        # events, not clocks: the bounds only end a broken run
        await asyncio.to_thread(client.watching.wait, 60.0)
        await asyncio.to_thread(applied.wait, 60.0)
        informer.stop()
        stopped.set()
        await task

    hook = walk.profile(moment)
    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        asyncio.run(run())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        walk.on = False
    assert stored[:1] == ["gpu"], stored
    assert applied.is_set()


def _adapter_apply(walk: _Walk) -> None:
    """The adapter's apply of the HelmRelease over the in-memory client."""
    release = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
               "metadata": {"name": "gpu-operator", "namespace": "kyma-system"}}  # fmt: skip
    adapter = KubeAdapter(api=_Client(release, {}))  # type: ignore[arg-type]

    def moment(frame: FrameType) -> bool:
        code = frame.f_code
        if code is _Client.call_api.__code__:
            return True  # the PATCH, in the write's thread
        return code is asyncio.to_thread.__code__ and _in_module(frame.f_back)

    hook = walk.profile(moment)
    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        walk.on = True
        asyncio.run(adapter.apply(release))
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        walk.on = False


def walked_path(catalog: Catalog) -> list[str]:
    """file:function of every function on the path, in the order the change reaches them."""
    walk = _Walk()
    _event_path(catalog, walk)
    _adapter_apply(walk)
    return list(walk.functions)


def test_the_walked_path_stays_short(catalog: Catalog) -> None:
    path = walked_path(catalog)
    files = {entry.split(":")[0] for entry in path}
    assert len(path) <= MOST_FUNCTIONS, "\n".join(path)
    assert len(files) <= MOST_FILES, sorted(files)
    assert path[2] == "adapter.py:KubeAdapter.watch"  # the read, under the informer's thread
    assert path[-1].startswith("adapter.py:")  # the write last


if __name__ == "__main__":
    found = walked_path(Catalog())
    for entry in found:
        print(entry)
    print(f"{len(found)} functions in {len({e.split(':')[0] for e in found})} files")
