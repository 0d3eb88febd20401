"""Local processes for the harness: start, health-wait, log, measure, stop.

Every process writes stdout and stderr to ``<workdir>/logs/<name>.log``. All
live processes are kept in a registry that an ``atexit`` hook stops, so an
interrupted test run or a Ctrl-C in the CLI leaves nothing behind. On Linux
each child also gets PR_SET_PDEATHSIG=SIGKILL, so even a SIGKILLed Python
parent takes its control plane with it. (That signal fires when the *thread*
that started the child exits: start clusters from a long-lived thread, in
practice the main thread.)
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import sys
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


class ProcessFailedError(RuntimeError):
    """A harness process exited or did not become healthy in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 256 * lines))
            data = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


class ManagedProcess:
    """One long-running binary with its own log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.started_at = 0.0
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

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

    def check_alive(self) -> None:
        """Raise ProcessFailedError (with the log tail) if the process has exited."""
        code = self.returncode()
        if self._popen is not None and code is not None:
            raise ProcessFailedError(
                f"{self.name} exited with code {code}; last log lines "
                f"({self.log_path}):\n{tail(self.log_path)}"
            )

    def wait_healthy(
        self,
        probe: Callable[[], bool],
        timeout: float,
        what: str = "healthy",
    ) -> float:
        """Poll ``probe`` until it returns True; return seconds since start()."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            self.check_alive()
            if probe():
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
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds. Idempotent."""
        popen = self._popen
        if popen is not None and popen.poll() is None:
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


def log_tails(log_dir: Path, lines: int = 30, names: Sequence[str] = ()) -> str:
    """The tail of every ``*.log`` in ``log_dir`` (or only ``names``), one block each."""
    paths = [log_dir / f"{name}.log" for name in names] if names else sorted(log_dir.glob("*.log"))
    blocks = []
    for path in paths:
        text = tail(path, lines)
        if text:
            blocks.append(f"----- {path.name} (last {lines} lines) -----\n{text}")
    return "\n".join(blocks)
