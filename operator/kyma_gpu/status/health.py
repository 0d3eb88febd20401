"""GPU health: what the Node objects already say of each GPU node's GPUs, judged. Pure.

Signals, all from the Node body the manager watches anyway (facts/node.py GpuDevices), so no
request and no watch is added and a heartbeat changes nothing:

- the kubelet's nvidia.com/gpu capacity against what the machine type has (GpusMissing);
- allocatable against capacity: the device plugin withdraws unhealthy GPUs so
  (GpusUnhealthy);
- GPU feature discovery's count and product labels against the registry (GpusMissing,
  WrongGpuModel);
- the NVIDIA upgrade controller's upgrade-failed label (DriverFailed).

Each GPU node gets a NodeHealth; `gpu_health` sums them per worker pool. Health never changes
Ready: Ready says the module installed the stack, GpusHealthy what the hardware does.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from kyma_gpu.api.conditions import NODE_FINDINGS, ConditionType, HealthReason
from kyma_gpu.api.models import (
    STATUS_POOLS_LIMIT,
    STATUS_UNHEALTHY_LIMIT,
    Condition,
    PoolHealth,
    UnhealthyNode,
)
from kyma_gpu.facts.node import DriverUpgradeState, GpuDevices, NodeFacts
from kyma_gpu.plan.pools import WorkerPool

NAMES_SHOWN = 5
"""The GpusHealthy message names this many unhealthy nodes; status.unhealthyNodes has more."""


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """One GPU node's GPUs, judged."""

    name: str
    pool: str
    total: int
    """GPUs it must have (its machine type's), else the most any source saw."""
    healthy: int
    """GPUs pods can use now."""
    reason: HealthReason | None = None
    """Its worst finding (NODE_FINDINGS); None: none."""
    message: str = ""
    advertised: bool = True
    """The kubelet reports GPU resources for it (a device plugin registered)."""
    marked: bool = False
    """It carries the manager's condition KymaGpuUnhealthy=True."""


@dataclass(frozen=True, slots=True)
class Health:
    """The GPU health of the fleet; the sums are taken once (`of`), a status reads them often."""

    nodes: tuple[NodeHealth, ...] = ()
    """Every GPU node, by pool and name."""
    pools: tuple[PoolHealth, ...] = ()
    unhealthy: tuple[NodeHealth, ...] = ()
    """The nodes with a finding."""
    unadvertised: tuple[NodeHealth, ...] = ()
    """The nodes that advertise no GPUs yet."""
    healthy_gpus: int = 0
    total_gpus: int = 0

    @classmethod
    def of(cls, nodes: tuple[NodeHealth, ...], pools: tuple[PoolHealth, ...]) -> Health:
        return cls(
            nodes, pools,
            unhealthy=tuple(n for n in nodes if n.reason is not None),
            unadvertised=tuple(n for n in nodes if not n.advertised),
            healthy_gpus=sum(n.healthy for n in nodes),
            total_gpus=sum(n.total for n in nodes),
        )  # fmt: skip


def _tokens(model: str) -> set[str]:
    return {t for t in re.split(r"[^A-Z0-9]+", model.upper()) if t}


def same_model(registry: str, product: str) -> bool:
    """Does GFD's product name (`NVIDIA-A100-SXM4-80GB`, `Tesla-T4-SHARED`) name the registry's
    model (`A100 80GB`, `T4`)? Every word of the registry's model is a word of the product."""
    return _tokens(registry) <= _tokens(product)


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the sources say of one node's GPUs, in whole GPUs."""

    total: int
    present: int | None
    """GPUs seen by the kubelet or GFD, the lower; None when neither can be compared."""
    withdrawn: int
    """GPUs the device plugin withdrew (whole GPUs, rounded up)."""


def _per_gpu(devices: GpuDevices, shared: bool) -> int | None:
    """Resources per GPU: GFD's replicas label, 1 without sharing; None when a sharing or MIG
    configuration makes the kubelet's count no count of GPUs."""
    if devices.replicas:
        return devices.replicas
    return None if shared else 1


def _seen(devices: GpuDevices, per_gpu: int | None, device_plugin: bool) -> _Seen:
    capacity = devices.capacity if device_plugin else None
    counted = capacity // per_gpu if capacity is not None and per_gpu else None
    seen = [n for n in (counted, devices.gfd_count) if n is not None]
    total = devices.expected or max(seen, default=0)
    allocatable = devices.allocatable
    lost = max(capacity - allocatable, 0) if capacity is not None and allocatable is not None else 0
    if lost and per_gpu:
        withdrawn = -(-lost // per_gpu)
    elif lost and capacity:
        withdrawn = -(-lost * total // capacity)
    else:
        withdrawn = 0
    return _Seen(total, min(seen) if seen else None, min(withdrawn, total))


def _finding(node: NodeFacts, seen: _Seen, devices: GpuDevices) -> tuple[HealthReason, str] | None:
    """The node's worst finding."""
    if node.driver_upgrade is DriverUpgradeState.FAILED:
        return HealthReason.DRIVER_FAILED, (
            "the NVIDIA upgrade controller labelled it upgrade-failed: its new driver did not "
            "come up"
        )
    if seen.present is not None and seen.present < seen.total:
        return HealthReason.GPUS_MISSING, _missing_message(node, seen, devices)
    if seen.withdrawn:
        return HealthReason.GPUS_UNHEALTHY, (
            f"{seen.withdrawn} of {seen.total} GPU{'s' if seen.total != 1 else ''} withdrawn by "
            f"the device plugin (allocatable {devices.allocatable}, capacity {devices.capacity})"
        )
    model = node.machine.gpu if node.machine is not None and not node.machine.unofficial else None
    product = devices.gfd_product
    if model and product and not same_model(model, product):
        return HealthReason.WRONG_GPU_MODEL, (
            f"GPU feature discovery sees {product}; machine type {node.machine_type} has {model}"
        )
    return None


def _missing_message(node: NodeFacts, seen: _Seen, devices: GpuDevices) -> str:
    said = []
    if devices.capacity is not None:
        said.append(f"nvidia.com/gpu capacity {devices.capacity}")
    if devices.gfd_count is not None:
        said.append(f"GPU feature discovery counts {devices.gfd_count}")
    where = f"machine type {node.machine_type}" if node.machine else "its gpu-count label"
    return f"{seen.present} of {seen.total} GPUs present ({', '.join(said)}; {where} has " \
        f"{seen.total})"  # fmt: skip


def node_health(node: NodeFacts, pool: str, *, shared: bool, device_plugin: bool) -> NodeHealth:
    """One GPU node judged. `shared`: the plan configures GPU sharing or the node is in MIG mode
    (the kubelet's count is not GPUs unless GFD says the replicas); `device_plugin`: the stack
    advertises nvidia.com/gpu (the DRA stack does not)."""
    devices = node.devices or GpuDevices()
    per_gpu = _per_gpu(devices, shared or node.mig_mode)
    seen = _seen(devices, per_gpu, device_plugin)
    found = _finding(node, seen, devices)
    advertised = not device_plugin or devices.capacity is not None
    if not advertised or (found is not None and found[0] is HealthReason.DRIVER_FAILED):
        healthy = 0
    else:
        present = seen.total if seen.present is None else seen.present
        healthy = max(min(present, seen.total) - seen.withdrawn, 0)
    marked = node.mark is not None and node.mark.unhealthy
    reason, message = found if found is not None else (None, "")
    return NodeHealth(node.name, pool, seen.total, healthy, reason, message, advertised, marked)


Judge = Callable[[NodeFacts, str], NodeHealth]


def gpu_health(
    pools: Sequence[WorkerPool], *, shared: bool = False, device_plugin: bool = True,
    judge: Judge | None = None,
) -> Health:  # fmt: skip
    """Every GPU node of every worker pool judged, and the sums per pool. `judge`: how one node
    is judged (HealthMemo's), node_health by default."""
    judge = judge or partial(node_health, shared=shared, device_plugin=device_plugin)
    nodes: list[NodeHealth] = []
    summary: list[PoolHealth] = []
    for pool in pools:
        judged = [judge(n, pool.name) for n in pool.nodes]
        nodes += judged
        summary.append(PoolHealth(
            name=pool.name, nodes=len(judged), gpus_healthy=sum(n.healthy for n in judged),
            gpu_total=sum(n.total for n in judged),
            unhealthy_nodes=sum(1 for n in judged if n.reason is not None),
        ))  # fmt: skip
    return Health.of(tuple(nodes), tuple(summary))


@dataclass
class HealthMemo:
    """gpu_health that judges again only the nodes whose facts changed since the last call (the
    store keeps the object of an unchanged Node's facts). After an install at 20,000 Nodes the
    NVIDIA upgrade controller labels the GPU nodes one at a time, and judging all 2,000 for
    each label was 19 ms of the pass."""

    judged: dict[str, tuple[NodeFacts, str, bool, bool, NodeHealth]] = field(default_factory=dict)

    def __call__(
        self, pools: Sequence[WorkerPool], *, shared: bool = False, device_plugin: bool = True
    ) -> Health:
        last, fresh = self.judged, {}

        def judge(n: NodeFacts, pool: str) -> NodeHealth:
            seen = last.get(n.name)
            if seen is not None and seen[0] is n and seen[1:4] == (pool, shared, device_plugin):
                result = seen[4]
            else:
                result = node_health(n, pool, shared=shared, device_plugin=device_plugin)
            fresh[n.name] = (n, pool, shared, device_plugin, result)
            return result

        health = gpu_health(pools, shared=shared, device_plugin=device_plugin, judge=judge)
        self.judged = fresh
        return health


def unhealthy_nodes(health: Health) -> list[UnhealthyNode]:
    """status.unhealthyNodes: the first STATUS_UNHEALTHY_LIMIT by name."""
    bad = heapq.nsmallest(STATUS_UNHEALTHY_LIMIT, health.unhealthy, key=lambda n: n.name)
    return [UnhealthyNode(name=n.name, pool=n.pool, reason=str(n.reason), message=n.message,
                          marked=n.marked) for n in bad]  # fmt: skip


def pools_shown(health: Health) -> list[PoolHealth]:
    return list(health.pools[:STATUS_POOLS_LIMIT])


def _worst(nodes: Iterable[NodeHealth]) -> HealthReason:
    """The most frequent finding; on a tie the worse."""
    counts = dict.fromkeys(NODE_FINDINGS, 0)
    for node in nodes:
        if node.reason is not None:
            counts[node.reason] += 1
    return max(NODE_FINDINGS, key=lambda r: (counts[r], -NODE_FINDINGS.index(r)))


def _gpus(health: Health) -> str:
    return f"{health.healthy_gpus} of {health.total_gpus} GPUs healthy"


def health_condition(health: Health, generation: int | None) -> Condition:
    """GpusHealthy: False with the most frequent finding, Unknown while GPU nodes advertise no
    GPUs yet, else True."""
    ctype = str(ConditionType.GPUS_HEALTHY)
    if not health.nodes:
        return Condition(type=ctype, status="True", reason=str(HealthReason.NO_GPU_NODES),
                         message="no GPU nodes", observed_generation=generation)  # fmt: skip
    bad = health.unhealthy
    if bad:
        named = heapq.nsmallest(NAMES_SHOWN, bad, key=lambda n: n.name)
        shown = "; ".join(f"{n.name} ({n.reason}: {n.message})" for n in named)
        more = f"; and {len(bad) - NAMES_SHOWN} more" if len(bad) > NAMES_SHOWN else ""
        message = f"{len(bad)} of {len(health.nodes)} GPU nodes unhealthy, {_gpus(health)}: " \
            f"{shown}{more}"  # fmt: skip
        return Condition(type=ctype, status="False", reason=str(_worst(bad)), message=message,
                         observed_generation=generation)  # fmt: skip
    waiting = health.unadvertised
    if waiting:
        message = (
            f"{len(waiting)} of {len(health.nodes)} GPU nodes advertise no GPUs yet (the device "
            f"plugin starts there once the driver works: see DriverReady, ComponentsReady); "
            f"{_gpus(health)}"
        )
        return Condition(type=ctype, status="Unknown", reason=str(HealthReason.NOT_ADVERTISED),
                         message=message, observed_generation=generation)  # fmt: skip
    return Condition(type=ctype, status="True", reason=str(HealthReason.HEALTHY),
                     message=_gpus(health), observed_generation=generation)  # fmt: skip
