"""hack/release_rbac.py's pure part: from rendered objects to the release ServiceAccount's
rules. (`make check` runs it on the real charts with the real helm.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "release_rbac.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_rbac", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["release_rbac"] = module
    spec.loader.exec_module(module)
    return module


rbac = _load()
ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "gpu-operator"}, "rules": []}  # fmt: skip
BINDING = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": "nfd-worker", "namespace": "gpu-operator"},
           "roleRef": {"kind": "Role", "name": "nfd-worker"}}  # fmt: skip
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "op"}}


def _rules(docs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rendered = rbac.Rendered()
    rbac._add(rendered, docs, "test chart")
    objects = {o["kind"]: o for o in rbac.manifests(rendered)}
    return objects["ClusterRole"]["rules"], objects["Role"]["rules"]


def test_the_charts_roles_are_escalated_and_bound_only_by_name() -> None:
    cluster, namespaced = _rules([ROLE, BINDING, DEPLOYMENT])
    named = [r for r in cluster if "escalate" in r["verbs"]]
    assert named == [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                      "verbs": ["get", "update", "patch", "delete", "escalate", "bind"],
                      "resourceNames": ["gpu-operator"]}]  # fmt: skip
    roles = [r for r in namespaced if "bind" in r["verbs"]]
    assert roles[0]["resourceNames"] == ["nfd-worker"]  # bound by the chart, so bindable
    assert any(r["resources"] == ["deployments"] for r in namespaced)
    assert not any("deployments" in r["resources"] for r in cluster)


def test_no_wildcards_and_no_unlimited_escalation() -> None:
    cluster, namespaced = _rules([ROLE, BINDING, DEPLOYMENT])
    for rule in cluster + namespaced:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        if {"escalate", "bind"} & set(rule["verbs"]):
            assert rule.get("resourceNames"), rule


def test_a_kind_the_script_does_not_know_stops_it() -> None:
    webhook = {"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "MutatingWebhookConfiguration", "metadata": {"name": "x"}}  # fmt: skip
    with pytest.raises(rbac.RbacError, match="MutatingWebhookConfiguration"):
        _rules([webhook])


def test_a_new_chart_role_changes_the_output() -> None:
    """What `make check` catches: a chart bump with one more ClusterRole needs more RBAC."""
    before = rbac.render_file(_rendered([ROLE]))
    extra = {**ROLE, "metadata": {"name": "gpu-operator-new"}}
    assert rbac.render_file(_rendered([ROLE, extra])) != before


def _rendered(docs: list[dict[str, Any]]) -> Any:
    rendered = rbac.Rendered()
    rbac._add(rendered, docs, "test chart")
    return rendered
