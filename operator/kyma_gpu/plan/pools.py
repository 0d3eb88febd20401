"""Worker pools: the Gardener worker pools of the GPU nodes (worker.gardener.cloud/pool), and
findings about some of their nodes, one per (pool, reason, cause) with the count of nodes. Pure.

A finding about nodes is `blocking` when those nodes get no working GPU from the plan. A worker
pool whose every node has a blocking finding is blocked: its findings are errors, and the plan
still serves the other pools. Only when every GPU worker pool is blocked is the plan an error
(plan/preflight.py Preflight.verdict).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kyma_gpu.api.conditions import PreflightReason
from kyma_gpu.facts.echo import listed
from kyma_gpu.facts.node import NodeFacts
from kyma_gpu.plan.findings import Finding, Severity

NO_POOL = "(none)"
"""The worker pool of nodes without the label worker.gardener.cloud/pool."""
NAMES_SHOWN = 3
"""A finding names this many of its nodes; the plan's `nodes` list has them all."""


@dataclass(frozen=True, slots=True)
class WorkerPool:
    """The GPU nodes of one Gardener worker pool."""

    name: str
    nodes: tuple[NodeFacts, ...]


def pool_of(node: NodeFacts) -> str:
    return node.pool or NO_POOL


def worker_pools(nodes: Iterable[NodeFacts]) -> tuple[WorkerPool, ...]:
    """The GPU nodes by worker pool, pools and nodes in a stable order."""
    groups: dict[str, list[NodeFacts]] = {}
    for node in nodes:
        groups.setdefault(pool_of(node), []).append(node)
    return tuple(
        WorkerPool(name, tuple(sorted(members, key=lambda n: n.name)))
        for name, members in sorted(groups.items())
    )


def who(pool: str, names: Sequence[str], total: int) -> str:
    """'worker pool gpu-new (2 of 3 nodes: a, b)'."""
    where = "nodes without a worker pool label" if pool == NO_POOL else f"worker pool {pool}"
    counted = f"{len(names)} of {total} node{'s' if total != 1 else ''}"
    return f"{where} ({counted}: {listed(names, NAMES_SHOWN)})"


def node_findings(
    pools: Sequence[WorkerPool],
    reason: PreflightReason,
    problems: Mapping[str, str],
    *,
    blocking: bool = True,
    severity: Severity = Severity.WARNING,
) -> list[Finding]:
    """One finding per worker pool and cause. `problems`: node name -> why (the cause, with its
    advice). Blocking findings get their severity from `settle`."""
    findings = []
    for pool in pools:
        causes: dict[str, list[str]] = {}
        for node in pool.nodes:
            if node.name in problems:
                causes.setdefault(problems[node.name], []).append(node.name)
        for why, names in causes.items():
            message = f"{who(pool.name, names, len(pool.nodes))}: {why}"
            findings.append(
                Finding(severity, reason, message, pool.name, tuple(names), blocking=blocking)
            )
    return findings


def blocked_nodes(findings: Iterable[Finding]) -> dict[str, set[str]]:
    """Worker pool -> its nodes that get no working GPU."""
    found: dict[str, set[str]] = {}
    for f in findings:
        if f.blocking and f.pool is not None:
            found.setdefault(f.pool, set()).update(f.nodes)
    return found


def settle(findings: Sequence[Finding], pools: Sequence[WorkerPool]) -> list[Finding]:
    """Blocking findings of a blocked pool (no node left that works) are errors, those of a
    degraded pool (some nodes work) warnings."""
    bad = blocked_nodes(findings)
    size = {p.name: len(p.nodes) for p in pools}
    settled = []
    for finding in findings:
        pool = finding.pool
        if finding.blocking and pool is not None:
            blocked = len(bad[pool]) >= size.get(pool, 0)
            severity = Severity.ERROR if blocked else Severity.WARNING
            settled.append(replace(finding, severity=severity))
        else:
            settled.append(finding)
    return settled
