"""The Gpu API: pydantic models of spec and status, and the CRD generated from them."""

from kyma_gpu.api.models import (
    API_GROUP,
    API_VERSION,
    KIND,
    SINGLETON_NAME,
    ComponentsSpec,
    ComponentStatus,
    Condition,
    ConditionStatus,
    DriverMode,
    DriverSpec,
    Gpu,
    GpuNodeStatus,
    GpuSpec,
    GpuState,
    GpuStatus,
    SourceSpec,
)

__all__ = (
    "API_GROUP",
    "API_VERSION",
    "KIND",
    "SINGLETON_NAME",
    "ComponentStatus",
    "ComponentsSpec",
    "Condition",
    "ConditionStatus",
    "DriverMode",
    "DriverSpec",
    "Gpu",
    "GpuNodeStatus",
    "GpuSpec",
    "GpuState",
    "GpuStatus",
    "SourceSpec",
)
