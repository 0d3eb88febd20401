"""The only module of the operator that talks to the Kubernetes API (kopf reads discovery once).

Reads are paged LISTs and WATCH streams of raw JSON (never the client's model objects), used
by the informers in `kyma_gpu.observe`, which run them in their own threads. Writes are
server-side apply with one field manager, a delete, or a patch of a given content type; they
run in a thread too, so that the event loop never blocks. The calls are generic: what an
extension writes or reads is its own code's, made of these. Every write is counted, so that
tests and the benchmark can show that nothing is written when nothing changed.

Errors are typed by HTTP status code (kyma_gpu.errors), never by message text.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import logging
import re
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kyma_gpu import __version__
from kyma_gpu.api.models import API_GROUP, API_VERSION, KIND, PLURAL
from kyma_gpu.api.resources import FIELD_MANAGER, FLUX_KINDS
from kyma_gpu.errors import (
    ApiError,
    NotFound,
    TransientError,
    classify,
    message_of,
)
from kyma_gpu.metrics import Metrics
from kyma_gpu.status.events import GpuEvent, GpuRef

USER_AGENT = f"kyma-gpu/{__version__}"
EVENT_SOURCE = "kyma-gpu-operator"
_LEASE_TIMEOUT = (3.0, 5.0)
"""Connect and read timeouts of Lease requests: a renewal must fail well within the deadline."""
_APPLY = "application/apply-patch+yaml"
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
_METADATA_ONLY_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
_NO_FLUX = (
    " (is Flux installed? The module needs helm.toolkit.fluxcd.io/v2 and"
    " source.toolkit.fluxcd.io/v1; see flux/README.md)"
)
_FORCE_APPLY = (("fieldManager", FIELD_MANAGER), ("force", "true"))
_GPUS = f"/apis/{API_GROUP}/{API_VERSION}/{PLURAL}"
_POOL_SIZE = 32
"""Connections: one per watch thread, plus writes; the default (5 per core) is too small."""

log = logging.getLogger(__name__)

PLURALS = MappingProxyType({(k.api_version, k.kind): k.plural for k in FLUX_KINDS})
"""apiVersion/kind -> plural, for the Flux objects the plan renders; other kinds' plurals are
the API machinery's guess (`plural`)."""


class Patch(StrEnum):
    """A patch's content type: how the API server reads its body."""

    JSON = "application/json-patch+json"
    """Operations (RFC 6902): `test` a value, `remove` it, ..."""
    MERGE = "application/merge-patch+json"
    """A JSON merge patch (RFC 7386): a null removes a key."""
    STRATEGIC = "application/strategic-merge-patch+json"
    """Kubernetes' strategic merge: lists of a built-in kind merge by their key (a Node's
    conditions by type), so the others' entries stay as they are."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Parser:
    """How the JSON of one collection is parsed: its LIST pages and its watch events."""

    page: Callable[[bytes], Any] = json.loads
    event: Callable[[bytes], Any] = json.loads


@dataclass(frozen=True, slots=True)
class ListQuery:
    """One collection to list and watch: a path such as /api/v1/nodes, and its selectors."""

    path: str
    label_selector: str | None = None
    field_selector: str | None = None
    metadata_only: bool = False
    parser: Parser = Parser()
    """The standard library's JSON, or NODE_JSON for Nodes."""
    coalesce: float = 0.0
    """Seconds to wait after a watch event that came after a wait, so that the events of that
    span are read in one go (KubeAdapter.watch). 0: each event as it comes."""

    def params(self) -> list[tuple[str, str]]:
        out = []
        if self.label_selector:
            out.append(("labelSelector", self.label_selector))
        if self.field_selector:
            out.append(("fieldSelector", self.field_selector))
        return out


@dataclass
class KubeAdapter:
    """Reads collections page by page and as watch streams; writes Flux objects and the Gpu."""

    api: client.ApiClient
    writes: Counter[str] = field(default_factory=Counter)
    metrics: Metrics = field(default_factory=Metrics)

    @classmethod
    def connect(cls, identity: str = "", metrics: Metrics | None = None) -> KubeAdapter:
        """In-cluster config, else $KUBECONFIG / ~/.kube/config. The identity (the pod name)
        goes into the User-Agent, so the audit log tells the replicas apart."""
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        configuration.connection_pool_maxsize = _POOL_SIZE
        api = client.ApiClient(configuration)
        api.user_agent = f"{USER_AGENT} ({identity})" if identity else USER_AGENT
        return cls(api=api, metrics=metrics or Metrics())

    # -- one request --

    def _request(
        self, what: str, method: str, path: str, *, query: Sequence[tuple[str, str]] | None = None,
        body: Any = None, content_type: str | None = None, accept: str = "application/json",
        timeout: tuple[float, float] = (10, 30),
    ) -> urllib3.BaseHTTPResponse:  # fmt: skip
        """One HTTP request, its response unread; a non-2xx answer raises the typed error."""
        headers = {"Accept": accept, **({"Content-Type": content_type} if content_type else {})}
        try:
            method, url, headers, body, _ = self.api.param_serialize(
                method, path, query_params=list(query or ()), header_params=headers, body=body,
                auth_settings=["BearerToken"],
            )  # fmt: skip
            response: urllib3.BaseHTTPResponse = self.api.call_api(
                method, url, header_params=headers, body=body, _request_timeout=timeout
            ).response
        except ApiException as err:
            raise classify(what, int(err.status or 0), str(err.reason or ""),
                           message_of(err.body)) from err  # fmt: skip
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise TransientError(what, 0, message=str(err)) from err
        if not 200 <= response.status < 300:
            data = response.data
            response.release_conn()
            raise classify(what, response.status, str(response.reason or ""), message_of(data))
        return response

    def _bytes(self, what: str, method: str, path: str, **kwargs: Any) -> bytes:
        """A response's whole body, unparsed."""
        response = self._request(what, method, path, **kwargs)
        try:
            return bytes(response.data)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise TransientError(what, 0, message=str(err)) from err
        finally:
            response.release_conn()

    def _json(self, what: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self._bytes(what, method, path, **kwargs))
        return result

    # -- reads (blocking: the informers call them from their own threads) --

    def list_page(self, query: ListQuery, limit: int, token: str | None = None) -> dict[str, Any]:
        """One page of a LIST: the parsed JSON (items, metadata.continue/resourceVersion)."""
        result: dict[str, Any] = query.parser.page(self._page(query, limit, token))
        return result

    def _page(self, query: ListQuery, limit: int, token: str | None) -> bytes:
        """One page of a LIST, its raw JSON."""
        params = [*query.params(), ("limit", str(limit))] + ([("continue", token)] if token else [])
        accept = _METADATA_ONLY if query.metadata_only else "application/json"
        return self._bytes(f"list {query.path}", "GET", query.path, query=params, accept=accept,
                           timeout=(10, 60))  # fmt: skip

    def list_pages(self, query: ListQuery, limit: int) -> Iterator[dict[str, Any]]:
        """The pages of a whole LIST in order, each parsed as list_page parses it, while the
        request for the next one already runs: its continue token is read from the head of
        the page's raw JSON (`_continue_of`), so the API server encodes and sends page n+1
        while the caller parses and folds page n: on a big fleet the LIST is many pages of
        megabytes each, and the two overlap instead of taking turns. At most two pages are
        held: the one handed out and the next one arriving."""

        def fetch(token: str | None) -> bytes:
            return self._page(query, limit, token)

        with ThreadPoolExecutor(1, thread_name_prefix="list-ahead") as ahead:
            data: bytes | None = fetch(None)
            while data is not None:
                token = _continue_of(data)
                following = ahead.submit(fetch, token) if token else None
                page: dict[str, Any] = query.parser.page(data)
                data = None
                if following is None:  # the head had no token: the last page, or an odd one
                    later = str((page.get("metadata") or {}).get("continue") or "") or None
                    yield page
                    data = fetch(later) if later else None
                    continue
                yield page
                data = following.result()

    def watch(
        self, query: ListQuery, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """WATCH events (type, object) from a resourceVersion, with bookmarks, until the server
        ends the stream. An ERROR event with code 410 raises Gone.

        The stream is newline-delimited JSON. With `query.coalesce`, a read that had to wait
        for the server is followed by a sleep that long; the reads after it find their data
        buffered and do not wait. A wake-up of the thread costs more than reading a Node event
        (benchmarks/watch_read.py), so however many heartbeats a second a fleet sends, the Node
        watch (observe.watches.NODE_COALESCE) wakes up at most about 1 / coalesce times a
        second, each event at most `coalesce` seconds later."""
        params = [
            *query.params(),
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        accept = _METADATA_ONLY_WATCH if query.metadata_only else "application/json"
        what = f"watch {query.path}"
        response = self._request(what, "GET", query.path, query=params, accept=accept,
                                 timeout=(10, timeout_seconds + 30))  # fmt: skip
        pending, began = b"", time.monotonic()
        try:  # the newline after the stream ends its last line
            for chunk in itertools.chain(response.stream(64 * 1024, decode_content=True), [b"\n"]):
                waited = time.monotonic() - began > _WAITED
                *complete, pending = (pending + chunk).split(b"\n")
                for line in (line for line in complete if line.strip()):
                    event: dict[str, Any] = query.parser.event(line)
                    if event.get("type") == "ERROR":
                        raise _status_error(what, event.get("object") or {})
                    yield event
                if query.coalesce and waited:
                    time.sleep(query.coalesce)
                began = time.monotonic()
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise TransientError(what, 0, message=f"stream broken: {err}") from err
        finally:
            response.release_conn()

    # -- writes (async: each runs in a thread) --

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply of a Flux object (or one of the module's own Flux). Returns the
        object as now stored."""
        ref = ObjectRef.of(obj)
        try:
            return await self._write(f"apply {ref}", "PATCH", _path(ref), body=dict(obj),
                                     content_type=_APPLY, query=_FORCE_APPLY)  # fmt: skip
        except NotFound as err:
            raise NotFound(err.what, err.status, err.reason, f"{err.message}{_NO_FLUX}") from err

    async def patch(
        self, ref: ObjectRef, body: Sequence[Mapping[str, Any]] | Mapping[str, Any],
        how: Patch = Patch.JSON, subresource: str = "", what: str = "",
    ) -> dict[str, Any]:  # fmt: skip
        """A patch of one object, or of its `subresource` (`status`), read as `how` says: the
        core's JSON patch of its Flux objects (plan/ownership.py: removals, each after a test
        of the value read), an extension's merge patch. `what` names the request in its
        errors and the write counter (default: patch and the object). Returns the object as
        now stored; NotFound when it is gone."""
        path = f"{_path(ref)}/{subresource}" if subresource else _path(ref)
        sent = dict(body) if isinstance(body, Mapping) else list(body)
        return await self._write(what or f"patch {ref}", "PATCH", path, body=sent,
                                 content_type=str(how),
                                 query=(("fieldManager", FIELD_MANAGER),))  # fmt: skip

    async def delete(self, ref: ObjectRef) -> dict[str, Any] | None:
        """Delete. Returns what the API answered (the object, now with its deletionTimestamp,
        or a Status when it went at once); None when it was not there."""
        try:
            return await self._write(f"delete {ref}", "DELETE", _path(ref))
        except NotFound:
            return None

    async def read_list(self, query: ListQuery, limit: int) -> dict[str, Any]:
        """The first page of a LIST (at most `limit` items, metadata only with
        `query.metadata_only`), in a thread: what a step reads that no informer watches.
        NotFound when the collection is not served."""
        return await asyncio.to_thread(self.list_page, query, limit)

    async def read(self, ref: ObjectRef) -> dict[str, Any] | None:
        """One object as stored now (the loop's safety pass); None when it is not there."""
        try:
            return await asyncio.to_thread(self._json, f"get {ref}", "GET", _path(ref))
        except NotFound:
            return None

    async def apply_status(self, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply of Gpu.status (the whole status is ours). Returns the Gpu."""
        body = {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "metadata": {"name": name},
            "status": dict(status),
        }
        return await self._write(f"apply status of Gpu {name}", "PATCH", f"{_GPUS}/{name}/status",
                                 body=body, content_type=_APPLY, query=_FORCE_APPLY)  # fmt: skip

    async def set_finalizers(
        self, name: str, finalizers: list[str], resource_version: str
    ) -> dict[str, Any]:
        """Replace the Gpu's finalizers, if it is still at resource_version (else 409)."""
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}}
        return await self._write(f"patch finalizers of Gpu {name}", "PATCH", f"{_GPUS}/{name}",
                                 body=patch, content_type=str(Patch.MERGE))  # fmt: skip

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease, or None when there is none yet."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        try:
            return await asyncio.to_thread(self._json, f"get Lease {namespace}/{name}", "GET", path,
                                           timeout=_LEASE_TIMEOUT)  # fmt: skip
        except NotFound:
            return None

    async def write_lease(
        self, namespace: str, name: str, spec: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any]:
        """Create the Lease (resource_version None), or replace it if it is still at
        resource_version (else 409: another replica wrote first)."""
        base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": dict(spec)}  # fmt: skip
        if resource_version is None:
            return await self._write(f"create Lease {namespace}/{name}", "POST", base, body=body,
                                     timeout=_LEASE_TIMEOUT)  # fmt: skip
        return await self._write(f"update Lease {namespace}/{name}", "PUT", f"{base}/{name}",
                                 body=body, timeout=_LEASE_TIMEOUT)  # fmt: skip

    async def post_event(self, namespace: str, gpu: GpuRef, event: GpuEvent) -> None:
        """A core/v1 Event about the Gpu in `namespace` (status/events.py says which). The
        involvedObject names it too: the API server keeps an Event about an object without a
        namespace only in `default`."""
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{gpu.name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND,
                               "name": gpu.name, "uid": gpu.uid, "namespace": namespace},
            "type": str(event.type),
            "reason": event.reason,
            "message": event.message,
            "source": {"component": EVENT_SOURCE},
            "reportingComponent": EVENT_SOURCE,
            "reportingInstance": socket.gethostname(),
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }  # fmt: skip
        await self._write(f"post Event on Gpu {gpu.name}", "POST",
                          f"/api/v1/namespaces/{namespace}/events", body=body)  # fmt: skip

    async def _write(self, what: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.writes[what.split(" ", 1)[0]] += 1
        self.metrics.api_write(method, path, kwargs.get("content_type"))
        return await asyncio.to_thread(self._json, what, method, path, **kwargs)


def plural(kind: str) -> str:
    """The resource of a kind as the API machinery guesses it (apimachinery's
    UnsafeGuessKindToResource): lower case, -s -> -ses, -y -> -ies, else -s. Right for every
    built-in kind the module writes (Node, Deployment, CustomResourceDefinition, ...)."""
    lower = kind.lower()
    if lower.endswith("s"):
        return f"{lower}es"
    return f"{lower[:-1]}ies" if lower.endswith("y") else f"{lower}s"


def _path(ref: ObjectRef) -> str:
    resource = PLURALS.get((ref.api_version, ref.kind)) or plural(ref.kind)
    base = "/api/v1" if ref.api_version == "v1" else f"/apis/{ref.api_version}"
    namespace = f"/namespaces/{ref.namespace}" if ref.namespace else ""
    return f"{base}{namespace}/{resource}/{ref.name}"


def _status_error(what: str, status: Mapping[str, Any]) -> ApiError:
    """The typed error of a Status object (a watch's ERROR event)."""
    code = status.get("code")
    reason, message = str(status.get("reason", "")), str(status.get("message", ""))
    return classify(what, code if isinstance(code, int) else 0, reason, message)


_IMAGES = b'"images":[{'
_IMAGES_END = b"}]"


def without_images(data: bytes) -> bytes:
    """The JSON of Nodes (a list page or a watch event) with every status.images emptied.

    The module never reads a Node's images, but a kubelet reports up to 50 of them with all
    their names and sizes, most of a Node's bytes: cutting them before parsing saves most of
    the cost of parsing and freeing a Node, which on a big fleet is most of the manager's start
    (docs/performance.md, "20,000 Nodes, with Flux and the NVIDIA controller"). The cut needs
    no parser: inside a JSON string every quote is escaped, so `"images":[{` is always the key
    `images` and its array, whose entries ({"names":[...],"sizeBytes":N}) first close with `}]`
    at the array's end (image references hold no braces). Should a body not parse after the
    cut, the original is parsed (NODE_JSON)."""
    parts: list[bytes] = []
    at = 0
    while (start := data.find(_IMAGES, at)) >= 0:
        end = data.find(_IMAGES_END, start)
        if end < 0:
            break
        parts += (data[at:start], b'"images":[]')
        at = end + len(_IMAGES_END)
    if not parts:
        return data
    parts.append(data[at:])
    return b"".join(parts)


_LIST_META = re.compile(rb'"metadata":(\{[^{}]*\})')
_HEAD = 4096


def _continue_of(data: bytes) -> str | None:
    """The continue token of a LIST page, read from its head without parsing the page: the API
    server writes kind, apiVersion and the list's metadata (flat: resourceVersion, continue,
    remainingItemCount) before the items. None when there is none, or the head is not shaped
    so (the caller then takes it from the parsed page)."""
    found = _LIST_META.search(data, 0, _HEAD)
    if found is None or data.find(b'"items"', 0, found.start()) >= 0:
        return None
    try:
        token = json.loads(found[1]).get("continue")
    except ValueError:
        return None
    return str(token) if token else None


_WAITED = 0.002
"""A read that took longer than this waited for the server (a buffered one takes microseconds)."""


def _without_images(data: bytes, parse: Callable[[bytes], Any]) -> Any:
    try:
        return parse(without_images(data))
    except ValueError:
        log.debug("a Node body with an unusual status.images: parsed whole")
    return parse(data)


def _fast(data: bytes) -> Any:
    """orjson: faster than the standard library on a Node, and a Node heartbeat is the event
    the manager reads most (docs/performance.md, "What a heartbeat costs, and why";
    benchmarks/watch_read.py measures it). Only for Nodes, whose fields the
    module reads are strings: orjson reads an integer beyond 64 bits as a float, which would
    make a HelmRelease's values differ from what was applied. What it refuses (NaN) goes to
    the standard library: a Node must not stop a whole LIST or watch."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _node_page(data: bytes) -> Any:
    return _without_images(data, parse=json.loads)


def _node_event(data: bytes) -> Any:
    return _without_images(data, parse=_fast)


NODE_JSON = Parser(page=_node_page, event=_node_event)
"""Nodes: status.images cut before parsing (without_images). Watch events by orjson (_fast);
LIST pages by the standard library, which parses a page of Nodes without orjson's
whole-document tree: that tree raises the peak of a LIST, and the manager's heap keeps the peak
(docs/performance.md, "What a heartbeat costs, and why"). Every other
collection keeps the standard library (Parser()), which keeps every integer as written."""
