"""The watch stream's reader (adapter.KubeAdapter.watch): the lines it parses, and when it
coalesces.

A clock of its own stands in for time: each chunk of the fake stream says how long its read
waited for the server, and sleep advances the clock and is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from kyma_gpu import adapter
from kyma_gpu.errors import TransientError


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class _Response:
    """A streaming response: (seconds the read waits, bytes) per chunk."""

    def __init__(self, clock: _Clock, chunks: list[tuple[float, bytes]]) -> None:
        self.clock, self.chunks = clock, chunks

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        for wait, data in self.chunks:
            self.clock.now += wait
            yield data

    def release_conn(self) -> None:
        pass


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr("kyma_gpu.adapter.time.monotonic", fake.monotonic)
    monkeypatch.setattr("kyma_gpu.adapter.time.sleep", fake.sleep)
    return fake


def _watch(response: _Response, coalesce: float) -> Iterator[dict[str, Any]]:
    reader = adapter.KubeAdapter(api=None)  # type: ignore[arg-type]
    reader._request = lambda *args, **kwargs: response  # type: ignore[method-assign,assignment]
    return reader.watch(adapter.ListQuery("/api/v1/nodes", coalesce=coalesce), "1", 60)


def _read(clock: _Clock, chunks: list[tuple[float, bytes]], coalesce: float) -> list[bytes]:
    """The lines of the stream, each as the watch parsed it."""
    events = _watch(_Response(clock, chunks), coalesce)
    return [json.dumps(event, separators=(",", ":")).encode() for event in events]


def test_lines_are_split_across_chunks_and_blank_lines_dropped(clock: _Clock) -> None:
    chunks = [(0.0, b'{"a":'), (0.0, b"1}\n\n"), (0.0, b'{"b":2}\n{"c"'), (0.0, b":3}")]
    assert _read(clock, chunks, 0.0) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert clock.sleeps == []


def test_a_read_that_waited_is_followed_by_one_sleep_and_buffered_reads_are_not(
    clock: _Clock,
) -> None:
    # A heartbeat after a quiet second, then six that arrived while the reader slept, then
    # another after a wait.
    chunks = [(1.0, b"{}\n"), *[(0.0, b"{}\n")] * 6, (0.5, b"{}\n"), (0.0, b"{}\n")]
    lines = _read(clock, chunks, 0.1)
    assert len(lines) == 9
    assert clock.sleeps == [0.1, 0.1]


def test_without_coalesce_nothing_sleeps_however_long_the_waits(clock: _Clock) -> None:
    assert len(_read(clock, [(1.0, b"{}\n"), (2.0, b"{}\n")], 0.0)) == 2
    assert clock.sleeps == []


def test_a_broken_stream_is_a_transient_error(clock: _Clock) -> None:
    class Broken(_Response):
        def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
            yield b"{}\n"
            raise urllib3.exceptions.ProtocolError("connection reset")

    events = _watch(Broken(clock, []), 0.1)
    assert next(events) == {}
    with pytest.raises(TransientError, match="stream broken"):
        next(events)


def test_a_node_with_json_the_fast_parser_refuses_is_still_read() -> None:
    """Anyone who may write a Node's annotations could otherwise stop the manager's LIST."""
    import orjson

    data = b'{"metadata": {"name": "n"}, "status": {"x": NaN}}'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(data)
    assert adapter.NODE_JSON.event(data)["metadata"]["name"] == "n"


def test_other_objects_keep_integers_beyond_64_bits() -> None:
    """orjson would read this as a float, and the HelmRelease's values would differ from what
    was applied: only Nodes go through it."""
    from kyma_gpu.observe.watches import flux_watch

    data = b'{"spec": {"values": {"n": 123456789012345678901234567890}}}'
    parser = flux_watch("helmreleases", "kyma-system").query.parser
    assert parser.event(data)["spec"]["values"]["n"] == 123456789012345678901234567890
    assert parser.page(data)["spec"]["values"]["n"] == 123456789012345678901234567890
