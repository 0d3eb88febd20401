"""Where node-feature-discovery's worker runs: only where a GPU can be. Pure.

NVIDIA's chart runs NFD's worker on every node. On a fleet of 20,000 nodes with 2,000 GPU nodes
that is 18,000 pods that can never find a GPU: their memory on every CPU node, their API
traffic, and the install's wait. The module's default (spec.components.nodeFeatureDiscovery:
GpuNodes) gives the worker a node affinity with one term per way a node can hold a GPU; the
terms are ORed:

1. a GPU machine type of the registry (values-rules/machine-types.yaml), by the instance-type
   label or its beta name: every node of a GPU worker pool, a new pool included;
2. NFD's own NVIDIA PCI label: a node the worker found a GPU on keeps its worker;
3. the opt-in label gpu.kyma-project.io/gpu=true: a GPU the registry does not know;
4. no machine type label at all (kind, k3d, bare metal): nothing says it is CPU-only.

So only the CPU nodes of known machine types go without a worker. The affinity depends on the
registry alone, not on the fleet: a node joining, a new GPU pool, or a pool that gains GPUs
changes no value of the HelmRelease, and costs no Helm upgrade.
"""

from __future__ import annotations

from typing import Any

from kyma_gpu.facts.machines import MachineTypeRegistry
from kyma_gpu.facts.node import (
    LABEL_INSTANCE_TYPE,
    LABEL_INSTANCE_TYPE_BETA,
    LABEL_NFD_NVIDIA_PCI,
    LABEL_OPT_IN,
)


def gpu_machine_types(registry: MachineTypeRegistry) -> list[str]:
    """Every machine type of the registry, of every provider, sorted."""
    return sorted({name for types in registry.types.values() for name in types})


def worker_affinity(registry: MachineTypeRegistry) -> dict[str, Any]:
    """The NFD worker's `affinity`: the nodes where a GPU can be (see the module docstring)."""
    types = gpu_machine_types(registry)
    terms = [
        _term((LABEL_INSTANCE_TYPE, "In", types)),
        _term((LABEL_INSTANCE_TYPE_BETA, "In", types)),
        _term((LABEL_NFD_NVIDIA_PCI, "In", ["true"])),
        _term((LABEL_OPT_IN, "In", ["true"])),
        _term(
            (LABEL_INSTANCE_TYPE, "DoesNotExist", None),
            (LABEL_INSTANCE_TYPE_BETA, "DoesNotExist", None),
        ),
    ]
    required = {"nodeSelectorTerms": terms}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def _term(*expressions: tuple[str, str, list[str] | None]) -> dict[str, Any]:
    """A nodeSelectorTerm: its expressions are ANDed."""
    return {
        "matchExpressions": [
            {"key": key, "operator": op, **({"values": values} if values is not None else {})}
            for key, op, values in expressions
        ]
    }
