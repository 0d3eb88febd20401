"""Plain HTTPS to the API server, and what every part of the scale benchmark shares."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from kyma_gpu.api.resources import HELM_RELEASE
from tests.harness.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
USER_AGENT = "scale-bench/1"
SCALE_LABEL = "harness.kyma-gpu.test/scale"
OPERATOR_AGENTS = ('"userAgent":"kopf', '"userAgent":"kyma-gpu')
RECONCILED = "reconciled: phase="
GPU_PATH = "/apis/gpu.kyma-project.io/v1beta1/gpus"
HELMRELEASES = HELM_RELEASE.path("kyma-system")
HELMRELEASE_NAME = "gpu-operator"
MODULE_NAMESPACE = "kyma-system"
TIMEOUT = "timeout"

Obj = dict[str, Any]
Progress = Callable[[str], None]
Metric = float | int | str | None
"""A number, ``"timeout"``, or None (not measured)."""


def _quiet(_: str) -> None:
    return None


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: bytes) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]!r}")
        self.status = status


# -- plain HTTPS to the API server ----------------------------------------------------------


class Rest:
    """JSON over HTTPS to the API server as the admin user; one connection per thread."""

    def __init__(self, cluster: LocalCluster, timeout: float = 60.0) -> None:
        pki = cluster.pki
        self.context = ssl.create_default_context(cafile=str(pki.ca_cert))
        self.context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        self.port = cluster.api_port
        self.timeout = timeout
        self._local = threading.local()

    def connect(self, timeout: float | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context, timeout=timeout or self.timeout
        )

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, bytes]:
        """One request, retried on a dropped connection, 429 and 5xx; (status, body).

        A kept-alive connection the server closed while idle (after the heartbeat window, for
        one) fails at once on reuse: the first retry then goes out without a pause, or the
        0.2 s would count as the operator's latency (it made the first spec change after the
        heartbeats 341 ms at 20,000 Nodes, 138 ms by the API server's own clock)."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"User-Agent": USER_AGENT, "Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        status, payload = 0, b""
        for attempt in range(6):
            try:
                conn = self._connection()
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                status, payload = response.status, response.read()
            except (http.client.HTTPException, OSError):
                self._drop()
                if attempt == 5:
                    raise
                if attempt == 0:
                    continue  # a stale kept-alive connection: a new one, at once
            else:
                if status != 429 and status < 500:
                    return status, payload
            time.sleep(0.2 * (attempt + 1))
        return status, payload

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        ok: Sequence[int] = (200, 201),
    ) -> Any:
        status, payload = self.raw(method, path, body, content_type)
        if status not in ok:
            raise ApiError(method, path, status, payload)
        return json.loads(payload) if payload else None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def merge_patch(self, path: str, body: Obj) -> Any:
        return self.call("PATCH", path, body, content_type="application/merge-patch+json")

    def list_pages(self, path: str, params: dict[str, str], accept: str) -> Iterator[Obj]:
        """Every item of a (paged) list, in the given representation (Table, metadata)."""
        token = ""
        while True:
            query = {**params, "limit": "500", **({"continue": token} if token else {})}
            status, payload = self.raw("GET", f"{path}?{urlencode(query)}", accept=accept)
            if status != 200:
                raise ApiError("GET", path, status, payload)
            page = json.loads(payload)
            yield from page.get("rows") or page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
METADATA = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
