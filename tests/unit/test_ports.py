"""The harness's port allocator (tests/harness/procs.py): no cluster needed.

Two harness processes once got the same port from two calls of free_port()
(source-controller's metrics and storage address); the allocator must never
hand out a port twice and must stay clear of the kernel's ephemeral ports.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from tests.harness.procs import (
    PORTS,
    PortAllocator,
    PortClaims,
    PortsExhaustedError,
    ephemeral_port_range,
    free_port,
    harness_port_range,
    port_is_free,
)


def test_free_port_never_repeats_and_stays_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert set(ports) <= set(PORTS.ports)
    assert set(ports) <= PORTS.given
    low, high = ephemeral_port_range()
    if low - 1024 >= 1000 or high <= 64535:  # room outside the ephemeral range
        assert not any(low <= port <= high for port in ports)


def test_allocations_from_many_threads_are_distinct() -> None:
    allocator = PortAllocator(
        range(40000, 40400), is_free=lambda port: True, claim=lambda port: True
    )
    results: list[list[int]] = [[] for _ in range(8)]

    def take(into: list[int]) -> None:
        into.extend(allocator.allocate() for _ in range(50))

    threads = [threading.Thread(target=take, args=(into,)) for into in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ports = [port for into in results for port in into]
    assert len(ports) == 400
    assert set(ports) == set(range(40000, 40400))


def test_every_port_once_then_exhausted() -> None:
    allocator = PortAllocator(
        range(20000, 20010), is_free=lambda port: True, claim=lambda port: True
    )
    assert sorted(allocator.allocate() for _ in range(10)) == list(range(20000, 20010))
    with pytest.raises(PortsExhaustedError, match="20000-20009"):
        allocator.allocate()


def test_a_port_in_use_is_skipped() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert not port_is_free(taken)
        allocator = PortAllocator(range(taken, taken + 1))
        with pytest.raises(PortsExhaustedError):
            allocator.allocate()
    assert allocator.allocate() == taken  # free again once the socket is closed


def test_port_range_avoids_the_ephemeral_range(tmp_path: Path) -> None:
    assert harness_port_range((32768, 60999)) == range(22768, 32768)
    assert harness_port_range((10000, 60999)) == range(1024, 10000)
    assert harness_port_range((1024, 50000)) == range(50001, 60001)
    assert harness_port_range((1024, 65535)) == range(1024, 65536)
    proc_file = tmp_path / "ip_local_port_range"
    proc_file.write_text("40000\t50000\n", encoding="ascii")
    assert ephemeral_port_range(proc_file) == (40000, 50000)
    proc_file.write_text("garbage\n", encoding="ascii")
    assert ephemeral_port_range(proc_file) == (32768, 60999)
    assert ephemeral_port_range(tmp_path / "missing") == (32768, 60999)


_HOLD_CLAIM = """
import sys
import tempfile
from pathlib import Path
from tests.harness.procs import PortClaims
claims = PortClaims(Path(sys.argv[1]))
assert claims.claim(int(sys.argv[2]))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_port_claimed_by_another_process_is_skipped_until_it_exits(tmp_path: Path) -> None:
    """Two xdist workers (two processes) never get the same port, bound or not yet."""
    port = 41234
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_CLAIM, str(tmp_path), str(port)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        mine = PortClaims(tmp_path)
        assert not mine.claim(port)
        allocator = PortAllocator(range(port, port + 2), is_free=lambda p: True, claim=mine.claim)
        assert allocator.allocate() == port + 1
        with pytest.raises(PortsExhaustedError):
            allocator.allocate()
    finally:
        holder.kill()  # a crash, not a clean exit: the kernel still drops the lock
        holder.wait(10)
    assert mine.claim(port)
    assert mine.held == frozenset({port, port + 1})


def test_a_claim_is_held_once_per_process(tmp_path: Path) -> None:
    claims = PortClaims(tmp_path)
    assert claims.claim(50000)
    assert claims.claim(50000)
    assert claims.held == frozenset({50000})


def _claim_three_as(directory: Path, uid: int | None) -> list[bool]:
    """Claims 41000-41002 in a forked child, as ``uid`` when given (so needs root)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read)
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            claims = PortClaims(directory)
            got = "".join("1" if claims.claim(port) else "0" for port in (41000, 41001, 41002))
            os.write(write, got.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as answer:
        got = answer.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the claiming child failed"
    return [c == "1" for c in got]


def test_another_user_claims_ports_next_to_ours() -> None:
    """The claims directory is shared by the host's users, like /tmp: a user's `make demo`
    next to root's test run (found by running the demo as a newcomer without root: the
    directory root had made was 0755 and its files 0644, so the demo died at its first port).
    As root the other user is `nobody`; otherwise the same user with a read-only claim file."""
    base = Path(tempfile.mkdtemp(prefix="claims-"))
    try:
        base.chmod(0o755)
        directory = base / "ports"
        ours = PortClaims(directory)
        assert ours.claim(41000)
        assert directory.stat().st_mode & 0o7777 == 0o1777
        (directory / "41001.lock").touch(mode=0o444)
        other = 65534 if os.geteuid() == 0 else None
        assert _claim_three_as(directory, other) == [False, True, True]
    finally:
        shutil.rmtree(base)
