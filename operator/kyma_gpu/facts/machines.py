"""The machine-type registry: GPU model and count per provider machine type.

The data lives in values-rules/machine-types.yaml (validated by rules/models.py); this module
only gives it a type.
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
    """A fraction of one GPU (Azure NV A10 v5), e.g. "1/6"."""


@dataclass(frozen=True, slots=True)
class MachineTypeRegistry:
    """provider -> machine type -> MachineType."""

    types: Mapping[str, Mapping[str, MachineType]] = field(default_factory=dict)

    def lookup(self, provider: str, machine_type: str | None) -> MachineType | None:
        if not machine_type:
            return None
        return self.types.get(provider, {}).get(machine_type)
