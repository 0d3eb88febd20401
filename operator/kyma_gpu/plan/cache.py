"""Plans memoized by what planning reads.

A plan carries the GPU nodes' facts in its pools, and the status judges from them what planning
never reads: the NVIDIA upgrade controller's label (DriverReady, DriverFailed), the GPU devices
and the manager's own marks (GPU health). After an install at 20,000 Nodes the upgrade
controller labels the 2,000 GPU nodes one at a time, and each label planned the whole fleet
again (docs/performance.md, "What the manager does after the install"). Here a change of those
fields alone takes the plan made for the same planning facts and puts the new facts into its
pools: the plan make_plan would have made, without making it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import cachetools

from kyma_gpu.api.models import GpuSpec
from kyma_gpu.facts import ClusterFacts, NodeFacts
from kyma_gpu.plan.flux_objects import Owner
from kyma_gpu.plan.origin import Origins
from kyma_gpu.plan.plan import Plan, make_plan
from kyma_gpu.rules.catalog import Catalog

Key = tuple[str, ClusterFacts, Owner, str]


def planning_view(node: NodeFacts) -> NodeFacts:
    """The node as planning sees it: without the fields only the status reads."""
    if node.driver_upgrade is None and node.devices is None and node.mark is None:
        return node
    return replace(node, driver_upgrade=None, devices=None, mark=None)


def rebind(plan: Plan, facts: ClusterFacts) -> Plan:
    """The plan with each pool's nodes replaced by the facts of the same name."""
    by_name = {node.name: node for node in facts.gpu_nodes}
    pools = tuple(replace(p, nodes=tuple(by_name[n.name] for n in p.nodes)) for p in plan.pools)
    workers = tuple(
        replace(w, nodes=tuple(by_name[n.name] for n in w.nodes)) for w in plan.worker_pools
    )
    return replace(plan, pools=pools, worker_pools=workers)


@dataclass
class PlanCache:
    """The last plans by (spec, facts, owner, origins), and behind them the plans by the
    planning view of the facts. Equal facts hit the first at the cost of an identity check
    per node (the store keeps the object of an unchanged Node's facts)."""

    catalog: Catalog
    plans: cachetools.LRUCache[Key, Plan] = field(
        default_factory=lambda: cachetools.LRUCache(maxsize=16)
    )
    made: cachetools.LRUCache[Key, Plan] = field(
        default_factory=lambda: cachetools.LRUCache(maxsize=4)
    )
    views: dict[str, tuple[NodeFacts, NodeFacts]] = field(default_factory=dict)
    """Node name -> (its facts, their planning view): one view object while the facts hold."""

    def plan(self, spec: GpuSpec, facts: ClusterFacts, owner: Owner, origins: Origins) -> Plan:
        spec_json = spec.model_dump_json()
        key = (spec_json, facts, owner, origins.key)
        found = self.plans.get(key)
        if found is not None:
            return found
        view_key = (spec_json, self._view(facts), owner, origins.key)
        made = self.made.get(view_key)
        if made is None:
            found = self.made[view_key] = make_plan(spec, facts, self.catalog, owner, origins)
        else:
            found = rebind(made, facts)
        self.plans[key] = found
        return found

    def _view(self, facts: ClusterFacts) -> ClusterFacts:
        views = self.views
        nodes = []
        for node in facts.gpu_nodes:
            seen = views.get(node.name)
            if seen is None or seen[0] is not node:
                seen = views[node.name] = (node, planning_view(node))
            nodes.append(seen[1])
        if len(views) > 2 * len(nodes) + 64:  # nodes gone: keep only the present ones
            present = {node.name for node in facts.gpu_nodes}
            self.views = {name: v for name, v in views.items() if name in present}
        return ClusterFacts(gpu_nodes=tuple(nodes), cpu_node_count=facts.cpu_node_count)
