"""GPU health: what the Node objects already say of each GPU node's GPUs, judged. Pure.

Signals, all from the Node body the manager watches anyway (facts.py GpuDevices, the extension's
share of the Node fold), so no request and no watch is added and a heartbeat changes nothing:

- the kubelet's nvidia.com/gpu capacity against what the machine type has (GpusMissing);
- allocatable against capacity: the device plugin withdraws unhealthy GPUs so
  (GpusUnhealthy);
- GPU feature discovery's count and product labels against the registry (GpusMissing,
  WrongGpuModel);
- the NVIDIA upgrade controller's upgrade-failed label (DriverFailed).

Each GPU node gets a NodeHealth; `gpu_health` sums them per worker pool. Health never changes
Ready: Ready says the module installed the stack, GpusHealthy what the hardware does. A finding
is `grounded` (it may lead to a mark) only where the kubelet's resources show it too: labels
(GFD's, the upgrade controller's) can be written through NFD, the kubelet's status cannot.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kyma_gpu.api.models import (
    STATUS_POOLS_LIMIT,
    STATUS_UNHEALTHY_LIMIT,
    Condition,
    PoolHealth,
    UnhealthyNode,
)
from kyma_gpu.api.operations import GpuStack
from kyma_gpu.extensions.node_marks.conditions import NODE_FINDINGS, Conditions, HealthReason
from kyma_gpu.extensions.node_marks.facts import GpuDevices, devices_of, mark_of, same_model
from kyma_gpu.facts.node import DriverUpgradeState, ObservedNode
from kyma_gpu.plan.plan import Plan
from kyma_gpu.plan.pools import pool_of

__all__ = (
    "Health", "NodeHealth", "gpu_health", "health_condition", "kubelet_short", "node_health",
    "plan_health", "pools_shown", "same_model", "unhealthy_nodes",
)  # fmt: skip

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
    grounded: bool = False
    """Its finding rests on what no tenant writes: the kubelet's GPU resources (capacity,
    allocatable) against the registry's machine type (`kubelet_short`). Only such a finding
    may mark a node; one that only labels say (GPU feature discovery's count, the NVIDIA upgrade
    controller's state: labels NFD can be made to write) is reported, never marked."""


@dataclass(frozen=True, slots=True)
class Health:
    """The GPU health of the fleet: the sums, and the nodes a status names."""

    node_count: int = 0
    """GPU nodes judged."""
    pools: tuple[PoolHealth, ...] = ()
    unhealthy: tuple[NodeHealth, ...] = ()
    """The nodes with a finding."""
    unadvertised: tuple[NodeHealth, ...] = ()
    """The nodes that advertise no GPUs yet."""
    healthy_gpus: int = 0
    total_gpus: int = 0


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


def _finding(
    node: ObservedNode, seen: _Seen, devices: GpuDevices
) -> tuple[HealthReason, str] | None:
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
    if not devices.model_matches:
        machine = node.facts.machine
        return HealthReason.WRONG_GPU_MODEL, (
            f"GPU feature discovery sees {devices.gfd_product}; machine type "
            f"{node.facts.machine_type} has {machine.gpu if machine else None}"
        )
    return None


def _missing_message(node: ObservedNode, seen: _Seen, devices: GpuDevices) -> str:
    said = []
    if devices.capacity is not None:
        said.append(f"nvidia.com/gpu capacity {devices.capacity}")
    if devices.gfd_count is not None:
        said.append(f"GPU feature discovery counts {devices.gfd_count}")
    facts = node.facts
    where = f"machine type {facts.machine_type}" if facts.machine else "its gpu-count label"
    return f"{seen.present} of {seen.total} GPUs present ({', '.join(said)}; {where} has " \
        f"{seen.total})"  # fmt: skip


def node_health(node: ObservedNode, pool: str, *, shared: bool, device_plugin: bool) -> NodeHealth:
    """One GPU node judged. `shared`: the plan configures GPU sharing or the node is in MIG mode
    (the kubelet's count is not GPUs unless GFD says the replicas); `device_plugin`: the stack
    advertises nvidia.com/gpu (the DRA stack does not)."""
    devices = devices_of(node) or GpuDevices()
    per_gpu = _per_gpu(devices, shared or node.facts.mig_mode)
    seen = _seen(devices, per_gpu, device_plugin)
    found = _finding(node, seen, devices)
    advertised = not device_plugin or devices.capacity is not None
    if not advertised or (found is not None and found[0] is HealthReason.DRIVER_FAILED):
        healthy = 0
    else:
        present = seen.total if seen.present is None else seen.present
        healthy = max(min(present, seen.total) - seen.withdrawn, 0)
    mark = mark_of(node)
    marked = mark is not None and mark.unhealthy
    reason, message = found if found is not None else (None, "")
    grounded = found is not None and kubelet_short(node)
    return NodeHealth(node.name, pool, seen.total, healthy, reason, message, advertised, marked,
                      grounded)  # fmt: skip


def kubelet_short(node: ObservedNode) -> bool:
    """The kubelet shows the node short of GPUs, on facts no tenant writes: its device plugin
    withdrew some (allocatable below capacity), or it advertises fewer GPU resources than its
    machine type has GPUs (the registry's count; sharing only multiplies them). A node in MIG
    mode is judged by the first only (its resources are MIG instances)."""
    devices = devices_of(node)
    if devices is None or devices.capacity is None:
        return False
    allocatable = devices.allocatable
    if allocatable is not None and allocatable < devices.capacity:
        return True
    machine = node.facts.machine
    return machine is not None and not node.facts.mig_mode and devices.capacity < machine.count


def _plain(node: ObservedNode, plain_flags: bool) -> int | None:
    """The GPUs of a node every source agrees on, all healthy: what node_health judges healthy
    with nothing to say; None: judge it with node_health. Most nodes most of the time, so that
    a status of thousands of GPU nodes costs a few attribute reads per node."""
    if not plain_flags or node.driver_upgrade is DriverUpgradeState.FAILED:
        return None
    extras = node.extras  # node_fold puts the devices first: read them without a call
    devices = extras[0] if extras and type(extras[0]) is GpuDevices else devices_of(node)
    if not isinstance(devices, GpuDevices):
        return None
    capacity = devices.capacity
    if (
        capacity is None
        or devices.allocatable not in (None, capacity)
        or devices.expected not in (None, capacity)
        or devices.gfd_count not in (None, capacity)
        or devices.replicas is not None
        or not devices.model_matches
        or node.facts.mig_config is not None
    ):
        return None
    return capacity


def gpu_health(
    nodes: Iterable[ObservedNode], *, shared: bool = False, device_plugin: bool = True
) -> Health:
    """Every node of `nodes` (the GPU nodes) judged, and the sums per worker pool, by name."""
    plain_flags = device_plugin and not shared
    sums: dict[str, list[int]] = {}  # pool -> [nodes, healthy GPUs, GPUs, unhealthy nodes]
    unhealthy: list[NodeHealth] = []
    unadvertised: list[NodeHealth] = []
    for node in nodes:
        pool = pool_of(node.facts)
        counts = sums.get(pool) or sums.setdefault(pool, [0, 0, 0, 0])
        counts[0] += 1
        gpus = _plain(node, plain_flags)
        if gpus is not None:
            counts[1] += gpus
            counts[2] += gpus
            continue
        judged = node_health(node, pool, shared=shared, device_plugin=device_plugin)
        counts[1] += judged.healthy
        counts[2] += judged.total
        if judged.reason is not None:
            counts[3] += 1
            unhealthy.append(judged)
        if not judged.advertised:
            unadvertised.append(judged)
    pools = tuple(
        PoolHealth(name=name, nodes=n, gpus_healthy=healthy, gpu_total=total, unhealthy_nodes=bad)
        for name, (n, healthy, total, bad) in sorted(sums.items())
    )
    return Health(sum(p.nodes for p in pools), pools, tuple(unhealthy), tuple(unadvertised),
                  sum(p.gpus_healthy for p in pools), sum(p.gpu_total for p in pools))  # fmt: skip


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
    ctype = str(Conditions.GPUS_HEALTHY)
    if not health.node_count:
        return Condition(type=ctype, status="True", reason=str(HealthReason.NO_GPU_NODES),
                         message="no GPU nodes", observed_generation=generation)  # fmt: skip
    bad = health.unhealthy
    if bad:
        named = heapq.nsmallest(NAMES_SHOWN, bad, key=lambda n: n.name)
        shown = "; ".join(f"{n.name} ({n.reason}: {n.message})" for n in named)
        more = f"; and {len(bad) - NAMES_SHOWN} more" if len(bad) > NAMES_SHOWN else ""
        message = f"{len(bad)} of {health.node_count} GPU nodes unhealthy, {_gpus(health)}: " \
            f"{shown}{more}"  # fmt: skip
        return Condition(type=ctype, status="False", reason=str(_worst(bad)), message=message,
                         observed_generation=generation)  # fmt: skip
    waiting = health.unadvertised
    if waiting:
        message = (
            f"{len(waiting)} of {health.node_count} GPU nodes advertise no GPUs yet (the device "
            f"plugin starts there once the driver works: see DriverReady, ComponentsReady); "
            f"{_gpus(health)}"
        )
        return Condition(type=ctype, status="Unknown", reason=str(HealthReason.NOT_ADVERTISED),
                         message=message, observed_generation=generation)  # fmt: skip
    return Condition(type=ctype, status="True", reason=str(HealthReason.HEALTHY),
                     message=_gpus(health), observed_generation=generation)  # fmt: skip


def plan_health(plan: Plan, gpu_nodes: Sequence[ObservedNode]) -> Health:
    """The GPU health of the GPU nodes as the plan's stack and sharing count their GPUs."""
    return gpu_health(gpu_nodes, shared=plan.sharing is not None,
                      device_plugin=plan.stack is GpuStack.DEVICE_PLUGIN)  # fmt: skip
