"""The Gpu's status: assembled from the plan and a snapshot of what is observed, or the
error status of a Gpu that is not reconciled. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from kyma_gpu.api.admission import admission_message
from kyma_gpu.api.conditions import ConditionType, ReadyReason
from kyma_gpu.api.models import SINGLETON_NAME, Condition, GpuState, GpuStatus
from kyma_gpu.facts import ObservedNode
from kyma_gpu.facts.echo import MESSAGE_LIMIT, cut
from kyma_gpu.facts.gpu import GpuObject
from kyma_gpu.facts.stack import (
    DaemonSetFacts,
    FluxObjectFacts,
    OperatorStateFacts,
    PullFailure,
)
from kyma_gpu.plan import AllowedSources, Plan
from kyma_gpu.plan.actions import LiveObject, ObjectKey
from kyma_gpu.plan.provision import FluxApi, external_flux, which_flux
from kyma_gpu.status.aggregate import Evidence, StatusHook, stamp
from kyma_gpu.status.aggregate import aggregate as aggregate_status
from kyma_gpu.status.deletion import Uninstall
from kyma_gpu.status.flux_available import with_flux


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The store, flattened, as one decision reads it: the facts of every informer at one
    moment, and what the loop read besides (the extensions' reads, its write-back). `classify`
    reads it; the status narrows it to the `Evidence` of one Gpu and its plan."""

    nodes: tuple[ObservedNode, ...] = ()
    """Every Node: what planning reads of it, and its per-node state."""
    flux: tuple[LiveObject, ...] = ()
    flux_status: tuple[FluxObjectFacts, ...] = ()
    daemonsets: tuple[DaemonSetFacts, ...] = ()
    cluster_policy: OperatorStateFacts | None = None
    gpu_cluster: OperatorStateFacts | None = None
    """The DRA stack's GPUCluster gpu-cluster."""
    observed: Mapping[str, tuple[object, ...] | None] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """The facts of the extensions' list-watches on demand (extensions/base.py `Watch`), by
    resource key, in the order of their keys; None while one is not observed (not listed)."""
    image_pulls: tuple[PullFailure, ...] = ()
    """Pods of the GPU operator's namespace that cannot pull an image."""
    flux_api: FluxApi = field(default_factory=external_flux)
    """The Flux CRDs and APIs (the default: a compatible Flux of the cluster's own)."""
    as_applied: frozenset[ObjectKey] = frozenset()
    """The Flux objects that are still the answer to the module's own apply (the loop's
    write-back remembers them): a planned field they lack was dropped by the API server."""
    allowed_sources: AllowedSources = field(default_factory=AllowedSources)
    """The chart sources a cluster administrator allows (the watched ConfigMap): the plan's
    input, read with the rest of the snapshot."""
    reads: tuple[object, ...] = ()
    """The answers of the extensions' reads in this pass (`Step.read`), one per kind: what no
    informer watches (e.g. the Flux objects of every kind, before the module's own Flux goes).
    Each extension finds its own by type."""


def gpu_status(
    gpu: GpuObject,
    snap: Snapshot,
    plan: Plan,
    now: str,
    error: str = "",
    uninstall: Uninstall | None = None,
    hooks: Sequence[StatusHook] = (),
) -> GpuStatus:
    """The status of a Gpu the module reconciles: the plan and what is observed of it, the
    Gpu's previous conditions (their transition times), which Flux the module relies on, and
    the extensions' status parts (`hooks`)."""
    gpu_nodes = tuple(n for n in snap.nodes if n.is_gpu)
    observed = Evidence(
        helm_release=_find(snap.flux_status, plan.helm_release),
        chart_source=_find(snap.flux_status, plan.source),
        daemonsets=snap.daemonsets,
        cluster_policy=snap.cluster_policy,
        gpu_cluster=snap.gpu_cluster,
        observed=snap.observed,
        image_pulls=snap.image_pulls,
        nodes_without_features=tuple(n.name for n in gpu_nodes if n.facts.nfd_missing),
        gpu_nodes=gpu_nodes,
        driver_upgrades=tuple(
            (n.name, n.driver_upgrade)
            for n in gpu_nodes
            if n.driver_upgrade is not None and not n.facts.preinstalled_driver
        ),
        deleting=gpu.deleting,
        annotations=gpu.annotations,
        uninstall=uninstall or Uninstall(),
        applied=not error,
        apply_error=error,
        driver_version_before=_str_or_none(gpu.status.get("driverVersion")),
    )
    previous = conditions_of(gpu.status)
    status = aggregate_status(plan, observed, gpu.generation, previous, now, hooks)
    return with_flux(status, which_flux(snap.flux_api), previous, now)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _find(
    facts: Sequence[FluxObjectFacts], obj: Mapping[str, Any] | None
) -> FluxObjectFacts | None:
    """The observed status of one planned Flux object."""
    if obj is None:
        return None
    want = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
    return next((f for f in facts if (f.kind, f.namespace, f.name) == want), None)


# -- statuses of a Gpu that is not reconciled --


def conditions_of(status: Mapping[str, Any]) -> list[Condition]:
    out = []
    for raw in status.get("conditions") or []:
        try:
            out.append(Condition.model_validate(raw))
        except ValidationError:
            continue
    return out


def error_status(gpu: GpuObject, reason: ReadyReason, message: str, now: str) -> GpuStatus:
    cond = Condition(
        type=ConditionType.READY, status="False", reason=reason, message=message,
        observed_generation=gpu.generation,
    )  # fmt: skip
    return GpuStatus(
        state=GpuState.ERROR,
        message=cut(message, MESSAGE_LIMIT),
        observed_generation=gpu.generation,
        conditions=stamp([cond], conditions_of(gpu.status), now),
    )


def refused_status(gpu: GpuObject, now: str) -> GpuStatus:
    message = (
        f"Gpu {gpu.name!r} is ignored: the module serves one Gpu named {SINGLETON_NAME!r}; "
        f"delete this one and create {SINGLETON_NAME!r}"
    )
    return error_status(gpu, ReadyReason.NOT_THE_SINGLETON, message, now)


def invalid_status(gpu: GpuObject, err: ValidationError, now: str) -> GpuStatus:
    """In the API server's words: an old Gpu may predate a rule that admission now enforces."""
    return error_status(gpu, ReadyReason.INVALID_SPEC, admission_message(err), now)
