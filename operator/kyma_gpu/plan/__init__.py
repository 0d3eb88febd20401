"""Planning: (Gpu spec, cluster facts) -> chart values and Flux objects. Pure."""

from kyma_gpu.plan.flux import Owner
from kyma_gpu.plan.plan import Finding, Plan, Preflight, Severity, Verdict, make_plan

__all__ = ["Finding", "Owner", "Plan", "Preflight", "Severity", "Verdict", "make_plan"]
