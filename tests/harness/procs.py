"""Local processes for the harness: ports, start, health-wait, log, measure, stop.

Every process writes stdout and stderr to ``<workdir>/logs/<name>.log``. All
live processes are kept in a registry that an ``atexit`` hook stops, so an
interrupted test run or a Ctrl-C in the CLI leaves nothing behind. On Linux
each child also gets PR_SET_PDEATHSIG=SIGKILL, so even a SIGKILLed Python
parent takes its control plane with it. (That signal fires when the *thread*
that started the child exits: start clusters from a long-lived thread, in
practice the main thread.)

Ports come from one process-wide ``PortAllocator`` (``free_port()``): it never
hands out a port twice and picks them below the kernel's ephemeral port range,
so no outgoing client connection can land on one. Across processes (pytest-xdist
workers, each with a cluster of its own, or a ``python -m tests.harness`` a test
starts) a port is also *claimed*: an exclusive ``flock`` on
``<tmp>/kyma-gpu-harness-ports/<port>.lock``, held until the claiming process
exits (the kernel drops it even after a SIGKILL). A port another live process
holds is skipped, even before that process has bound it.

A process fails fast: ``check_alive()`` (called by ``wait_healthy`` and
``wait_for(alive=...)``) raises ``ProcessFailedError`` with the log tail as
soon as the process has exited or its log shows one of its fatal patterns
(e.g. Flux's ``unable to start ...``, which some goroutines log without
exiting).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1
_registry_lock = threading.Lock()
_registry: list[ManagedProcess] = []

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_EPHEMERAL_DEFAULT = (32768, 60999)
PORT_SPAN = 10_000
"""How many ports below (or above) the ephemeral range the harness uses."""
MIN_PORT = 1024
MIN_ROOM = 1000


class ProcessFailedError(RuntimeError):
    """A harness process exited, logged a fatal error or did not become healthy in time."""


class PortsExhaustedError(RuntimeError):
    """Every port of the allocator's range is handed out or in use."""


# -- ports -------------------------------------------------------------------


def ephemeral_port_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for the local port of outgoing connections (inclusive)."""
    try:
        low, high = (int(part) for part in path.read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return LINUX_EPHEMERAL_DEFAULT
    return low, high


def harness_port_range(ephemeral: tuple[int, int] | None = None, span: int = PORT_SPAN) -> range:
    """The ports the harness hands out: up to ``span`` ports just below the ephemeral range.

    The kernel gives every outgoing connection (kubectl, the controllers' API
    clients, etcd's clients ...) a local port from the ephemeral range; a port
    from that range that was free when checked could be taken by such a socket
    before the process it was meant for binds it. Where there is no room below
    the range, the ports above it are used; as a last resort any port.
    """
    low, high = ephemeral or ephemeral_port_range()
    if low - MIN_PORT >= MIN_ROOM:
        return range(max(MIN_PORT, low - span), low)
    if 65535 - high >= MIN_ROOM:
        return range(high + 1, min(65536, high + 1 + span))
    return range(MIN_PORT, 65536)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if a TCP socket can bind ``host:port`` now (strict: no SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


PORT_CLAIMS_DIR = Path(
    os.environ.get("KYMA_GPU_PORT_CLAIMS") or Path(tempfile.gettempdir()) / "kyma-gpu-harness-ports"
)
"""Where the claim files live: one per port, shared by every harness process of the host."""


class PortClaims:
    """Cross-process claims on ports: an exclusive, non-blocking ``flock`` per port.

    A claim lasts as long as this object's process: the file descriptors stay
    open (not inherited by children: Python opens them close-on-exec) and the
    kernel releases the locks when the process ends, however it ends. So no
    stale claim can outlive a crashed test run.
    """

    def __init__(self, directory: Path = PORT_CLAIMS_DIR) -> None:
        self.directory = directory
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def claim(self, port: int) -> bool:
        """True if this process now holds ``port`` (or already did); False if another does."""
        return self.claim_key(str(port))

    def claim_key(self, key: str) -> bool:
        """The same for any name, not only a port number."""
        with self._lock:
            if key in self._held:
                return True
            fd = self._open(key)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            self._held[key] = fd
            return True

    def _open(self, key: str) -> int:
        """The claim file of ``key``, read-only (enough for flock), created if need be.

        The directory is shared by every user of the host, like /tmp itself: whoever creates
        it (or owns it) makes it world-writable with the sticky bit, so a user's harness can
        claim ports next to root's test runs, and a claim file of another user is opened
        read-only.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        info = self.directory.stat()
        if info.st_uid == os.geteuid() and info.st_mode & 0o1777 != 0o1777:
            self.directory.chmod(0o1777)
        try:
            return os.open(self.directory / f"{key}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
        except PermissionError as err:
            raise PermissionError(
                f"cannot claim port {key} in {self.directory} (owned by another user, not "
                "world-writable): ask its owner to `chmod 1777` it, or set KYMA_GPU_PORT_CLAIMS "
                "to a directory of your own"
            ) from err

    @property
    def held(self) -> frozenset[int]:
        """The ports held (names that are not port numbers left out)."""
        with self._lock:
            return frozenset(int(key) for key in self._held if key.isdigit())


CLAIMS = PortClaims()
"""This process's claims (one per Python process, like PORTS)."""


class PortAllocator:
    """Hands out TCP ports from ``ports``, each at most once, and only ports free right now.

    Thread-safe. It starts at a random place in the range and walks on from
    the last port it gave. A port must pass the bind check (nothing on the host
    holds it) and ``claim`` (by default a cross-process ``flock``, see
    PortClaims: no other harness process was handed it, bound or not yet).
    """

    def __init__(
        self,
        ports: range | None = None,
        *,
        host: str = "127.0.0.1",
        is_free: Callable[[int], bool] | None = None,
        claim: Callable[[int], bool] | None = None,
    ) -> None:
        self.ports = ports if ports is not None else harness_port_range()
        self.host = host
        self._is_free = is_free or (lambda port: port_is_free(port, host))
        self._claim = claim or CLAIMS.claim
        self._given: set[int] = set()
        self._lock = threading.Lock()
        self._next = random.randrange(len(self.ports)) if self.ports else 0

    @property
    def given(self) -> frozenset[int]:
        """Every port handed out so far."""
        with self._lock:
            return frozenset(self._given)

    def allocate(self) -> int:
        """A port never handed out before by this allocator and bindable now."""
        with self._lock:
            size = len(self.ports)
            for step in range(size):
                index = (self._next + step) % size
                port = self.ports[index]
                if port in self._given or not self._is_free(port) or not self._claim(port):
                    continue
                self._given.add(port)
                self._next = (index + 1) % size
                return port
        raise PortsExhaustedError(
            f"no free port left in {self.ports.start}-{self.ports.stop - 1} "
            f"({len(self._given)} handed out)"
        )


PORTS = PortAllocator()
"""The allocator every port of the harness comes from (one per Python process)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1: free now, never handed out before in this process."""
    return PORTS.allocate()


# -- processes ---------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tail(path: Path, lines: int = 40, max_bytes: int = 4 << 20) -> str:
    """The last ``lines`` lines of a text file ('' if it cannot be read).

    Reads backwards in growing chunks until it has the lines (or ``max_bytes``).
    """
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            chunk = 256 * max(lines, 1)
            while True:
                start = max(0, size - chunk)
                handle.seek(start)
                data = handle.read(size - start)
                if start == 0 or data.count(b"\n") > lines or chunk >= max_bytes:
                    break
                chunk *= 4
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])


def _fatal_regex(patterns: Sequence[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


class ManagedProcess:
    """One long-running binary with its own log file.

    ``fatal_patterns``: regular expressions; a new log line that matches one
    makes ``check_alive()`` fail even while the process still runs (an error a
    goroutine logs without exiting, or one logged just before the exit).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        fatal_patterns: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.fatal = _fatal_regex(fatal_patterns)
        self.fatal_line: str | None = None
        """The first log line of this run that matched a fatal pattern."""
        self.started_at = 0.0
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._scanned = 0
        self._stopped_by_us = False

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid})"

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def start(self) -> None:
        if self._popen is not None:
            raise RuntimeError(f"{self.name} already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"### {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self._scanned = self._log.tell()  # an earlier run's lines are not this run's errors
        env = {**os.environ, **self.env} if self.env is not None else None
        self.started_at = time.monotonic()
        self._popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.cwd,
            # Own session: a Ctrl-C in the terminal reaches only Python, which
            # then stops the processes in order instead of all at once.
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only calls prctl
        )
        with _registry_lock:
            _registry.append(self)

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    def scan_log(self) -> str | None:
        """The first log line of this run that matches a fatal pattern (reads only new lines)."""
        if self.fatal is None or self.fatal_line is not None or self._popen is None:
            return self.fatal_line
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(self._scanned)
                data = handle.read()
        except OSError:
            return None
        # Complete lines only, unless the process is gone and nothing will follow.
        end = len(data) if self._popen.poll() is not None else data.rfind(b"\n") + 1
        for line in data[:end].decode("utf-8", errors="replace").splitlines():
            if self.fatal.search(line):
                self.fatal_line = line.strip()
                break
        self._scanned += end
        return self.fatal_line

    def check_alive(self) -> None:
        """Raise ProcessFailedError (with the log tail) if the process exited on its own or
        logged a fatal error. A process the harness stopped (the NVIDIA controller when the
        chart is uninstalled, an API server during its planned outage) is not a failure."""
        if self._popen is None:
            return
        code = self._popen.poll()
        fatal = self.scan_log()
        if fatal is None and (code is None or self._stopped_by_us):
            return
        if code is None:
            what = f"logged a fatal error: {fatal}"
        else:
            what = f"exited with code {code}" + (f" after logging: {fatal}" if fatal else "")
        raise ProcessFailedError(
            f"{self.name} {what}\nlast log lines ({self.log_path}):\n{tail(self.log_path)}"
        )

    def status(self) -> str:
        """One line for a failure report: running, stopped by the harness, or exited."""
        if self._popen is None:
            return "not started"
        code = self._popen.poll()
        fatal = self.scan_log()
        if code is None:
            state = f"running (pid {self._popen.pid})"
        elif self._stopped_by_us:
            state = f"stopped by the harness (exit code {code})"
        else:
            state = f"EXITED on its own with code {code}"
        return f"{state}; fatal log line: {fatal}" if fatal else state

    def wait_healthy(
        self,
        probe: Callable[[], bool],
        timeout: float,
        what: str = "healthy",
    ) -> float:
        """Poll ``probe`` until it returns True; return seconds since start().

        Fails at once (ProcessFailedError) when the process exits or logs a
        fatal error, before and right after the probe succeeds.
        """
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            self.check_alive()
            if probe():
                self.check_alive()
                return time.monotonic() - self.started_at
            if time.monotonic() > deadline:
                raise ProcessFailedError(
                    f"{self.name} not {what} after {timeout:.0f}s; last log lines "
                    f"({self.log_path}):\n{tail(self.log_path)}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def rss_kib(self) -> int | None:
        """Resident set size from /proc (Linux), None when not running."""
        pid = self.pid
        if pid is None or not self.running():
            return None
        try:
            status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return None

    def terminate(self) -> None:
        """Send SIGTERM without waiting (see stop_all)."""
        popen = self._popen
        if popen is not None and popen.poll() is None:
            self._stopped_by_us = True
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds. Idempotent."""
        popen = self._popen
        if popen is not None and popen.poll() is None:
            self._stopped_by_us = True
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    popen.kill()
                popen.wait(timeout=5)
        if self._log is not None and not self._log.closed:
            self._log.close()
        with _registry_lock:
            if self in _registry:
                _registry.remove(self)

    def restart(self) -> None:
        """Stop (if running) and start again with the same argv and log."""
        self.stop()
        self._popen = None
        self._stopped_by_us = False
        self.start()


def stop_all(processes: Sequence[ManagedProcess], timeout: float = 10.0) -> None:
    """Stop processes in the given order; SIGTERM goes to all of a batch at once.

    Sending every SIGTERM first and then waiting keeps teardown as long as the
    slowest process instead of the sum of all.
    """
    for process in processes:
        process.terminate()
    for process in processes:
        process.stop(timeout=timeout)


def _stop_registered() -> None:
    with _registry_lock:
        leftovers = list(reversed(_registry))
    stop_all(leftovers, timeout=5.0)


atexit.register(_stop_registered)


def http_ok(
    url: str,
    context: ssl.SSLContext | None = None,
    expect: bytes | None = None,
    timeout: float = 2.0,
) -> bool:
    """True if GET ``url`` answers 200 (and contains ``expect``, if given)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            body: bytes = response.read()
            status: int = response.status
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return status == 200 and (expect is None or expect in body)


def insecure_tls() -> ssl.SSLContext:
    """For the health ports of components that serve a self-signed certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    interval: float = 0.25,
    alive: Sequence[ManagedProcess] = (),
) -> float:
    """Poll ``predicate`` until True; seconds taken. Fails early if a process died."""
    start = time.monotonic()
    while True:
        for process in alive:
            process.check_alive()
        if predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _brief_block(path: Path, lines: int, width: int = 300) -> str:
    """Size and the last few lines (cut to ``width`` characters) of a big log."""
    try:
        size = path.stat().st_size
    except OSError:
        return f"----- {path.name} (unreadable) -----"
    last = [
        line if len(line) <= width else line[:width] + " ..."
        for line in tail(path, lines).splitlines()
    ]
    header = f"----- {path.name} ({size} bytes; last {len(last)} lines, cut) -----"
    return "\n".join([header, *last])


def log_tails(
    log_dir: Path,
    lines: int = 30,
    names: Sequence[str] = (),
    brief: Callable[[Path], bool] | None = None,
    brief_lines: int = 3,
) -> str:
    """The tail of every file in ``log_dir`` and below it (a real node's container logs in
    ``pods/<namespace>_<pod>_<uid>/<container>/``), or only ``<name>.log`` of ``names``.

    Files for which ``brief`` is true (the API server's audit log) get only
    their size and last ``brief_lines`` lines.
    """
    if names:
        paths = [log_dir / f"{name}.log" for name in names]
    else:
        paths = sorted(path for path in log_dir.rglob("*") if path.is_file())
    blocks = []
    for path in paths:
        if brief is not None and brief(path):
            blocks.append(_brief_block(path, brief_lines))
            continue
        text = tail(path, lines)
        if text:
            name = path.relative_to(log_dir) if path.is_relative_to(log_dir) else path.name
            blocks.append(f"----- {name} (last {lines} lines) -----\n{text}")
    return "\n".join(blocks)
