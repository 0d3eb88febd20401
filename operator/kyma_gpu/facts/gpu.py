"""The Gpu's compact facts: what the reconcile machine reads of a Gpu object. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kyma_gpu.api.models import API_GROUP
from kyma_gpu.api.values import managed_values


@dataclass(frozen=True, slots=True)
class GpuObject:
    """The compact facts of a Gpu: what the machine reads of it."""

    name: str
    uid: str
    generation: int | None
    resource_version: str
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    deleting: bool
    finalizers: tuple[str, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Its annotations of the module's (`gpu.kyma-project.io/...`): what the extensions read
    of them."""
    managed_values: tuple[Any, ...] = ()
    """The spec.values fields its managers set, as managedFields record them: those the
    allowlist does not hold, the API server pruned after the list narrowed (the machine holds
    them against the Catalog's allowlist: api/values.py, unlisted_values)."""


def gpu_object(body: Mapping[str, Any]) -> GpuObject:
    meta = body.get("metadata") or {}
    generation = meta.get("generation")
    return GpuObject(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        generation=generation if isinstance(generation, int) else None,
        resource_version=str(meta.get("resourceVersion", "")),
        spec=dict(body.get("spec") or {}),
        status=dict(body.get("status") or {}),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
        annotations=_ours(meta.get("annotations") or {}),
        managed_values=managed_values(meta.get("managedFields")),
    )


def _ours(annotations: Mapping[str, Any]) -> dict[str, str]:
    """The module's annotations (API_GROUP's prefix): others (kubectl's last applied
    configuration, ...) would only wake the loop."""
    return {str(k): str(v) for k, v in annotations.items() if str(k).startswith(f"{API_GROUP}/")}
