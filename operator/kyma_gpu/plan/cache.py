"""The plans last made, by what planning reads: the spec, the planning facts, the owner and the
chart sources allowed.

The facts hold no per-node state (facts/node.py ObservedNode keeps it apart), so a change of a
node's upgrade label, devices or mark leaves the key equal and makes no new plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kyma_gpu.api.models import GpuSpec
from kyma_gpu.facts import ClusterFacts
from kyma_gpu.plan.allowed import AllowedSources
from kyma_gpu.plan.flux_objects import Owner
from kyma_gpu.plan.plan import Plan, make_plan
from kyma_gpu.rules.catalog import Catalog

Key = tuple[str, ClusterFacts, Owner, str]

KEPT = 4
"""Plans kept: the current one and a few before it (a spec edited back and forth)."""


@dataclass
class PlanMemo:
    """make_plan, remembered for the last KEPT keys. The Loop owns one; nothing else remembers.
    Equal facts cost an identity check per node: the store keeps the object of an unchanged
    Node, and a hit takes the new key, so that a node whose facts were made again compares by
    identity from then on."""

    catalog: Catalog
    entries: list[tuple[Key, Plan]] = field(default_factory=list)
    """Newest first."""

    def plan(
        self, spec: GpuSpec, facts: ClusterFacts, owner: Owner, allowed_sources: AllowedSources
    ) -> Plan:
        key = (spec.model_dump_json(), facts, owner, allowed_sources.key)
        found = next((e for e in self.entries if e[0] == key), None)
        plan = found[1] if found else make_plan(spec, facts, self.catalog, owner, allowed_sources)
        others = [e for e in self.entries if e is not found]
        self.entries = [(key, plan), *others[: KEPT - 1]]
        return plan
