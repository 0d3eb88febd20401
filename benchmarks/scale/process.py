"""What the operator does, seen from outside: its process, its log, its writes (audit log),
the objects it writes (watches), and the Node heartbeats it must ignore."""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from benchmarks.scale.common import (
    OPERATOR_AGENTS,
    ROOT,
    USER_AGENT,
    ApiError,
    Obj,
    Rest,
)
from tests.harness.cluster import LocalCluster
from tests.harness.module import stop_gracefully

# -- what the operator does -----------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """One write request by the operator, from the audit log."""

    at: float
    verb: str
    resource: str
    subresource: str
    name: str
    agent: str = ""

    @property
    def kind(self) -> str:
        """``patch gpus/status (kyma-gpu)``: verb, resource, and the client (kopf, kyma-gpu)."""
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.verb} {self.resource}{sub} ({self.agent.split('/')[0]})"


class LineTail:
    """The complete lines appended to a file since the last call.

    Keeps the file open, so a rotation (the file renamed, a new one at the path) loses
    nothing: the old file is read to its end before the new one is followed."""

    def __init__(self, path: Path, from_end: bool = True) -> None:
        self.path = path
        self._handle: BinaryIO | None = self._open()
        if self._handle is not None and from_end:
            self._handle.seek(0, os.SEEK_END)
        self._pending = b""

    def _open(self) -> BinaryIO | None:
        try:
            return self.path.open("rb")
        except FileNotFoundError:
            return None

    def _rotated(self, handle: BinaryIO) -> bool:
        try:
            return os.fstat(handle.fileno()).st_ino != self.path.stat().st_ino
        except FileNotFoundError:
            return False

    def lines(self) -> list[str]:
        if self._handle is None:
            self._handle = self._open()
            if self._handle is None:
                return []
        data = self._pending + self._handle.read()
        if self._rotated(self._handle):
            data += self._handle.read()
            self._handle.close()
            self._handle = self._open()
            data += self._handle.read() if self._handle is not None else b""
        end = data.rfind(b"\n") + 1
        self._pending = data[end:]
        return data[:end].decode("utf-8", errors="replace").splitlines()


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class AuditTail:
    """The operator's writes (user agent kopf/ or kyma-gpu/) appended to the audit log."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.tail = LineTail(cluster.audit_log)
        self.seen: list[Write] = []

    def poll(self) -> list[Write]:
        new = []
        for line in self.tail.lines():
            if not any(agent in line for agent in OPERATOR_AGENTS):
                continue
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete" or event.get("verb") not in (
                "create",
                "update",
                "patch",
                "delete",
            ):
                continue
            ref = event.get("objectRef") or {}
            new.append(
                Write(
                    _epoch(event["stageTimestamp"]),
                    event["verb"],
                    ref.get("resource", ""),
                    ref.get("subresource", ""),
                    ref.get("name", ""),
                    str(event.get("userAgent", "")),
                )
            )
        self.seen.extend(new)
        return new

    def between(self, start: float, end: float) -> list[Write]:
        self.poll()
        return [write for write in self.seen if start <= write.at <= end]


def _proc_status(pid: int) -> dict[str, int]:
    fields: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(rest.split()[0])
    return fields


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """A benchmark killed hard must not leave its operator running (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def manager_entry(root: Path) -> tuple[str, ...]:
    """How a source tree starts its manager: ``python -m kyma_gpu`` (kyma_gpu/main.py), or
    ``python -m kyma_gpu.cli run`` on a tree from before it (a baseline to compare with)."""
    if (root / "operator" / "kyma_gpu" / "main.py").is_file():
        return ("-m", "kyma_gpu")
    return ("-m", "kyma_gpu.cli", "run")


class Operator:
    """The manager of a source tree with ``--standalone``, KUBECONFIG = the cluster."""

    def __init__(
        self,
        cluster: LocalCluster,
        root: Path = ROOT,
        name: str = "operator-scale",
        entry: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """entry: what follows the interpreter (default: the tree's manager_entry)."""
        self.cluster, self.root = cluster, root
        self.entry = manager_entry(root) if entry is None else tuple(entry)
        self.env = dict(env or {})
        self.log_path = cluster.log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> float:
        """Start; the wall-clock time just before the process was spawned."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(self.root / "operator"),
            **self.env,
        }
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.started_at = time.time()
            self.process = subprocess.Popen(
                [sys.executable, *self.entry, "--standalone"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only calls prctl
            )
        return self.started_at

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the operator has not been started")
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"the operator exited with {self.process.returncode}; log {self.log_path}"
            )

    def cpu_seconds(self) -> float:
        """utime + stime of the process so far."""
        stat = Path(f"/proc/{self.pid}/stat").read_text(encoding="ascii")
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def memory_mib(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) in MiB: resident now and the peak so far."""
        fields = _proc_status(self.pid)
        return fields.get("VmRSS", 0) / 1024, fields.get("VmHWM", 0) / 1024

    def send_signal(self, signum: int) -> None:
        if self.alive() and self.process is not None:
            self.process.send_signal(signum)

    def stop(self, timeout: float = 30.0) -> None:
        stop_gracefully(self.process, timeout)


Digest = Callable[[Obj | None], dict[str, str] | None]
"""What a watch remembers of each version it sees (a few fields, not the body)."""


class ObjectWatch:
    """Watches one object of a collection; keeps the last body and its arrival time, and
    with a ``digest`` the digest of each version as it arrived (``since``)."""

    def __init__(
        self, rest: Rest, collection: str, name: str, digest: Digest | None = None
    ) -> None:
        self.rest, self.collection, self.name = rest, collection, name
        self.obj: Obj | None = None
        self.arrived = 0.0
        self.digest = digest
        self.history: deque[tuple[float, dict[str, str] | None]] = deque(maxlen=5000)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)

    def start(self) -> ObjectWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _set(self, obj: Obj | None) -> None:
        with self._cond:
            self.obj, self.arrived = obj, time.time()
            if self.digest is not None:
                self.history.append((self.arrived, self.digest(obj)))
            self._cond.notify_all()

    def since(self, start: float, end: float) -> list[tuple[float, dict[str, str] | None]]:
        """The digests of the versions that arrived from ``start`` to ``end`` (wall clock)."""
        with self._cond:
            return [(at, digest) for at, digest in self.history if start <= at <= end]

    def _run(self) -> None:
        selector = quote(f"metadata.name={self.name}")
        while not self._stop.is_set():
            try:
                listed = self.rest.get(f"{self.collection}?fieldSelector={selector}")
                items = listed.get("items") or []
                self._set(items[0] if items else None)
                self._stream(selector, listed["metadata"]["resourceVersion"])
            except (ApiError, OSError, http.client.HTTPException, ValueError):
                time.sleep(0.5)

    def _stream(self, selector: str, version: str) -> None:
        conn = self.rest.connect(timeout=90)
        query = f"watch=1&fieldSelector={selector}&resourceVersion={version}&timeoutSeconds=60"
        try:
            conn.request("GET", f"{self.collection}?{query}", headers={"User-Agent": USER_AGENT})
            response = conn.getresponse()
            while not self._stop.is_set():
                line = response.readline()
                if not line:
                    return
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    return  # e.g. 410 Gone: list again
                self._set(None if event.get("type") == "DELETED" else event.get("object"))
        finally:
            conn.close()

    def wait(self, predicate: Callable[[Obj | None], bool], timeout: float) -> float | None:
        """Wait until the body satisfies ``predicate``; its arrival time, None on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.obj):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(min(remaining, 1.0))
            return self.arrived

    def generation(self) -> int:
        with self._cond:
            return int(((self.obj or {}).get("metadata") or {}).get("generation") or 0)

    def current(self) -> Obj | None:
        with self._cond:
            return self.obj


class Heartbeats:
    """Node status heartbeats at a fixed rate, round robin, as kubelets send them."""

    TYPES = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")

    def __init__(self, rest: Rest, names: Sequence[str], rate: float, workers: int = 0) -> None:
        # One worker per 8/s asked, at least 4: a PATCH answered in up to ~120 ms by a busy API
        # server (it returns the whole Node) still keeps the rate. With 4 workers the 20,000-node
        # run reached 55 of the 70/s it asked.
        workers = workers or max(4, math.ceil(rate / 8))
        self.rest, self.names, self.rate, self.workers = rest, list(names), rate, workers
        self.sent = 0
        self.errors = 0
        self._lock = threading.Lock()

    def _beat(self, name: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "status": {"conditions": [{"type": t, "lastHeartbeatTime": now} for t in self.TYPES]}
        }
        path = f"/api/v1/nodes/{name}/status"
        status, _ = self.rest.raw("PATCH", path, body, "application/strategic-merge-patch+json")
        with self._lock:
            self.sent += 1
            self.errors += status != 200

    def run(self, seconds: float) -> float:
        """Send for ``seconds``; the rate achieved (heartbeats completed per second)."""
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            for k in range(int(seconds * self.rate)):
                due = began + k / self.rate
                time.sleep(max(0.0, due - time.monotonic()))
                pool.submit(self._beat, self.names[k % len(self.names)])
        return self.sent / max(time.monotonic() - began, 1e-6)
