"""A local Helm chart repository: the chart tarballs of a directory over HTTP.

``LocalHelmRepository`` serves ``<charts_dir>/*.tgz`` and an ``index.yaml``
built from each tarball's Chart.yaml on 127.0.0.1 (a port from
``procs.free_port()``), from a thread of the test process (stdlib
http.server). Flux's source-controller reads it as a plain HTTP
HelmRepository. The default charts_dir is ``../shared/charts``
next to the repository; the charts are read in place, never copied.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import http.server
import tarfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import yaml

from .binaries import SHARED_DIR
from .procs import free_port

DEFAULT_CHARTS_DIR = SHARED_DIR / "charts"


def chart_metadata(tgz: Path) -> dict[str, Any]:
    """The Chart.yaml of a packaged chart (``<name>/Chart.yaml`` in the tarball)."""
    with tarfile.open(tgz, "r:gz") as archive:
        for member in archive.getmembers():
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == "Chart.yaml" and member.isfile():
                handle = archive.extractfile(member)
                if handle is None:
                    break
                data = yaml.safe_load(handle.read())
                if not isinstance(data, dict) or "name" not in data or "version" not in data:
                    raise ValueError(f"{tgz}: Chart.yaml lacks name or version")
                return data
    raise ValueError(f"{tgz}: no <chart>/Chart.yaml at the top of the archive")


def build_index(charts_dir: Path, base_url: str) -> dict[str, Any]:
    """A Helm repository index (apiVersion v1) for every ``*.tgz`` in ``charts_dir``.

    Each entry is the chart's Chart.yaml plus ``urls`` (absolute, under
    ``base_url``), ``created`` (the file's mtime) and ``digest`` (sha256 of
    the tarball), newest version first per chart name.
    """
    entries: dict[str, list[dict[str, Any]]] = {}
    for tgz in sorted(charts_dir.glob("*.tgz")):
        meta = chart_metadata(tgz)
        stat = tgz.stat()
        entry = {
            **meta,
            "urls": [f"{base_url.rstrip('/')}/{tgz.name}"],
            "created": dt.datetime.fromtimestamp(stat.st_mtime, dt.UTC).isoformat(),
            "digest": hashlib.sha256(tgz.read_bytes()).hexdigest(),
        }
        entries.setdefault(str(meta["name"]), []).append(entry)
    for versions in entries.values():
        versions.sort(key=lambda e: _version_key(str(e["version"])), reverse=True)
    return {
        "apiVersion": "v1",
        "entries": entries,
        "generated": dt.datetime.now(dt.UTC).isoformat(),
    }


def _version_key(version: str) -> tuple[int, ...]:
    core = version.lstrip("v").split("-")[0].split("+")[0]
    return tuple(int(part) if part.isdigit() else 0 for part in core.split("."))


class _Handler(http.server.BaseHTTPRequestHandler):
    repo: ClassVar[LocalHelmRepository]
    server_version = "kyma-gpu-helm-repo"

    def do_GET(self) -> None:
        self._serve(with_body=True)

    def do_HEAD(self) -> None:
        self._serve(with_body=False)

    def _serve(self, with_body: bool) -> None:
        path = self.path.split("?", 1)[0].lstrip("/")
        if path in ("index.yaml", "index.yml"):
            body = yaml.safe_dump(self.repo.index(), sort_keys=False).encode()
            content_type = "application/x-yaml"
        else:
            tgz = self.repo.charts_dir / path
            if "/" in path or not path.endswith(".tgz") or not tgz.is_file():
                self.send_error(404, f"no chart {path!r}")
                return
            body = tgz.read_bytes()
            content_type = "application/gzip"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        self.repo.log(format % args)


class LocalHelmRepository:
    """Serve the charts of ``charts_dir`` at http://127.0.0.1:<port>/ from a thread."""

    def __init__(self, charts_dir: Path | None = None, log_path: Path | None = None) -> None:
        self.charts_dir = (charts_dir or DEFAULT_CHARTS_DIR).resolve()
        self.log_path = log_path
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._index_cache: tuple[tuple[tuple[str, float, int], ...], dict[str, Any]] | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the Helm repository is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> LocalHelmRepository:
        if self._server is not None:
            return self
        if not any(self.charts_dir.glob("*.tgz")):
            raise FileNotFoundError(f"no chart tarballs (*.tgz) in {self.charts_dir}")
        self._server = self._bind()
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="helm-repo", daemon=True
        )
        self._thread.start()
        self.log(f"serving {self.charts_dir} at {self.url}")
        return self

    def _bind(self, attempts: int = 5) -> http.server.ThreadingHTTPServer:
        """A server on a port of the harness's allocator (see procs.free_port).

        Another program may bind the port between the allocator's check and
        ours; then the next port is tried.
        """
        handler = type("Handler", (_Handler,), {"repo": self})
        attempt = 1
        while True:
            try:
                return http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
            except OSError as error:
                if error.errno != errno.EADDRINUSE or attempt >= attempts:
                    raise
                attempt += 1

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LocalHelmRepository:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def index(self) -> Mapping[str, Any]:
        """The current index; rebuilt when a tarball is added, removed or changed."""
        key = tuple(
            (p.name, p.stat().st_mtime, p.stat().st_size)
            for p in sorted(self.charts_dir.glob("*.tgz"))
        )
        with self._lock:
            if self._index_cache is None or self._index_cache[0] != key:
                self._index_cache = (key, build_index(self.charts_dir, self.url))
            return self._index_cache[1]

    def charts(self) -> dict[str, list[str]]:
        """Chart name -> versions served, newest first."""
        return {
            name: [str(entry["version"]) for entry in versions]
            for name, versions in self.index()["entries"].items()
        }

    def log(self, message: str) -> None:
        if self.log_path is None:
            return
        stamp = dt.datetime.now(dt.UTC).strftime("%H:%M:%S.%f")[:-3]
        with contextlib.suppress(OSError), self.log_path.open("a", encoding="utf-8") as log:
            log.write(f"{stamp} {message}\n")
