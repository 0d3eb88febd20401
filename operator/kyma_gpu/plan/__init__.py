"""Planning: (Gpu spec, cluster facts) -> chart values and Flux objects. Pure."""

from kyma_gpu.plan.allowed import AllowedSources, allowed_sources_of
from kyma_gpu.plan.flux_objects import Owner
from kyma_gpu.plan.plan import Finding, Plan, Preflight, Severity, Verdict, make_plan

__all__ = (
    "AllowedSources",
    "Finding",
    "Owner",
    "Plan",
    "Preflight",
    "Severity",
    "Verdict",
    "allowed_sources_of",
    "make_plan",
)  # fmt: skip
