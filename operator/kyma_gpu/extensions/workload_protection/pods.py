"""Users' GPU pods, as workload protection observes them while a deletion waits: which pods
count, and the compact facts kept of each ("namespace/name"). Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from kyma_gpu.facts.node import is_gpu_resource

PODS = "pods"
"""The resource key of users' GPU pods: in the store, and in `Snapshot.observed`."""


def requests_gpu(body: Mapping[str, Any]) -> bool:
    """A pod that still runs (not Succeeded/Failed) and asks for nvidia.com/gpu."""
    phase = (body.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and asks_for_gpu(body)


def is_gpu_workload(body: Mapping[str, Any], stack_namespaces: Collection[str]) -> bool:
    """A user's pod that a deletion must wait for: it asks for nvidia.com/gpu or claims a
    device through DRA, still runs, is not already terminating, and lives outside the
    namespaces of the GPU stack itself (the operator's validator pods ask for a GPU too, and
    stay Pending on a broken stack).

    A DRA claim counts whatever its device: telling a GPU claim from another needs the
    ResourceClaim's allocation, which the manager does not read. Waiting for a pod that holds
    some other device is the safe mistake; the skip annotation ends it."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp") or meta.get("namespace") in stack_namespaces:
        return False
    phase = (body.get("status") or {}).get("phase")
    claims = bool((body.get("spec") or {}).get("resourceClaims"))
    return requests_gpu(body) or (claims and phase not in ("Succeeded", "Failed"))


def asks_for_gpu(body: Mapping[str, Any]) -> bool:
    """A pod whose containers ask for a GPU resource (is_gpu_resource), whatever its phase."""
    spec = body.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            asked = resources.get(section) or {}
            if any(is_gpu_resource(str(k)) and v not in (None, "0", 0) for k, v in asked.items()):
                return True
    return False


def gpu_workload(body: Mapping[str, Any], stack_namespaces: Collection[str]) -> str | None:
    """The facts kept of a user's GPU pod: "namespace/name"; None for any other pod."""
    meta = body.get("metadata") or {}
    wanted = is_gpu_workload(body, stack_namespaces)
    return f"{meta.get('namespace')}/{meta.get('name')}" if wanted else None


def pod_selector(stack_namespaces: Collection[str]) -> str:
    """The field selector: running pods outside the stack's namespaces (the server filters)."""
    return ",".join(
        ["status.phase!=Succeeded", "status.phase!=Failed"]
        + [f"metadata.namespace!={ns}" for ns in stack_namespaces]
    )
