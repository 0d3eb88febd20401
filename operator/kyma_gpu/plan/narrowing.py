"""The chart rules the module narrows (values-rules/chart-rbac.yaml), as Flux post-renderer
patches for the HelmRelease and as the same change applied to rendered documents (for
hack/release_rbac.py, which derives the release account's RBAC from the narrowed charts).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from kyma_gpu.rules.data_models import RuleNarrowing

RBAC_GROUP = "rbac.authorization.k8s.io"


class NarrowingMismatch(Exception):
    """A rendered role is not what a narrowing expects: the post-renderer's test would fail."""


def for_version(narrowings: Iterable[RuleNarrowing], version: str) -> tuple[RuleNarrowing, ...]:
    return tuple(n for n in narrowings if version in n.chart_versions)


def _rule(n: RuleNarrowing, verbs: Iterable[str], names: Iterable[str] = ()) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "apiGroups": list(n.rule.api_groups),
        "resources": list(n.rule.resources),
        "verbs": list(verbs),
    }
    if names:
        rule["resourceNames"] = list(names)
    return rule


def operations(n: RuleNarrowing) -> list[dict[str, Any]]:
    """The JSON patch (RFC 6902) on the ClusterRole: test the rule, narrow it, add the named
    verbs as a rule of their own."""
    path = f"/rules/{n.index}"
    return [
        {"op": "test", "path": path, "value": _rule(n, n.rule.verbs)},
        {"op": "replace", "path": path, "value": _rule(n, n.unnamed_verbs)},
        {"op": "add", "path": "/rules/-", "value": _rule(n, n.named_verbs, n.resource_names)},
    ]


def post_renderers(narrowings: Iterable[RuleNarrowing]) -> list[dict[str, Any]]:
    """HelmRelease spec.postRenderers: one kustomize patch per narrowed rule (none: [])."""
    patches = [
        {
            "target": {
                "group": RBAC_GROUP,
                "version": "v1",
                "kind": "ClusterRole",
                "name": n.cluster_role,
            },
            "patch": yaml.safe_dump(operations(n), sort_keys=False, width=100),
        }
        for n in narrowings
    ]
    return [{"kustomize": {"patches": patches}}] if patches else []


def apply(docs: Iterable[Mapping[str, Any]], narrowings: Iterable[RuleNarrowing]) -> list[Any]:
    """The documents as the post-renderer leaves them (NarrowingMismatch where its test fails,
    or where the targeted ClusterRole is not rendered at all)."""
    out = [copy.deepcopy(dict(d)) for d in docs]
    for n in narrowings:
        roles = [d for d in out if d.get("kind") == "ClusterRole"
                 and d.get("metadata", {}).get("name") == n.cluster_role]  # fmt: skip
        if not roles:
            raise NarrowingMismatch(f"ClusterRole {n.cluster_role} is not rendered")
        for role in roles:
            _narrow(role, n)
    return out


def _narrow(role: dict[str, Any], n: RuleNarrowing) -> None:
    rules = role.setdefault("rules", [])
    test, replace, add = operations(n)
    if n.index >= len(rules) or rules[n.index] != test["value"]:
        found = rules[n.index] if n.index < len(rules) else None
        raise NarrowingMismatch(
            f"ClusterRole {n.cluster_role} rule {n.index} is {found}, not {test['value']}"
        )
    rules[n.index] = replace["value"]
    rules.append(add["value"])
