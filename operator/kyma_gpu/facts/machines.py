"""The machine-type registry: the GPUs of each provider machine type.

The data lives in values-rules/machine-types.yaml, one entry per instance family with its source
(validated by rules/data_models.py); this module only gives it a type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class MachineType:
    """One machine type's GPUs."""

    gpu: str
    count: int
    unofficial: bool = False
    """Facts from third-party sources: likely, not certain."""
    partition: str | None = None
    """A fraction of one GPU (Azure NVadsA10 v5, AWS g6f), e.g. "1/6"."""
    compute_capability: str | None = None
    """CUDA compute capability of the GPU ("8.9"): MPS serves 48 clients from 7.5 on, else 16."""
    arch: str = "amd64"
    """The host CPU: amd64, or arm64 (AWS Graviton, NVIDIA Grace)."""
    vgpu_guest_driver: bool = False
    """The VM sees a vGPU: it needs NVIDIA's licensed vGPU guest (GRID) driver, which neither
    the installer nor NVIDIA's driver container installs."""
    last_driver_branch: str | None = None
    """The newest driver branch that still supports the GPU (580 for Maxwell, Pascal, Volta)."""


@dataclass(frozen=True, slots=True)
class MachineTypeRegistry:
    """provider -> machine type -> MachineType."""

    types: Mapping[str, Mapping[str, MachineType]] = field(default_factory=dict)

    def lookup(self, provider: str, machine_type: str | None) -> MachineType | None:
        if not machine_type:
            return None
        return self.types.get(provider, {}).get(machine_type)
