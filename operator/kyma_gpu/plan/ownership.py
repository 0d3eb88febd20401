"""Who else wrote the module's Flux objects: the fields another field manager holds. Pure.

The manager applies its HelmRelease and chart source server-side, forced, as FIELD_MANAGER: a
field of its own that someone changed comes back at the next apply. A field it does not set
stays, though: server-side apply removes only what the applier owned and dropped. So a writer
in kyma-system that added `spec.values.validator...`, `spec.valuesFrom` or `spec.postRenderers`
to the HelmRelease kept them through every reconcile, and helm-controller installed them.

`foreign_fields` reads the objects' managedFields and names every field under `spec` (but
`suspend`: `flux suspend` and `flux resume` are the user's, as Flux users expect) and every
label that a manager other than the module's holds and the module's own apply does not set.
`removals` turns them into JSON patch operations (each removal tested against the value
read, so a change in between fails the patch instead of removing something else).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kyma_gpu.api.resources import FIELD_MANAGER

GUARDED: tuple[tuple[str, ...], ...] = (("spec",), ("metadata", "labels"))
"""The parts of the module's Flux objects that only the module writes."""
USERS: frozenset[tuple[str, ...]] = frozenset({("spec", "suspend")})
"""What stays the user's: `flux suspend` / `flux resume`."""

Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ForeignField:
    """A field of one of the module's Flux objects that another field manager wrote."""

    manager: str
    path: Path
    """Its keys, as in the object: ("spec", "values", "validator", "image")."""

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


def _leaves(fields: Mapping[str, Any], path: Path = ()) -> Iterator[Path]:
    """The fields a fieldsV1 set names (a list item's key ends its path at the list)."""
    children = [k for k in fields if k != "."]
    if not children:
        yield path
        return
    if any(not k.startswith("f:") for k in children):  # k:, v:, i:: items of a list
        yield path
        return
    for key in children:
        child = fields[key]
        yield from _leaves(child if isinstance(child, Mapping) else {}, (*path, key[2:]))


def _fields(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    fields = entry.get("fieldsV1")
    if isinstance(fields, str):  # as a Watch event may carry it
        fields = json.loads(fields)
    return fields if isinstance(fields, Mapping) else {}


def _guarded(path: Path) -> bool:
    return any(path[: len(g)] == g and len(path) > len(g) for g in GUARDED) and not any(
        path[: len(u)] == u for u in USERS
    )


def _ours(entry: Mapping[str, Any], ours: str) -> bool:
    """The module's apply: its field manager, operation Apply. Another write under its name
    (a patch, `--field-manager=kyma-gpu`) is someone else's: the module only applies (its
    removals own no field)."""
    return entry.get("manager") == ours and entry.get("operation") == "Apply"


def applied_fields(
    managed_fields: Sequence[Mapping[str, Any]] | None, ours: str = FIELD_MANAGER
) -> frozenset[Path]:
    """The guarded fields the module's apply holds (`planned_fields` says which it should)."""
    entries = [e for e in managed_fields or () if not e.get("subresource") and _ours(e, ours)]
    return frozenset(leaf for e in entries for leaf in _leaves(_fields(e)) if _guarded(leaf))


def planned_fields(obj: Mapping[str, Any]) -> frozenset[Path]:
    """The guarded fields an apply of `obj` holds, as the API server records them (a list
    whole, an empty map as a field)."""
    meta = obj.get("metadata") or {}
    body = {"spec": obj.get("spec") or {}, "metadata": {"labels": meta.get("labels") or {}}}
    return frozenset(p for p in _paths(body) if _guarded(p))


def _paths(node: Any, path: Path = ()) -> Iterator[Path]:
    if isinstance(node, Mapping) and node:
        for key, child in node.items():
            yield from _paths(child, (*path, str(key)))
    else:
        yield path


def foreign_fields(
    managed_fields: Sequence[Mapping[str, Any]] | None, ours: str = FIELD_MANAGER
) -> tuple[ForeignField, ...]:
    """The guarded fields that managers other than `ours` hold and `ours` does not: neither
    the field, nor a field below it, nor a field above it (an atomic list) is ours."""
    entries = [e for e in managed_fields or () if not e.get("subresource")]
    mine = {leaf for e in entries if _ours(e, ours) for leaf in _leaves(_fields(e))}
    above = {leaf[:i] for leaf in mine for i in range(1, len(leaf))}
    found: dict[Path, str] = {}
    for entry in entries:
        manager = str(entry.get("manager") or "")
        if _ours(entry, ours):
            continue
        for leaf in _leaves(_fields(entry)):
            if not _guarded(leaf) or leaf in mine or leaf in above:
                continue
            if any(leaf[:i] in mine for i in range(1, len(leaf))):
                continue
            found.setdefault(leaf, manager)
    return tuple(ForeignField(manager, path) for path, manager in sorted(found.items()))


def _held(body: Mapping[str, Any], path: Path) -> bool:
    node: Any = body
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


def _value(body: Mapping[str, Any], path: Path) -> Any:
    node: Any = body
    for key in path:
        node = node[key]
    return node


def _pointer(path: Path) -> str:
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in path)


def _widened(body: Mapping[str, Any], paths: Sequence[Path]) -> list[Path]:
    """`paths`, where removing all of a map's keys removes the map too: no empty map is left
    behind (`spec.values.validator: {}` is no value of the module's either). None of the map's
    keys is the module's then, so neither is the map."""
    doomed = set(paths)
    changed = True
    while changed:
        changed = False
        for parent in {p[:-1] for p in doomed if _guarded(p[:-1])}:
            node = _value(body, parent)
            if isinstance(node, Mapping) and node and all((*parent, k) in doomed for k in node):
                doomed = {p for p in doomed if p[: len(parent)] != parent} | {parent}
                changed = True
    return sorted(doomed)


def present(body: Mapping[str, Any], foreign: Sequence[ForeignField]) -> tuple[ForeignField, ...]:
    """Those of `foreign` that `body` holds (a managedFields entry may outlive its field)."""
    return tuple(f for f in foreign if _held(body, f.path))


def removals(body: Mapping[str, Any], foreign: Sequence[ForeignField]) -> list[dict[str, Any]]:
    """JSON patch operations that remove `foreign` from `body` (the object as read): each
    removal after a test of the value read. Fields no longer in `body` are left out."""
    ops: list[dict[str, Any]] = []
    for path in _widened(body, [f.path for f in present(body, foreign)]):
        pointer = _pointer(path)
        ops += [{"op": "test", "path": pointer, "value": _value(body, path)},
                {"op": "remove", "path": pointer}]  # fmt: skip
    return ops
