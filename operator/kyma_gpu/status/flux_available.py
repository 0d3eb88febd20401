"""The FluxAvailable condition: which Flux the module relies on, and whether it answers. Pure.

Informative next to the others: Ready summarizes the release, the driver and the components,
which cannot be ready without Flux anyway. An incompatible Flux is an Error of its own
(reconcile/machine.py), since nothing is written then.
"""

from __future__ import annotations

from kyma_gpu.api.conditions import FluxReason
from kyma_gpu.api.models import Condition, GpuStatus
from kyma_gpu.plan.provision import FluxMode, WhichFlux
from kyma_gpu.status.aggregate import ConditionType, stamp


def flux_condition(flux: WhichFlux, generation: int | None) -> Condition:
    if flux.mode is FluxMode.INCOMPATIBLE:
        status, reason = "False", FluxReason.INCOMPATIBLE
    elif not flux.served:
        status, reason = (
            "Unknown",
            (FluxReason.UNKNOWN if flux.mode is FluxMode.UNKNOWN else FluxReason.INSTALLING),
        )
    elif flux.mode is FluxMode.PROVIDED:
        status, reason = "True", FluxReason.MODULE_FLUX
    else:
        status, reason = "True", FluxReason.CLUSTER_FLUX
    return Condition(
        type=ConditionType.FLUX_AVAILABLE, status=status, reason=reason, message=flux.message,
        observed_generation=generation,
    )  # fmt: skip


def with_flux(status: GpuStatus, flux: WhichFlux, previous: list[Condition], now: str) -> GpuStatus:
    """The status with the FluxAvailable condition added after the others."""
    cond = stamp([flux_condition(flux, status.observed_generation)], previous, now)
    others = [c for c in status.conditions if c.type != ConditionType.FLUX_AVAILABLE]
    return status.model_copy(update={"conditions": [*others, *cond]})
