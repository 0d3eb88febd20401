"""What the benchmark records besides its numbers, so that a write or a wait can be explained
afterwards: digests of the Gpu and HelmRelease versions (a few fields each), what changed from
one version to the next, the writes of a window as rows, and the state of the chart install
(HelmRelease conditions, the operand DaemonSets, how fast their pods were created)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from benchmarks.scale.common import METADATA, ApiError, Obj, Rest
from benchmarks.scale.process import Write

OPERAND_NAMESPACE = "gpu-operator"
"""Where the chart (and the NVIDIA controller's DaemonSets) go: values-rules/defaults.yaml."""
DAEMONSETS = f"/apis/apps/v1/namespaces/{OPERAND_NAMESPACE}/daemonsets"
PODS = f"/api/v1/namespaces/{OPERAND_NAMESPACE}/pods"
MESSAGE = 160
"""Characters of a condition message kept in a digest."""


def _conditions(obj: Obj) -> dict[str, str]:
    out = {}
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict):
            out[f"cond.{cond.get('type')}"] = f"{cond.get('status')}/{cond.get('reason')}"
    return out


def gpu_digest(obj: Obj | None) -> dict[str, str] | None:
    """The Gpu status in the fields a status write changes: state, observedGeneration, each
    condition's status/reason, the ready nodes and each component's ready/desired."""
    if obj is None:
        return None
    status = obj.get("status") or {}
    digest = {
        "state": str(status.get("state")),
        "observedGeneration": str(status.get("observedGeneration")),
        "readyNodes": str(status.get("readyNodes")),
        "message": str(status.get("message", ""))[:MESSAGE],
        **_conditions(obj),
    }
    for comp in status.get("components") or []:
        if isinstance(comp, dict):
            digest[f"ds.{comp.get('name')}"] = f"{comp.get('ready')}/{comp.get('desired')}"
    return digest


def release_digest(obj: Obj | None) -> dict[str, str] | None:
    """The HelmRelease: generation, observedGeneration, its conditions, the Ready message."""
    if obj is None:
        return None
    status = obj.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    ready: Obj = next((c for c in conditions if c.get("type") == "Ready"), {})
    return {
        "generation": str((obj.get("metadata") or {}).get("generation")),
        "observedGeneration": str(status.get("observedGeneration")),
        "readyMessage": str(ready.get("message", ""))[:MESSAGE],
        **_conditions(obj),
    }


def _diff(old: object, new: object) -> dict[str, Any]:
    if not isinstance(old, dict) or not isinstance(new, dict):
        return {"now": new}
    keys = sorted(old.keys() | new.keys())
    return {key: new.get(key) for key in keys if old.get(key) != new.get(key)}


def changes(before: object, seen: Sequence[tuple[float, object]], start: float) -> list[list[Any]]:
    """[ms since start, {field: new value}] for each version that differs from the one before
    (the first from ``before``); a re-list that repeats a version is left out."""
    out: list[list[Any]] = []
    last = before
    for at, digest in seen:
        if digest == last:
            continue
        out.append([round((at - start) * 1000), _diff(last, digest)])
        last = digest
    return out


def write_rows(writes: Sequence[Write], start: float) -> list[list[Any]]:
    """[ms since start, "verb resource/sub (agent)", name] per write."""
    return [[round((w.at - start) * 1000), w.kind, w.name] for w in writes]


def own_writes(writes: Sequence[Write]) -> int:
    """Of a spec change's writes, the manager's answer to the change itself: its HelmRelease
    writes and the first status write after them (the one that reports the new
    observedGeneration). The others mirror what Flux and the NVIDIA controller then do
    (status writes, Events), or belong to the change before."""
    release = [w for w in writes if w.resource == "helmreleases"]
    if not release:
        return 0
    status = [
        w
        for w in writes
        if (w.resource, w.subresource) == ("gpus", "status") and w.at >= release[0].at
    ]
    return len(release) + min(1, len(status))


def _daemonset(item: Obj) -> str:
    status = item.get("status") or {}
    generation = (item.get("metadata") or {}).get("generation")
    fields = ("desiredNumberScheduled", "numberReady", "updatedNumberScheduled")
    desired, ready, updated = (int(status.get(key) or 0) for key in fields)
    current = status.get("observedGeneration") == generation
    return f"desired {desired} ready {ready} updated {updated}{'' if current else ' (stale)'}"


def daemonsets(rest: Rest) -> dict[str, str]:
    """Each DaemonSet of the operand namespace: desired, ready and updated pods."""
    try:
        items = rest.get(DAEMONSETS).get("items") or []
    except ApiError as error:
        return {"error": str(error)}
    return {str(item["metadata"]["name"]): _daemonset(item) for item in items}


def steady(sets: dict[str, str]) -> bool:
    """Every DaemonSet current and all its pods ready and updated (none: not steady)."""
    if not sets or "error" in sets:
        return False
    for text in sets.values():
        numbers = [int(word) for word in text.split() if word.isdigit()]
        if "stale" in text or len(set(numbers)) != 1:
            return False
    return True


def pod_creation(rest: Rest) -> dict[str, Any]:
    """The operand namespace's pods: how many, and at what rate they were created (the
    DaemonSet controller's pace)."""
    try:
        items = list(rest.list_pages(PODS, {}, METADATA))
    except ApiError as error:
        return {"error": str(error)}
    stamps = sorted(
        datetime.fromisoformat(str(item["metadata"]["creationTimestamp"]).replace("Z", "+00:00"))
        for item in items
    )
    if len(stamps) < 2:
        return {"pods": len(stamps)}
    span = (stamps[-1] - stamps[0]).total_seconds()
    return {
        "pods": len(stamps),
        "created_over_s": round(span, 1),
        "per_s": round(len(stamps) / span, 1) if span > 0 else None,
    }


def install_report(rest: Rest, release: Obj | None) -> dict[str, Any]:
    """Where the chart install stands: the HelmRelease's conditions (with messages), the
    operand DaemonSets and the creation rate of their pods."""
    conditions = {
        str(c.get("type")): f"{c.get('status')}/{c.get('reason')}: {c.get('message', '')}"
        for c in ((release or {}).get("status") or {}).get("conditions") or []
    }
    return {
        "helmrelease": conditions,
        "daemonsets": daemonsets(rest),
        "pods": pod_creation(rest),
    }
