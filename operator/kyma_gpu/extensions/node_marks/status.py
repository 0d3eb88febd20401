"""GPU health's part of the status: the condition GpusHealthy (after the core's conditions;
it never changes Ready) and the fields gpus, gpusHealthy, gpuTotal, pools, unhealthyNodes and
unhealthyNodeCount, judged from the GPU nodes' Node objects (health.py). Pure."""

from __future__ import annotations

from kyma_gpu.extensions.node_marks.health import (
    health_condition,
    plan_health,
    pools_shown,
    unhealthy_nodes,
)
from kyma_gpu.plan import Plan
from kyma_gpu.status.aggregate import Evidence, StatusPart


def health(plan: Plan, observed: Evidence, generation: int | None) -> StatusPart:
    judged = plan_health(plan, observed.gpu_nodes)
    return StatusPart(
        conditions=(health_condition(judged, generation),),
        fields={
            "gpus": f"{judged.healthy_gpus}/{judged.total_gpus}",
            "gpus_healthy": judged.healthy_gpus,
            "gpu_total": judged.total_gpus,
            "pools": pools_shown(judged),
            "unhealthy_nodes": unhealthy_nodes(judged),
            "unhealthy_node_count": len(judged.unhealthy),
        },
    )
