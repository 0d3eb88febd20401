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
NODES = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch", "get"]}
ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "gpu-operator"}, "rules": [NODES]}  # fmt: skip
BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "RoleBinding",
    "metadata": {"name": "nfd-worker", "namespace": "gpu-operator"},
    "roleRef": {"kind": "Role", "name": "nfd-worker"},
    "subjects": [{"kind": "ServiceAccount", "name": "nfd", "namespace": "gpu-operator"}],
}
NFD_ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "nfd-worker", "namespace": "gpu-operator"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}  # fmt: skip
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "op"},
              "spec": {"template": {"spec": {"serviceAccountName": "op-sa"}}}}  # fmt: skip


def _rules(docs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rendered = rbac.Rendered()
    rbac._add(rendered, docs, "test chart")
    objects = {o["kind"]: o for o in rbac.manifests(rendered)}
    return objects["ClusterRole"]["rules"], objects["Role"]["rules"]


def test_the_charts_roles_are_held_not_escalated() -> None:
    """No escalate: the account holds what the chart's roles grant, so the API server's
    escalation check lets it create and bind those roles and nothing beyond. `bind` only on
    the chart's role names (for a hook's binding applied with its role)."""
    cluster, namespaced = _rules([ROLE, NFD_ROLE, BINDING, DEPLOYMENT])
    for rule in cluster + namespaced:
        assert not {"escalate", "impersonate"} & set(rule["verbs"]), rule
        if "bind" in rule["verbs"]:
            assert set(rule["resources"]) <= {"roles", "clusterroles"}, rule
            assert rule["resourceNames"], rule
    (bind,) = [r for r in namespaced if "bind" in r["verbs"]]
    assert bind["resourceNames"] == ["nfd-worker"]
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]} in cluster
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]} in namespaced
    assert any(r["resources"] == ["deployments"] for r in namespaced)
    assert not any("deployments" in r["resources"] for r in cluster)


def test_no_wildcards() -> None:
    cluster, namespaced = _rules([ROLE, BINDING, DEPLOYMENT])
    for rule in cluster + namespaced:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]


def test_a_binding_to_anything_but_the_charts_service_accounts_stops_it() -> None:
    user = {**BINDING, "subjects": [{"kind": "User", "name": "mallory"}]}
    with pytest.raises(rbac.RbacError, match="binds only ServiceAccounts in gpu-operator"):
        _rules([user])
    elsewhere = {**BINDING, "subjects": [{"kind": "ServiceAccount", "name": "x",
                                          "namespace": "kube-system"}]}  # fmt: skip
    with pytest.raises(rbac.RbacError, match="kube-system"):
        _rules([elsewhere])


def test_an_aggregated_role_stops_it() -> None:
    aggregated = {**ROLE, "aggregationRule": {"clusterRoleSelectors": [{}]}}
    with pytest.raises(rbac.RbacError, match="aggregationRule"):
        _rules([aggregated])


def test_the_admission_policy_names_the_charts_objects_and_accounts() -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in rbac.manifests(_rendered(
        [ROLE, NFD_ROLE, BINDING, DEPLOYMENT]))}  # fmt: skip
    policy = objects[("ValidatingAdmissionPolicy", "kyma-gpu-release")]["spec"]
    assert policy["matchConditions"][0]["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:kyma-system:gpu-operator-release'"
    )
    text = str(policy["validations"]) + str(policy["variables"])
    assert "'nfd-worker'" in text  # the bound Role, by name
    assert "s.name in ['nfd']" in text  # the one ServiceAccount the chart binds
    assert "variables.ns == 'gpu-operator'" in text
    # issue 32: each workload by name, with the account the chart gives it; no token Secrets
    assert "'apps/deployments/op': ['op-sa']" in text
    assert "['helm.sh/release.v1']" in text
    assert "variables.subresource == ''" in text
    binding = objects[("ValidatingAdmissionPolicyBinding", "kyma-gpu-release")]["spec"]
    assert binding == {"policyName": "kyma-gpu-release", "validationActions": ["Deny"]}


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


def test_binding_a_role_the_charts_do_not_define_stops_it() -> None:
    """`bind` goes to the roles the charts bind; one they do not define (someone else's,
    with rights the account does not hold) would be a door."""
    rendered = _rendered([BINDING])  # binds Role nfd-worker, which no document defines
    with pytest.raises(rbac.RbacError, match="bind roles they do not define"):
        rbac.check_bound(rendered)
    rbac.check_bound(_rendered([BINDING, NFD_ROLE]))
