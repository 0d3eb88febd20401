"""The marks the manager may leave on a Node: GPU health remediation (issue 33, opt-in).

With spec.health.remediation MarkNodes the manager sets the Node condition NODE_CONDITION
(status True, the HealthReason as reason) on a node whose GPUs are unhealthy, and False when
they recover; with MarkAndCordon it also cordons the node (spec.unschedulable) and records
that it did with CORDON_ANNOTATION, and it uncordons only nodes carrying that annotation.

These names are shared by the code that writes the marks and by the ValidatingAdmissionPolicy
kyma-gpu-manager-nodes (plan/manager_policy.py), which holds the manager's account to exactly
these writes: a change of one name here changes both, never one alone.

A node has GPU evidence (the only nodes the manager may mark unhealthy or cordon) when one of
GPU_EVIDENCE_LABELS is "true" or its status.capacity has GPU_RESOURCE.
"""

from __future__ import annotations

NODE_CONDITION = "KymaGpuUnhealthy"
"""The Node condition type the manager writes (True: its GPUs are unhealthy)."""
CORDON_ANNOTATION = "gpu.kyma-project.io/cordoned"
"""Set (value NODE_CONDITION) when the manager cordoned the node; removed when it uncordons."""
CORDON_VALUE = NODE_CONDITION
"""The value of CORDON_ANNOTATION the manager writes."""
GPU_EVIDENCE_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "nvidia.com/gpu.present",
)
"""Node labels that, "true", say the node has an NVIDIA GPU (NFD's PCI vendor label, and the
NVIDIA operator's / GPU feature discovery's)."""
GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource whose presence in status.capacity is GPU evidence too."""
