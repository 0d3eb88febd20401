"""The Gpu API: pydantic models of spec and status (api/models.py), and what they are built of."""

from kyma_gpu.api.models import GpuSpec, GpuState

__all__ = ("GpuSpec", "GpuState")
