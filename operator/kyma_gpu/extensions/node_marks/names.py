"""The marks the manager may leave on a Node for GPU health (issue 33, opt-in): their names.

With spec.health.remediation MarkNodes the manager sets the Node condition NODE_CONDITION
(status True, the HealthReason as reason: conditions.py) on a node whose GPUs are unhealthy,
and False when they recover; with MarkAndCordon it also cordons the node (spec.unschedulable)
and records that it did with CORDON_ANNOTATION, and it uncordons only nodes carrying that
annotation.

These names are shared by the code that writes the marks and by the ValidatingAdmissionPolicy
kyma-gpu-manager-nodes (kyma_gpu_tools/manager_policy.py), which holds the manager's account to
exactly these writes: a change of one name here changes both, never one alone.

The manager marks or cordons a node only on facts no tenant writes (issue 43): the kubelet
reports NVIDIA GPUs on it (facts/node.py GPU_RESOURCE, or one of GPU_RESOURCE_PREFIXES, above
zero in status.capacity or status.allocatable: only a device plugin, through the kubelet, puts
them there), its machine type (node.kubernetes.io/instance-type, which the kubelet and the cloud
provider set) is a GPU machine type of the registry (values-rules/machine-types.yaml), or it
already carries the mark True (it had one of those facts when it was marked, "has reported").
Labels of NFD or GPU feature discovery (feature.node.kubernetes.io/pci-10de.present,
nvidia.com/gpu.present, nvidia.com/gpu-driver-upgrade-state, ...) never suffice: NFD rules and
extraLabelNs publish them on any node, and a node may label itself under nvidia.com/. They still
count for detecting GPU nodes and planning the install (facts/node.py), never for a mark.
"""

from __future__ import annotations

from dataclasses import dataclass

NODE_CONDITION = "KymaGpuUnhealthy"
"""The Node condition type the manager writes (True: its GPUs are unhealthy)."""
CORDON_ANNOTATION = "gpu.kyma-project.io/cordoned"
"""Set (value NODE_CONDITION) when the manager cordoned the node; removed when it uncordons."""
CORDON_VALUE = NODE_CONDITION
"""The value of CORDON_ANNOTATION the manager writes."""
UNTRUSTED_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "nvidia.com/gpu.present",
)
"""Node labels that say "an NVIDIA GPU is here" but that NFD rules (and a node itself) can set
on any node: GPU evidence for detection, never for a mark or a cordon."""


@dataclass(frozen=True, slots=True)
class NodeWrite:
    """What the manager writes to one Node."""

    name: str
    unhealthy: bool | None = None
    """True: set KymaGpuUnhealthy True with `reason`; False: set it False; None: leave it."""
    reason: str = ""
    message: str = ""
    cordon: bool | None = None
    """True: cordon and annotate; False: drop the annotation and uncordon; None: leave it."""
    new_status: bool = True
    """The condition's status changes (not only its reason): a new lastTransitionTime."""
