"""What to write: compare the planned Flux objects with what the cluster has. Pure.

Nothing is written when the live object already holds every planned field, so heartbeats,
restarts and repeated reconciles cost no API writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kyma_gpu.plan.flux_objects import SPEC_HASH
from kyma_gpu.plan.ownership import (
    ForeignField,
    Path,
    applied_fields,
    foreign_fields,
    planned_fields,
    present,
)


@dataclass(frozen=True, slots=True)
class LiveObject:
    """The part of a live Flux object that planning compares: labels, owners, spec."""

    api_version: str
    kind: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    owner_uids: tuple[str, ...]
    spec: Mapping[str, Any]
    deleting: bool = False
    deleted_at: str = ""
    """The deletionTimestamp, when deleting."""
    applied_hash: str | None = None
    """The module's spec-hash annotation: what it last applied."""
    generation: int = 0
    foreign: tuple[ForeignField, ...] = ()
    """Its spec's fields (but suspend) and labels that another field manager wrote and the
    module does not set (plan/ownership.py): they go."""
    applied: frozenset[Path] | None = None
    """The spec's fields and labels the module's apply holds; None: not known (no
    managedFields read). More than the plan's: someone applied under the module's name."""

    @property
    def guarded(self) -> dict[str, Any]:
        """What `foreign` is read from: the spec and the labels, as in the object."""
        return {"spec": self.spec, "metadata": {"labels": self.labels}}


def live_object(body: Mapping[str, Any]) -> LiveObject:
    meta = body.get("metadata") or {}
    foreign = foreign_fields(meta.get("managedFields"))
    return LiveObject(
        api_version=str(body.get("apiVersion", "")),
        kind=str(body.get("kind", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        owner_uids=tuple(str(o.get("uid")) for o in meta.get("ownerReferences") or []),
        spec=dict(body.get("spec") or {}),
        deleting=bool(meta.get("deletionTimestamp")),
        deleted_at=str(meta.get("deletionTimestamp") or ""),
        applied_hash=(meta.get("annotations") or {}).get(SPEC_HASH),
        generation=_int(meta.get("generation")),
        foreign=present(body, foreign) if foreign else (),
        applied=applied_fields(meta["managedFields"]) if meta.get("managedFields") else None,
    )


def contains(live: Any, desired: Any) -> bool:
    """True when every field of desired is in live with the same value (defaults may add)."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(
            key in live and contains(live[key], value) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(contains(a, b) for a, b in zip(live, desired, strict=True))
        )
    return bool(live == desired) and type(live) is type(desired)


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def missing(live: Any, desired: Any, path: str = "spec") -> list[str]:
    """The dotted paths of desired that live lacks or holds with another value."""
    if not (isinstance(desired, Mapping) and isinstance(live, Mapping)):
        return [] if contains(live, desired) else [path]
    paths: list[str] = []
    for key, value in desired.items():
        here = f"{path}.{key}"
        paths.extend(missing(live[key], value, here) if key in live else [here])
    return paths


ObjectKey = tuple[str, str, str, str]
"""API group, kind, namespace, name."""


def object_key(live: LiveObject) -> ObjectKey:
    return _key(live.api_version, live.kind, live.namespace, live.name)


def up_to_date(
    desired: Mapping[str, Any], live: LiveObject | None, as_applied: bool = False
) -> bool:
    """`as_applied`: the live object is the answer to the module's own apply of its
    applied_hash, and its spec has not changed since (same generation): a planned field it
    lacks was dropped by the API server (a CRD schema without it, as an older Flux has), and
    applying again would not bring it back."""
    if live is None or live.deleting:
        return False
    meta = desired["metadata"]
    uids = tuple(o["uid"] for o in meta.get("ownerReferences") or [])
    # The hash catches fields the plan dropped; contains() catches others changing ours; the
    # applied fields catch an apply under the module's name that added some.
    return (
        live.applied_hash == (meta.get("annotations") or {}).get(SPEC_HASH)
        and contains(live.labels, meta.get("labels") or {})
        and all(uid in live.owner_uids for uid in uids)
        and (as_applied or contains(live.spec, desired.get("spec") or {}))
        and (live.applied is None or live.applied <= planned_fields(desired))
    )


@dataclass(frozen=True, slots=True)
class Actions:
    apply: tuple[Mapping[str, Any], ...]
    delete: tuple[LiveObject, ...]


def _key(api_version: str, kind: str, namespace: str, name: str) -> ObjectKey:
    return (api_version.split("/", maxsplit=1)[0], kind, namespace, name)


def plan_actions(
    desired: Sequence[Mapping[str, Any]],
    live: Sequence[LiveObject],
    as_applied: frozenset[ObjectKey] = frozenset(),
) -> Actions:
    """Apply what is missing or differs; delete our own objects the plan no longer has
    (a HelmRepository left behind after switching to an OCI source, say). `as_applied`: the
    live objects that are still the answer to the module's own apply (see `up_to_date`)."""
    by_key = {_key(o.api_version, o.kind, o.namespace, o.name): o for o in live}
    wanted = set()
    to_apply = []
    for obj in desired:
        meta = obj["metadata"]
        key = _key(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])
        wanted.add(key)
        if not up_to_date(obj, by_key.get(key), key in as_applied):
            to_apply.append(obj)
    stale = (
        tuple(o for key, o in sorted(by_key.items()) if key not in wanted and not o.deleting)
        if desired
        else ()
    )
    return Actions(apply=tuple(to_apply), delete=stale)
