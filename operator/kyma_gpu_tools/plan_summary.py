"""`kyma-gpu plan`'s summary: what a person checks before a Gpu goes to a cluster, first and
short. The worker pools with their driver, the findings, GPU health and the node marks of
spec.health, and what the manager would write to the cluster; the chart values with the rule
behind each, and the objects in full, are the YAML document of `kyma-gpu plan -o yaml`."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kyma_gpu.api.models import GpuNodeStatus, HealthSpec, Remediation
from kyma_gpu.extensions.node_marks.health import Health, plan_health
from kyma_gpu.extensions.node_marks.marks import node_writes
from kyma_gpu.extensions.node_marks.names import NodeWrite
from kyma_gpu.facts import ObservedNode
from kyma_gpu.plan import Plan, Severity, Verdict
from kyma_gpu.plan.driver import DriverPool, VersionSource
from kyma_gpu.plan.preflight import Finding
from kyma_gpu_tools.release_diff import ReleaseDiff, release_diff

WIDTH = 100
SHOWN = 10
"""Nodes named per list; the rest are counted."""
ROLLOUT = (
    "Flux then installs the chart, or upgrades the release where these values differ from "
    "the running ones. A new driver, or a change of what the driver DaemonSets run (a new "
    "branch, installer release or chart, and spec.values such as tolerations or resources), "
    "is rolled out node by node: the NVIDIA upgrade controller cordons each node while its "
    "driver is replaced (spec.driver.upgradePolicy)."
)


@dataclass(frozen=True)
class Given:
    """What the plan was made from, in the user's words."""

    gpu: str | None
    nodes: str | None
    sources: str | None
    node_count: int
    observed: Sequence[ObservedNode]
    """The GPU nodes (and any marked node) as the manager observes them."""
    release: Mapping[str, Any] | None = None
    """The running HelmRelease (--release): the summary says what changes against it."""
    release_path: str | None = None


def _wrap(text: str, indent: str = "  ", first: str | None = None) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=first if first is not None else indent,
                         subsequent_indent=indent + "  ", break_on_hyphens=False)  # fmt: skip


def _some(names: Sequence[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]  # fmt: skip


def _headline(plan: Plan, given: Given) -> list[str]:
    gpu = f"the Gpu of {_named(given.gpu)}" if given.gpu else "the empty Gpu spec (no -f)"
    if given.nodes:
        fleet = (f"the {_count(given.node_count, 'Node')} of {_named(given.nodes)} "
                 f"({_count(len(plan.nodes), 'GPU node')})")  # fmt: skip
    else:
        fleet = "no nodes (no --nodes: the plan of a cluster without GPU nodes)"
    verdict = plan.preflight.verdict
    code = 1 if verdict is Verdict.ERROR else 0
    return [f"Plan of {gpu} for {fleet}", f"Verdict: {verdict} (exit code {code})"]


def _named(path: str) -> str:
    return "standard input" if path == "-" else path


def _count(number: int, what: str) -> str:
    return f"{number:,} {what}{'' if number == 1 else 's'}"


def _driver_of(pools: Sequence[DriverPool]) -> dict[str, DriverPool]:
    return {node.name: pool for pool in pools for node in pool.nodes}


_FROM = MappingProxyType({
    VersionSource.SPEC: "spec.driver.version",
    VersionSource.SPEC_BRANCH: "the branch of spec.driver.version",
    VersionSource.NVIDIA_CATALOG: "NVIDIA's newest of the branch",
    VersionSource.INSTALLER_DEFAULT: "the default of installer {release}",
    VersionSource.CHART_DEFAULT: "the chart's default",
})  # fmt: skip
"""Where a driver version came from (the plan document's versionSource), in words."""


def _driver_text(pool: DriverPool | None, plan: Plan) -> str:
    if pool is None:
        return "none"
    if pool.version is None or pool.source is None:
        return str(pool.mode)
    source = _FROM[pool.source].format(release=plan.installer_release)
    return f"{pool.mode} {pool.version} ({source})"


def _machines(nodes: Sequence[GpuNodeStatus]) -> str:
    seen = []
    for node in nodes:
        gpus = f"{node.gpu_count}x {node.gpu_model}" if node.gpu_model else "GPU model unknown"
        text = f"{node.machine_type or 'no machine type'} ({gpus})"
        if text not in seen:
            seen.append(text)
    return _some(seen)


def _os(nodes: Sequence[GpuNodeStatus]) -> str:
    seen: list[str] = []
    for node in nodes:
        text = f"{node.os} {node.os_version or ''}".strip()
        if text not in seen:
            seen.append(text)
    return _some(seen)


def _pools(plan: Plan) -> list[str]:
    if not plan.worker_pools:
        return ["GPU worker pools: none"]
    drivers = _driver_of(plan.pools)
    by_pool: dict[str, list[GpuNodeStatus]] = {}
    for node in plan.nodes:
        by_pool.setdefault(node.pool or "", []).append(node)
    rows = [["POOL", "NODES", "STATE", "MACHINE TYPE", "OS", "DRIVER"]]
    for pool in plan.worker_pools:
        nodes = by_pool.get(pool.name, [])
        found = {_driver_text(drivers.get(n.name), plan) for n in nodes}
        blocked = plan.pool_state(pool.name) == "blocked"
        driver = "none (blocked)" if blocked else _some(sorted(found))
        rows.append([pool.name, f"{len(pool.nodes):,}", plan.pool_state(pool.name),
                     _machines(nodes), _os(nodes), driver])  # fmt: skip
    return ["GPU worker pools", *_table(rows)]


_ORDER = MappingProxyType({Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2})


def _finding(f: Finding) -> list[str]:
    where = f" (worker pool {f.pool}, {len(f.nodes):,} nodes)" if f.pool is not None else ""
    return [f"  {f.severity} {f.reason}{where}", *_wrap(f.message, "    ")]


def _findings(plan: Plan) -> list[str]:
    findings = sorted(plan.preflight.findings, key=lambda f: _ORDER[f.severity])
    if not findings:
        return ["Findings: none"]
    lines = [f"Findings ({len(findings)})"]
    for f in findings:
        lines += _finding(f)
    return lines


def _write_text(write: NodeWrite) -> str:
    parts = []
    if write.unhealthy is True:
        parts.append(f"condition KymaGpuUnhealthy True ({write.reason})")
    elif write.unhealthy is False:
        parts.append("condition KymaGpuUnhealthy False (recovered)")
    if write.cordon is True:
        parts.append("cordon")
    elif write.cordon is False:
        parts.append("uncordon")
    return f"Node {write.name}: {', '.join(parts)}"


def _health_lines(health: Health, spec: HealthSpec) -> Iterator[str]:
    yield (f"GPU health (spec.health: remediation {spec.remediation}, at most "
           f"{spec.max_marked_percent} % of a worker pool marked)")  # fmt: skip
    if not health.node_count:
        yield "  no GPU nodes to judge"
        return
    yield (f"  {health.healthy_gpus:,} of {_count(health.total_gpus, 'GPU')} healthy on "
           f"{_count(health.node_count, 'GPU node')}")  # fmt: skip
    if health.unadvertised:
        names = [n.name for n in health.unadvertised]
        yield from _wrap(f"{_count(len(names), 'node')} advertising no GPUs yet (the device "
                         f"plugin starts once the driver works): {_some(names)}")  # fmt: skip
    for node in health.unhealthy[:SHOWN]:
        yield from _wrap(f"{node.name} (worker pool {node.pool}): {node.reason}: {node.message}")
    if len(health.unhealthy) > SHOWN:
        yield f"  and {len(health.unhealthy) - SHOWN:,} more unhealthy nodes"


def _health(plan: Plan, given: Given) -> tuple[list[str], tuple[NodeWrite, ...]]:
    """The health lines, and the node writes spec.health asks for."""
    gpu_nodes = [n for n in given.observed if n.is_gpu]
    health = plan_health(plan, gpu_nodes)
    writes = node_writes(health, plan.health, given.observed)
    lines = list(_health_lines(health, plan.health))
    if plan.health.remediation is Remediation.OFF and health.unhealthy:
        marking = plan.health.model_copy(update={"remediation": Remediation.MARK_NODES})
        would = [w.name for w in node_writes(health, marking, given.observed) if w.unhealthy]
        if would:
            lines += _wrap(
                "Node marks are off: with spec.health.remediation MarkNodes the manager would "
                f"mark {_some(would)} for Gardener to replace"
            )
    return lines, writes


def _writes(plan: Plan, node_marks: tuple[NodeWrite, ...], given: Given) -> list[str]:
    health_spec = plan.health
    if plan.preflight.verdict is Verdict.ERROR:
        return ["On the cluster: nothing is written (verdict error); the Gpu's state is Error"]
    source, release = plan.source or {}, plan.helm_release or {}
    rows = [[str(source.get("kind")), _name(source), str(source.get("spec", {}).get("url"))]]
    values = len(plan.provenance)
    spec = release.get("spec", {})
    rows.append(["HelmRelease", _name(release),
                 f"chart {plan.chart_name} {plan.chart_version} into namespace "
                 f"{spec.get('targetNamespace')}, {values} chart values from "
                 f"{len(plan.rules_applied)} rules"])  # fmt: skip
    lines = ["On the cluster, the manager would write", *_table(rows)]
    if node_marks:
        lines += [f"  {_write_text(w)}" for w in node_marks[:SHOWN]]
        if len(node_marks) > SHOWN:
            lines.append(f"  and {len(node_marks) - SHOWN:,} more Nodes")
    elif health_spec.remediation is Remediation.OFF:
        lines.append("  no Node: node marks are off (spec.health.remediation Off)")
    else:
        lines.append("  no Node: no GPU node needs its mark set or cleared")
    if given.release is None:
        return [*lines, "", *textwrap.wrap(ROLLOUT, WIDTH)]
    return [*lines, "", *_against(release_diff(given.release, release), given)]


def _against(diff: ReleaseDiff, given: Given) -> list[str]:
    """What changes against the running HelmRelease of --release."""
    if diff.chart is None and not diff.changes:
        return [f"Against the running HelmRelease ({given.release_path}): no change; Flux has "
                "nothing to upgrade"]  # fmt: skip
    lines = [f"Against the running HelmRelease ({given.release_path}):"]
    if diff.chart is not None:
        lines.append(f"  chart version {diff.chart[0]} -> {diff.chart[1]}")
    lines += [f"  {c.text()}" for c in diff.changes[:SHOWN]]
    if len(diff.changes) > SHOWN:
        lines.append(f"  and {len(diff.changes) - SHOWN} more values")
    if diff.rolls_driver:
        return [*lines, *textwrap.wrap(DRIVER_ROLLS, WIDTH)]
    quiet = (
        "Flux upgrades the release; no value reaches the driver DaemonSets: no node is cordoned."
    )
    return [*lines, *textwrap.wrap(quiet, WIDTH)]


DRIVER_ROLLS = (
    "These reach the driver DaemonSets: Flux upgrades the release, then the NVIDIA upgrade "
    "controller replaces the driver node by node, cordoning each node and moving its GPU pods "
    "away while its driver is replaced (spec.driver.upgradePolicy); the Gpu is Processing "
    "(DriverUpgrading) until the last node is done."
)


def _name(obj: dict[str, object]) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return ""
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _steps(plan: Plan, given: Given) -> list[str]:
    steps = []
    reasons = {str(f.reason) for f in plan.preflight.findings}
    if not given.nodes:
        steps.append("Plan for your cluster's nodes: kubectl get nodes -o json > nodes.json, "
                     "then add --nodes nodes.json")  # fmt: skip
    if not given.sources and reasons & {"ChartSourceNotAllowed", "ImageRegistryNotAllowed"}:
        steps.append(
            "Without --sources only NVIDIA's repository and registries are allowed, as on a "
            "cluster without the ConfigMap kyma-gpu-chart-sources. If your cluster has it: "
            "kubectl get configmap -n kyma-system kyma-gpu-chart-sources -o yaml > "
            "sources.yaml, then add --sources sources.yaml"
        )
    if given.release is None and plan.preflight.verdict is not Verdict.ERROR:
        steps.append("What changes against a cluster's running release: kubectl get helmrelease "
                     "-n kyma-system gpu-operator -o yaml > release.yaml, then add --release "
                     "release.yaml")  # fmt: skip
    return steps


FULL = "The chart values with the rule that set each, and the objects in full: add -o yaml"


def summary(plan: Plan, given: Given) -> str:
    """The summary `kyma-gpu plan` prints (without -o yaml)."""
    health, node_marks = _health(plan, given)
    steps = [line for step in [*_steps(plan, given), FULL] for line in _wrap(step, "  ", "- ")]
    sections = [
        _headline(plan, given), _pools(plan), _findings(plan), health,
        _writes(plan, node_marks, given), ["Next", *steps],
    ]  # fmt: skip
    return "\n\n".join("\n".join(section) for section in sections) + "\n"


def notes(plan: Plan, given: Given) -> list[str]:
    """The steps that make an offline plan the cluster's (no --nodes, no --sources where they
    matter): stderr's, next to the document of -o yaml."""
    return [s for s in _steps(plan, given) if not s.startswith("What changes against")]
