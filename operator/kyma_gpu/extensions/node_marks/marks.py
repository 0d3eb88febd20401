"""Node marks for GPU health (spec.health.remediation, off by default): which nodes the manager
marks with the Node condition KymaGpuUnhealthy, cordons, clears and uncordons. Pure.

- Only a GPU node with a finding a new machine cures (REMEDIABLE: DriverFailed, GpusMissing,
  GpusUnhealthy) is marked; WrongGpuModel is reported only. And only when the finding is
  grounded (health.py `kubelet_short`): the kubelet shows the node short of GPUs. A finding
  that labels alone say (GPU feature discovery's count, the upgrade controller's
  upgrade-failed, which a NodeFeature object can forge where NFD takes them) is reported only;
  a node marked on a grounded finding keeps its mark while a finding stays.
- Only on facts no tenant writes (MarkGround, names.py): the kubelet reports GPUs on
  it, its machine type is a GPU type of the registry, or it carries the mark already. A node
  that is a GPU node by NFD's or GFD's labels alone is reported, never marked, and takes no
  place in its pool's share.
- At most max(1, maxMarkedPercent of the pool's nodes) of a worker pool carry the mark at once;
  nodes marked already keep their place, the rest wait by name.
- A mark comes off when the node recovers, when node marks are turned off (`Off`), and on any
  node that is no GPU node any more (clearing its own mark is the one write a node outside the
  GPU pools gets).
- MarkAndCordon cordons a marked node that is schedulable, and records that with the
  annotation gpu.kyma-project.io/cordoned; it uncordons only nodes carrying it. A node someone
  else cordoned is never uncordoned.

Writes happen when something changes only: the condition's status or reason, the cordon.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Iterable, Sequence
from enum import StrEnum

from kyma_gpu.api.models import HealthSpec, Remediation
from kyma_gpu.extensions.node_marks.conditions import REMEDIABLE
from kyma_gpu.extensions.node_marks.facts import NodeMarkFacts, devices_of, mark_of
from kyma_gpu.extensions.node_marks.health import Health, NodeHealth
from kyma_gpu.extensions.node_marks.names import NodeWrite
from kyma_gpu.facts.node import ObservedNode

RECOVERED = "GpusHealthy"
"""The reason of a cleared mark (status False)."""


def allowed(nodes: int, percent: int) -> int:
    """Marks a pool of `nodes` may carry at once."""
    return max(1, nodes * percent // 100)


def chosen(health: Health, spec: HealthSpec, eligible: Container[str]) -> dict[str, NodeHealth]:
    """The nodes that should carry the mark now, by name; only `eligible` ones (markable)."""
    if spec.remediation is Remediation.OFF:
        return {}
    sizes = {p.name: p.nodes for p in health.pools}
    picked: dict[str, NodeHealth] = {}
    by_pool: dict[str, list[NodeHealth]] = {}
    for node in health.unhealthy:
        if node.reason in REMEDIABLE and (node.grounded or node.marked) and node.name in eligible:
            by_pool.setdefault(node.pool, []).append(node)
    for pool, nodes in by_pool.items():
        ranked = sorted(nodes, key=lambda n: (not n.marked, n.name))
        for node in ranked[: allowed(sizes.get(pool, len(nodes)), spec.max_marked_percent)]:
            picked[node.name] = node
    return picked


RECOVERED_MESSAGE = "its GPUs are healthy again, or node marks are turned off"


def _condition(mark: NodeMarkFacts, want: NodeHealth | None) -> tuple[bool | None, str, str]:
    if want is not None and want.reason is not None:
        if mark.unhealthy and mark.reason == want.reason:
            return None, "", ""
        return True, str(want.reason), want.message
    if mark.unhealthy:
        return False, RECOVERED, RECOVERED_MESSAGE
    return None, "", ""


def _cordon(mark: NodeMarkFacts, wanted: bool) -> bool | None:
    if wanted and not mark.unschedulable:
        return True
    if not wanted and mark.cordoned:
        return False
    return None


class MarkGround(StrEnum):
    """Why the manager may mark or cordon a node: a fact no tenant writes. The admission policy
    kyma-gpu-manager-nodes (kyma_gpu_tools/manager_policy.py) accepts the same three."""

    REPORTED = "reported"
    """The kubelet reports NVIDIA GPUs: a GPU resource above zero in capacity or allocatable."""
    MACHINE_TYPE = "machine-type"
    """Its machine type is a GPU machine type of the registry."""
    MARKED = "marked"
    """It carries the mark True already: it had one of the two when it was marked."""


def mark_ground(node: ObservedNode) -> MarkGround | None:
    """The fact that lets the manager mark the node; None: none (NFD's or GFD's labels, the
    NVIDIA upgrade controller's label, an opt-in label alone never do)."""
    devices = devices_of(node)
    if devices is not None and ((devices.capacity or 0) > 0 or (devices.allocatable or 0) > 0):
        return MarkGround.REPORTED
    if node.facts.machine is not None:
        return MarkGround.MACHINE_TYPE
    mark = mark_of(node)
    if mark is not None and mark.unhealthy:
        return MarkGround.MARKED
    return None


def markable(node: ObservedNode) -> bool:
    """A GPU node the manager may mark and cordon: the marks go on no other node."""
    return node.is_gpu and mark_ground(node) is not None


def node_writes(
    health: Health, spec: HealthSpec, nodes: Iterable[ObservedNode]
) -> tuple[NodeWrite, ...]:
    """The writes that bring every node's mark and cordon to what `health` and `spec` want.
    `nodes`: all Nodes the manager knows (GPU nodes or not)."""
    known = tuple(nodes)
    failing = {n.name for n in health.unhealthy}
    eligible = {n.name for n in known if n.name in failing and markable(n)}
    picked = chosen(health, spec, eligible)
    cordons = spec.remediation is Remediation.MARK_AND_CORDON
    writes = []
    for node in known:
        want = picked.get(node.name)
        found = mark_of(node)
        if found is None and want is None:
            continue
        mark = found or NodeMarkFacts()
        unhealthy, reason, message = _condition(mark, want)
        cordon = _cordon(mark, cordons and want is not None)
        if unhealthy is not None or cordon is not None:
            flips = unhealthy is not None and unhealthy != mark.unhealthy
            writes.append(NodeWrite(node.name, unhealthy, reason, message, cordon, flips))
    return tuple(sorted(writes, key=lambda w: w.name))


def marks_key(writes: Sequence[NodeWrite]) -> str:
    """Identifies a set of node writes (a failure's retry matches it), in a few characters."""
    said = ",".join(f"{w.name}={w.unhealthy}/{w.reason}/{w.cordon}" for w in writes)
    return "nodes-" + hashlib.sha256(said.encode()).hexdigest()[:16]
