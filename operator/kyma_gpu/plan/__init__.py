"""Planning: (Gpu spec, cluster facts) -> chart values and Flux objects. Pure."""

from kyma_gpu.plan.flux_objects import Owner
from kyma_gpu.plan.origin import Origins, origins_of
from kyma_gpu.plan.plan import Finding, Plan, Preflight, Severity, Verdict, make_plan

__all__ = (
    "Finding", "Origins", "Owner", "Plan", "Preflight", "Severity", "Verdict", "make_plan",
    "origins_of",
)  # fmt: skip
