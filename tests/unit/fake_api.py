"""An in-memory stand-in for the adapter's write side, for the reconcile loop's unit tests.

It keeps objects with resourceVersions and generations like the API server, answers every
write with the stored object, and can be told to fail the next writes with a given status.
The cluster tests run the real API server; this only makes the loop's logic testable alone.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kyma_gpu.adapter import ListQuery, ObjectRef, Patch, plural
from kyma_gpu.api.resources import FIELD_MANAGER
from kyma_gpu.errors import classify
from kyma_gpu.reconcile.loop import now
from kyma_gpu.status.events import GpuEvent, GpuRef

_VERSIONS = itertools.count(100)


def _held(fields: Mapping[str, Any], node: Any) -> dict[str, Any]:
    """The part of a fieldsV1 set whose fields `node` still holds."""
    kept: dict[str, Any] = {}
    for key, child in fields.items():
        name = key[2:]
        if key.startswith("f:") and isinstance(node, Mapping) and name in node:
            kept[key] = _held(child, node[name]) if child else {}
    return kept


def _merged(into: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """A merge patch into `into`: a None removes the key, a mapping merges; a Node's
    `conditions` merge by their type (strategic merge)."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif key == "conditions":
            old = {c["type"]: c for c in into.get(key) or []}
            into[key] = [*(c for t, c in old.items() if t not in {n["type"] for n in value}),
                         *({**old.get(n["type"], {}), **n} for n in value)]  # fmt: skip
        elif isinstance(value, Mapping):
            _merged(into.setdefault(key, {}), value)
        else:
            into[key] = copy.deepcopy(value)


def fields_v1(node: Mapping[str, Any]) -> dict[str, Any]:
    """The fieldsV1 set of a map, as the API server records an apply of it (lists whole)."""
    return {f"f:{k}": fields_v1(v) if isinstance(v, Mapping) and v else {}
            for k, v in node.items()}  # fmt: skip


@dataclass
class FakeApi:
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    gpu: dict[str, Any] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    fail: list[int] = field(default_factory=list)
    """HTTP statuses the next writes fail with, in order."""
    events: list[GpuEvent] = field(default_factory=list)
    others: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Flux objects of someone else's, found when the module's own Flux goes."""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Node bodies by name, for the node marks' patches."""
    drop: tuple[str, ...] = ()
    """spec fields the server drops on apply, as a CRD schema without them does (an older
    Flux)."""

    def _maybe_fail(self, what: str) -> None:
        self.calls.append(what)
        if self.fail:
            raise classify(what, self.fail.pop(0), "Injected", "injected failure")

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self._maybe_fail(f"apply {obj['kind']}")
        key = (str(obj["kind"]), str(obj["metadata"]["name"]))
        old = self.objects.get(key)
        stored = copy.deepcopy(dict(obj))
        for dropped in self.drop:
            stored.get("spec", {}).pop(dropped, None)
        meta = stored["metadata"]
        generation = (old or {}).get("metadata", {}).get("generation", 0)
        changed = old is None or old.get("spec") != stored.get("spec")
        meta["generation"] = generation + 1 if changed else generation
        meta["resourceVersion"] = str(next(_VERSIONS))
        stored["status"] = (old or {}).get("status", {})
        others = [e for e in (old or {}).get("metadata", {}).get("managedFields") or []
                  if e.get("manager") != FIELD_MANAGER]  # fmt: skip
        fields = {"f:spec": fields_v1(stored.get("spec") or {}),
                  "f:metadata": {"f:labels": fields_v1(meta.get("labels") or {})}}  # fmt: skip
        ours = {"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": fields}
        meta["managedFields"] = [ours, *others]
        self.objects[key] = stored
        return copy.deepcopy(stored)

    async def patch(
        self, ref: ObjectRef, body: Sequence[Mapping[str, Any]] | Mapping[str, Any],
        how: Patch = Patch.JSON, subresource: str = "", what: str = "",
    ) -> dict[str, Any]:  # fmt: skip
        """A JSON patch of the module's Flux objects; a merge or strategic merge patch of a
        Node (or its status) or of another object, as the API server applies them."""
        self._maybe_fail(what or f"patch {ref.kind}")
        if isinstance(body, Mapping):
            return self._merge(ref, body)
        return self._json_patch(ref, body)

    def _json_patch(
        self, ref: ObjectRef, operations: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """`test` and `remove` operations, all or nothing (a failed test is a 422)."""
        obj = copy.deepcopy(self.objects[(ref.kind, ref.name)])
        for op in operations:
            *parents, last = [k.replace("~1", "/").replace("~0", "~")
                              for k in str(op["path"]).split("/")[1:]]  # fmt: skip
            node = obj
            for key in parents:
                node = node[key]
            if op["op"] == "test" and node.get(last) != op["value"]:
                raise classify("patch", 422, "Invalid", f"test failed at {op['path']}")
            if op["op"] == "remove":
                del node[last]
        meta = obj["metadata"]
        for entry in meta.get("managedFields") or []:  # a field gone is nobody's any more
            entry["fieldsV1"] = _held(entry["fieldsV1"], obj)
        meta["generation"] = meta.get("generation", 0) + 1
        meta["resourceVersion"] = str(next(_VERSIONS))
        self.objects[(ref.kind, ref.name)] = obj
        return copy.deepcopy(obj)

    async def delete(self, ref: ObjectRef) -> dict[str, Any] | None:
        self._maybe_fail(f"delete {ref.kind}")
        obj = self.objects.get((ref.kind, ref.name))
        if obj is None:
            return None
        obj["metadata"]["deletionTimestamp"] = now()  # as the API server stamps it
        obj["metadata"]["resourceVersion"] = str(next(_VERSIONS))
        return copy.deepcopy(obj)

    async def apply_status(self, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        self._maybe_fail("status")
        self.gpu["status"] = copy.deepcopy(dict(status))
        self.gpu["metadata"]["resourceVersion"] = str(next(_VERSIONS))
        return copy.deepcopy(self.gpu)

    async def set_finalizers(
        self, name: str, finalizers: list[str], resource_version: str
    ) -> dict[str, Any]:
        self._maybe_fail("finalizers")
        if resource_version != self.gpu["metadata"]["resourceVersion"]:
            raise classify("finalizers", 409, "Conflict", "the object has been modified")
        self.gpu["metadata"]["finalizers"] = list(finalizers)
        self.gpu["metadata"]["resourceVersion"] = str(next(_VERSIONS))
        return copy.deepcopy(self.gpu)

    async def post_event(self, namespace: str, gpu: GpuRef, event: GpuEvent) -> None:
        self.events.append(event)  # not a call: Events are told apart from the writes

    def _merge(self, ref: ObjectRef, patch: Mapping[str, Any]) -> dict[str, Any]:
        """A merge patch (a None removes a key); a Node's conditions merge by type, as a
        strategic merge patch of nodes/status merges them. NotFound when it is not there."""
        obj = self.nodes.get(ref.name) if ref.kind == "Node" else self.objects.get(
            (ref.kind, ref.name))  # fmt: skip
        if obj is None:
            raise classify(f"patch {ref}", 404, "NotFound", "not found")
        _merged(obj, patch)
        obj["metadata"]["resourceVersion"] = str(next(_VERSIONS))
        return copy.deepcopy(obj)

    async def read_list(self, query: ListQuery, limit: int) -> dict[str, Any]:
        """The objects of the kind of `query.path` (its plural, in all namespaces): what is
        here, plus what `others` holds (Flux objects the module did not create)."""
        resource = query.path.rsplit("/", 1)[-1]
        mine = [obj for (k, _), obj in self.objects.items() if plural(k) == resource]
        theirs = [obj for k, obj in self.others if plural(k) == resource]
        return {"items": [*mine, *theirs][:limit]}

    async def read(self, ref: ObjectRef) -> dict[str, Any] | None:
        """A read is no write: counted in `reads`, not in `calls`."""
        self.reads.append(f"get {ref.kind}")
        obj = self.objects.get((ref.kind, ref.name))
        return copy.deepcopy(obj) if obj is not None else None

    def next_version(self) -> str:
        """The API server's next resourceVersion (one counter for every object)."""
        return str(next(_VERSIONS))

    def writes(self) -> list[str]:
        calls, self.calls = self.calls, []
        return calls
