"""The machine-type registry: GPU model and count per provider machine type.

The data lives in values-rules/machine-types.yaml; this module only gives it a type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MachineTypeRegistry:
        """Build from the YAML document; raises ValueError naming the bad entry."""
        types: dict[str, dict[str, MachineType]] = {}
        for provider, entries in data.items():
            if not isinstance(entries, Mapping):
                raise ValueError(f"machine types: provider {provider!r} must map types to GPUs")
            for name, entry in entries.items():
                if not isinstance(entry, Mapping) or "gpu" not in entry or "count" not in entry:
                    raise ValueError(
                        f"machine types: {provider}/{name} needs 'gpu' and 'count', got {entry!r}"
                    )
                count = entry["count"]
                if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    raise ValueError(
                        f"machine types: {provider}/{name} count must be a positive integer,"
                        f" got {count!r}"
                    )
                types.setdefault(str(provider), {})[str(name)] = MachineType(
                    gpu=str(entry["gpu"]),
                    count=count,
                    unofficial=bool(entry.get("unofficial", False)),
                    partition=entry.get("partition"),
                )
        return cls(types=types)
