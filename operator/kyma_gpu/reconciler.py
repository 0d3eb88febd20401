"""One reconcile: indexes in, the pure core in the middle, the adapter's writes out.

Kept apart from the kopf decorators (handlers.py) so that it reads top to bottom:
facts -> plan -> actions -> apply -> status. It keeps no Kubernetes bodies, only the
compact records the indexes hold.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cachetools
from pydantic import ValidationError

from kyma_gpu.adapter import AdapterError, Conflict, KubeAdapter, ObjectRef
from kyma_gpu.api.models import SINGLETON_NAME, Condition, GpuSpec, GpuState, GpuStatus
from kyma_gpu.facts import ClusterFacts, NodeFacts, cluster_facts
from kyma_gpu.plan import Owner, Plan, make_plan
from kyma_gpu.plan.actions import LiveObject, plan_actions
from kyma_gpu.plan.flux import SPEC_HASH
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status import (
    ClusterPolicyFacts,
    DaemonSetFacts,
    HelmReleaseFacts,
    Observed,
    aggregate,
)
from kyma_gpu.status.aggregate import stamp

log = logging.getLogger(__name__)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the indexes hold right now, flattened."""

    nodes: tuple[NodeFacts, ...] = ()
    flux: tuple[LiveObject, ...] = ()
    flux_status: tuple[HelmReleaseFacts, ...] = ()
    daemonsets: tuple[DaemonSetFacts, ...] = ()
    cluster_policy: ClusterPolicyFacts | None = None
    gpu_workloads: tuple[str, ...] = ()


@dataclass
class Reconciler:
    """Built once at startup and kept in kopf's memo."""

    catalog: Catalog
    adapter: KubeAdapter
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    seen: dict[tuple[str, str], Any] = field(default_factory=dict)
    plans: cachetools.LRUCache[tuple[str, ClusterFacts, str], Plan] = field(
        default_factory=lambda: cachetools.LRUCache(maxsize=16)
    )
    last_status: dict[str, dict[str, Any]] = field(default_factory=dict)
    recent: dict[tuple[str, str, str], tuple[str, float]] = field(default_factory=dict)
    """What was applied lately (object -> spec hash, when): the watch may lag behind a write
    for a moment, and the same object must not be applied again meanwhile."""
    settle_seconds: float = 15.0
    awaiting_watch: bool = False
    """True when a pass skipped an apply that the watch has not confirmed yet."""
    deleting: bool = False

    # -- change tracking: only a real change of compact facts wakes the reconcile loop --

    def observe(self, kind: str, key: str, facts: Any) -> bool:
        """Record the latest facts of one object (None when gone); poke when they changed."""
        slot = (kind, key)
        if self.seen.get(slot) == facts:
            return False
        if facts is None:
            self.seen.pop(slot, None)
        else:
            self.seen[slot] = facts
        self.changed.set()
        return True

    def poke(self) -> None:
        self.changed.set()

    async def wait_for_change(self, timeout: float | None = None) -> None:
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except TimeoutError:
            return
        self.changed.clear()

    # -- the pure core, memoized --

    def plan(self, spec: GpuSpec, facts: ClusterFacts, owner: Owner) -> Plan:
        key = (spec.model_dump_json(), facts, owner.uid)
        cached = self.plans.get(key)
        if cached is None:
            cached = make_plan(spec, facts, self.catalog, owner)
            self.plans[key] = cached
        return cached

    # -- one pass --

    async def reconcile(
        self, body: Mapping[str, Any], snap: Snapshot, *, deleting: bool = False
    ) -> GpuStatus:
        """Plan, write what differs, and write the status if it changed. Returns the status."""
        meta = body.get("metadata") or {}
        name = str(meta.get("name"))
        deleting = deleting or bool(meta.get("deletionTimestamp"))
        generation = meta.get("generation")
        current_status = body.get("status") or {}
        previous = _conditions(current_status)
        if name != SINGLETON_NAME:
            status = _refused(name, generation, previous)
            await self.write_status(name, current_status, status)
            return status
        try:
            spec = GpuSpec.model_validate(body.get("spec") or {})
        except ValidationError as err:
            status = _invalid(err, generation, previous)
            await self.write_status(name, current_status, status)
            return status

        facts = cluster_facts(snap.nodes)
        plan = self.plan(spec, facts, Owner(uid=str(meta.get("uid", "")), name=name))
        applied, apply_error = True, ""
        if not deleting:
            actions = plan_actions(plan.objects, snap.flux)
            self.awaiting_watch = False
            try:
                for obj in actions.apply:
                    if self._applied_lately(obj):
                        self.awaiting_watch = True
                        continue
                    log.info("applying %s", ObjectRef.of(obj))
                    await self.adapter.apply(obj)
                    self._remember(obj)
                for stale in actions.delete:
                    ref = ObjectRef(stale.api_version, stale.kind, stale.namespace, stale.name)
                    log.info("deleting %s: no longer planned", ref)
                    await self.adapter.delete(ref)
            except (AdapterError, Conflict) as err:
                applied, apply_error = False, str(err)
        observed = Observed(
            helm_release=_find(snap.flux_status, plan.helm_release),
            source=_find(snap.flux_status, plan.source),
            daemonsets=snap.daemonsets,
            cluster_policy=snap.cluster_policy,
            gpu_workloads=snap.gpu_workloads,
            deleting=deleting,
            applied=applied,
            apply_error=apply_error,
        )
        status = aggregate(plan, observed, generation, previous, now())
        await self.write_status(name, current_status, status)
        return status

    def _key(self, obj: Mapping[str, Any]) -> tuple[str, str, str]:
        meta = obj["metadata"]
        return (str(obj["kind"]), str(meta.get("namespace", "")), str(meta["name"]))

    def _hash(self, obj: Mapping[str, Any]) -> str:
        return str((obj["metadata"].get("annotations") or {}).get(SPEC_HASH, ""))

    def _applied_lately(self, obj: Mapping[str, Any]) -> bool:
        seen = self.recent.get(self._key(obj))
        return (
            seen is not None
            and seen[0] == self._hash(obj)
            and time.monotonic() - seen[1] < self.settle_seconds
        )

    def _remember(self, obj: Mapping[str, Any]) -> None:
        self.recent[self._key(obj)] = (self._hash(obj), time.monotonic())

    async def write_status(self, name: str, current: Mapping[str, Any], status: GpuStatus) -> bool:
        """Write only when the status differs from both the live one and the last written."""
        wanted = json.loads(status.model_dump_json(by_alias=True, exclude_none=True))
        if wanted in (self.last_status.get(name), _normalized(current)):
            return False
        try:
            await self.adapter.apply_status(name, wanted)
        except Conflict:
            self.poke()
            raise
        self.last_status[name] = wanted
        return True

    async def remove_flux_objects(self, flux: Iterable[LiveObject]) -> int:
        """Delete our Flux objects (HelmRelease first, so Flux uninstalls with its source)."""
        pending = 0
        for obj in sorted(flux, key=lambda o: o.kind != "HelmRelease"):
            pending += 1
            if not obj.deleting:
                await self.adapter.delete(
                    ObjectRef(obj.api_version, obj.kind, obj.namespace, obj.name)
                )
        return pending


def needs_retry(status: GpuStatus) -> bool:
    """A failed write is retried on a timer: no watch event would bring it back."""
    return any(c.reason == "ApplyFailed" for c in status.conditions)


def _find(
    facts: tuple[HelmReleaseFacts, ...], obj: Mapping[str, Any] | None
) -> HelmReleaseFacts | None:
    """The observed status of one planned Flux object."""
    if obj is None:
        return None
    meta = obj["metadata"]
    return next(
        (
            f
            for f in facts
            if (f.kind, f.namespace, f.name) == (obj["kind"], meta["namespace"], meta["name"])
        ),
        None,
    )


def _normalized(status: Mapping[str, Any]) -> dict[str, Any]:
    try:
        parsed = GpuStatus.model_validate(dict(status))
    except ValidationError:
        return {}
    result: dict[str, Any] = json.loads(parsed.model_dump_json(by_alias=True, exclude_none=True))
    return result


def _conditions(status: Mapping[str, Any]) -> list[Condition]:
    out = []
    for raw in status.get("conditions") or []:
        try:
            out.append(Condition.model_validate(raw))
        except ValidationError:
            continue
    return out


def _error_status(
    reason: str, message: str, generation: Any, previous: list[Condition]
) -> GpuStatus:
    cond = Condition(
        type="Ready", status="False", reason=reason, message=message, observed_generation=generation
    )
    return GpuStatus(
        state=GpuState.ERROR,
        message=message,
        observed_generation=generation,
        conditions=stamp([cond], previous, now()),
    )


def _refused(name: str, generation: Any, previous: list[Condition]) -> GpuStatus:
    return _error_status(
        "NotTheSingleton",
        f"Gpu {name!r} is ignored: the module serves one Gpu named {SINGLETON_NAME!r}; "
        f"delete this one and create {SINGLETON_NAME!r}",
        generation,
        previous,
    )


def _invalid(err: ValidationError, generation: Any, previous: list[Condition]) -> GpuStatus:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    return _error_status("InvalidSpec", f"spec.{loc}: {first['msg']}", generation, previous)
