"""The walked path of docs/architecture.md ("One spec change, from kopf's event to the
HelmRelease write"), measured: every function of the module that runs, from the moment kopf
hands the Gpu's event to the module (`take_gpu_event`, what handlers.py's `gpu_event` calls)
until the HelmRelease's PATCH is sent.

The Gpu's loop runs as its kopf daemon runs it (`Loop.serve`), over test_loop.py's in-memory
store, and writes through the real adapter, whose API client answers from memory.
`sys.setprofile` (and `threading.setprofile` for the write's thread) records each call of a
function of the module. `python -m tests.unit.test_walk_path` prints the path, file by file;
`UPDATE_DOCS=1 pytest tests/unit/test_docs.py` writes it into docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from kyma_gpu.adapter import KubeAdapter
from kyma_gpu.facts.gpu import gpu_object
from kyma_gpu.handlers import take_gpu_event
from kyma_gpu.reconcile.loop import Loop, StopEvent
from kyma_gpu.reconcile.settings import LoopSettings
from kyma_gpu.rules.catalog import Catalog
from tests.unit.test_loop import installed, new_world, run_pass

PACKAGE = Path(gpu_object.__code__.co_filename).parents[1]
"""operator/kyma_gpu/: the module's functions are those of its files."""

MOST_FUNCTIONS = 200
MOST_FILES = 40
"""What docs/architecture.md says the path takes (at most)."""


class _Response:
    def __init__(self, data: bytes) -> None:
        self.status, self.reason, self.data = 200, "OK", data

    def release_conn(self) -> None:
        pass


class _Call:
    def __init__(self, response: _Response) -> None:
        self.response = response


class _Client:
    """kubernetes.client.ApiClient's two methods the adapter calls, answered from memory: a
    PATCH is answered with the object it patches (the Gpu's status with the Gpu)."""

    def __init__(self, gpu: dict[str, Any], walk: _Walk) -> None:
        self.gpu, self.walk = gpu, walk
        self.released = threading.Event()

    def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[Any, ...]:
        return method, path, kwargs["header_params"], kwargs["body"], None

    def call_api(self, method: str, url: Any, **kwargs: Any) -> _Call:
        body = kwargs["body"]
        if url.endswith("/status"):
            return _Call(_Response(json.dumps({**self.gpu, "status": body["status"]}).encode()))
        if "/helmreleases/" in url:
            self.walk.on = False  # the PATCH is sent: the path ends here
            self.released.set()
        return _Call(_Response(json.dumps(body).encode()))


class _Walk:
    """The module's functions called while `on`, in the order of their first call (not the
    comprehensions and lambdas inside them: expressions of their function)."""

    def __init__(self) -> None:
        self.functions: dict[str, None] = {}
        self.on = False

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.on and event == "call":
            code = frame.f_code
            path = Path(code.co_filename)
            if path.is_relative_to(PACKAGE) and not code.co_name.startswith("<"):
                self.functions[f"{path.relative_to(PACKAGE)}:{code.co_qualname}"] = None


def _changed(gpu: dict[str, Any], version: str) -> dict[str, Any]:
    changed = copy.deepcopy(gpu)
    changed["spec"] = {"components": {"dcgmExporter": False}}
    changed["metadata"].update(resourceVersion=version,
                               generation=changed["metadata"]["generation"] + 1)  # fmt: skip
    return changed


def walked_path(catalog: Catalog) -> list[str]:
    """file:function of every function of the module on the path, in the order of their
    first call."""
    world = installed(new_world(catalog))
    world.run()
    walk = _Walk()
    client = _Client(world.api.gpu, walk)
    settings = LoopSettings(status_seconds=0.0, freeze_heap=False, burst_seconds=0.0)
    adapter = KubeAdapter(api=client)  # type: ignore[arg-type]
    loop = Loop(world.store, adapter, catalog, settings=settings)

    async def run() -> None:
        await run_pass(loop)  # settled: its plan memoized, nothing to write
        stop = StopEvent()
        daemon = asyncio.create_task(loop.serve("gpu", stop))
        await asyncio.sleep(0)  # it waits for the store to change
        walk.on = True
        event = {"type": "MODIFIED", "object": _changed(world.api.gpu, world.api.next_version())}
        take_gpu_event(world.store, event)
        # events, not clocks: the bound only ends a broken run
        await asyncio.to_thread(client.released.wait, 60.0)
        stop.event.set()
        await daemon

    threading.setprofile(walk.hook)
    sys.setprofile(walk.hook)
    try:
        asyncio.run(run())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert client.released.is_set()
    return list(walk.functions)


def by_file(path: list[str]) -> Iterator[str]:
    """Markdown lines: each file and its functions, in the order the change reaches them."""
    files: dict[str, list[str]] = {}
    for entry in path:
        name, function = entry.split(":", 1)
        files.setdefault(name, []).append(f"`{function}`")
    for name, functions in files.items():
        yield f"- **{name}** ({len(functions)}): {', '.join(functions)}"


DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
BEGIN = "<!-- walked-path: generated by tests/unit/test_walk_path.py -->\n"
END = "<!-- walked-path end -->\n"


def documented(path: list[str]) -> str:
    """The list docs/architecture.md shows, with its count."""
    files = {entry.split(":")[0] for entry in path}
    lines = [*by_file(path), "", f"{len(path)} functions in {len(files)} files."]
    return "\n".join(lines) + "\n"


def test_the_walked_path_stays_short(catalog: Catalog) -> None:
    path = walked_path(catalog)
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    if os.environ.get("UPDATE_DOCS") == "1":
        DOC.write_text(head + BEGIN + documented(path) + END + tail, encoding="utf-8")
    assert rest.split(END)[0] == documented(path), (
        "architecture.md's walked path is stale: UPDATE_DOCS=1 pytest tests/unit/test_walk_path.py"
    )
    files = {entry.split(":")[0] for entry in path}
    assert len(path) <= MOST_FUNCTIONS, "\n".join(path)
    assert len(files) <= MOST_FILES, sorted(files)
    assert path[0] == "handlers.py:take_gpu_event"  # kopf's event, first
    assert "reconcile/loop.py:Loop.serve" in path  # the daemon's loop woke
    assert path[-1].startswith("adapter.py:")  # the write last


if __name__ == "__main__":
    walked = walked_path(Catalog())
    print("\n".join(by_file(walked)))
    print(f"{len(walked)} functions in {len({e.split(':')[0] for e in walked})} files")
