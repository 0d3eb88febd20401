"""Derive the RBAC of the HelmRelease's ServiceAccount from the rendered NVIDIA charts.

helm-controller installs, upgrades and uninstalls the GPU operator chart as the ServiceAccount
`gpu-operator-release` (HelmRelease spec.serviceAccountName), not with its own cluster-admin
rights. This script renders every supported chart version (values-rules/charts/) with the
values of every golden scenario and with every optional component switched on, collects the
kinds and the RBAC objects the renders contain, and writes the ServiceAccount, a ClusterRole
for the cluster-scoped kinds and a Role in the target namespace for the namespaced ones:

- no `escalate`: the ServiceAccount holds the rules of the chart's own Roles and ClusterRoles
  itself, so the API server's escalation check lets it create, change and bind those roles,
  and never a role with a right it does not hold (with `escalate` on a role's name it could
  have set `*` on it); `bind` on those names only, for bindings Helm applies in the same batch
  as their role (hooks), which the API server cannot check against a role not yet there;
- CustomResourceDefinitions, ClusterRoles and ClusterRoleBindings are limited by name wherever
  RBAC allows it (every verb except create, list and watch); the chart's rules that it now
  holds reach further, so
- a ValidatingAdmissionPolicy on the account's requests (`kyma-gpu-release`) holds it to the
  chart: writes only in the target namespace or to the cluster-scoped kinds the charts render,
  RBAC objects and CRDs only by the charts' names, bindings only of the charts' roles to the
  charts' ServiceAccounts in the target namespace;
- a kind the script does not know, a role with an aggregation rule, or a binding to anything but
  a ServiceAccount in the target namespace stops it with the chart version that renders it.

    python hack/release_rbac.py            # write config/rbac/release_rbac.yaml
    python hack/release_rbac.py --check    # fail when a chart or the values need more

Needs tools/bin/helm (`make tools`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kyma_gpu.plan.narrowing import NarrowingMismatch, apply, for_version
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.data_models import RuleNarrowing

Rule = dict[str, Any]
"""One RBAC PolicyRule, as YAML writes it."""

ROOT = Path(__file__).resolve().parents[1]
CHARTS = ROOT.parent / "shared" / "charts"
OUT = ROOT / "config" / "rbac" / "release_rbac.yaml"
SCENARIOS = ROOT / "tests" / "golden" / "scenarios"
HELM = ROOT / "tools" / "bin" / "helm"

SERVICE_ACCOUNT = "gpu-operator-release"
MODULE_NAMESPACE = "kyma-system"
TARGET_NAMESPACE = "gpu-operator"
RBAC = "rbac.authorization.k8s.io"
CRD_GROUP = "apiextensions.k8s.io"
ALL = ["get", "list", "watch", "create", "update", "patch", "delete"]
NAMED = ["get", "update", "patch", "delete"]
"""The verbs whose requests carry the object's name, so resourceNames can limit them."""

# (group, kind) -> (resource, namespaced), for the built-in kinds a chart may render.
BUILTIN: dict[tuple[str, str], tuple[str, bool]] = {
    ("", "ConfigMap"): ("configmaps", True),
    ("", "Namespace"): ("namespaces", False),
    ("", "Secret"): ("secrets", True),
    ("", "Service"): ("services", True),
    ("", "ServiceAccount"): ("serviceaccounts", True),
    ("apps", "DaemonSet"): ("daemonsets", True),
    ("apps", "Deployment"): ("deployments", True),
    ("batch", "Job"): ("jobs", True),
    ("monitoring.coreos.com", "ServiceMonitor"): ("servicemonitors", True),
    ("monitoring.coreos.com", "PrometheusRule"): ("prometheusrules", True),
    ("networking.k8s.io", "NetworkPolicy"): ("networkpolicies", True),
    ("node.k8s.io", "RuntimeClass"): ("runtimeclasses", False),
    ("policy", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("scheduling.k8s.io", "PriorityClass"): ("priorityclasses", False),
    (RBAC, "ClusterRole"): ("clusterroles", False),
    (RBAC, "ClusterRoleBinding"): ("clusterrolebindings", False),
    (RBAC, "Role"): ("roles", True),
    (RBAC, "RoleBinding"): ("rolebindings", True),
    (CRD_GROUP, "CustomResourceDefinition"): ("customresourcedefinitions", False),
}
WORKLOADS = {("apps", "deployments"), ("apps", "daemonsets"), ("apps", "statefulsets"),
             ("batch", "jobs")}  # fmt: skip
"""The kinds with a pod template: their pods run as the account the template names."""
HELM_STORAGE = "helm.sh/release.v1"
"""The type of the Secrets Helm keeps a release's history in (the target namespace)."""
STATUS_READS = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "list", "watch"]},
]
"""Helm waits for the release with kstatus, which reads a Deployment's ReplicaSets and pods."""
EVERY_SWITCH: dict[str, Any] = {
    "migManager": {"enabled": True},
    "nodeStatusExporter": {"enabled": True},
    "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
    "gfd": {"enabled": True},
    "gds": {"enabled": True},
    "gdrcopy": {"enabled": True},
    "sandboxWorkloads": {"enabled": True},
    "vgpuManager": {"enabled": True},
    "ccManager": {"enabled": True},
}
"""Optional components switched on, so that their objects are covered too."""


class RbacError(Exception):
    pass


@dataclass
class Rendered:
    """What the renders contain: kinds by (group, resource) and the RBAC objects' names."""

    namespaced: set[tuple[str, str]] = field(default_factory=set)
    cluster: set[tuple[str, str]] = field(default_factory=set)
    names: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    """(group, resource) -> object names, for the kinds limited by name."""
    bound: dict[str, set[str]] = field(default_factory=dict)
    """"roles" / "clusterroles" -> the names the chart's bindings refer to."""
    cluster_rules: list[dict[str, Any]] = field(default_factory=list)
    """The rules of the chart's ClusterRoles: held cluster-wide."""
    namespaced_rules: list[dict[str, Any]] = field(default_factory=list)
    """The rules of the chart's Roles: held in the target namespace."""
    subjects: set[str] = field(default_factory=set)
    """The ServiceAccounts (in the target namespace) the chart's bindings name."""
    workloads: dict[str, set[str]] = field(default_factory=dict)
    """"<group>/<resource>/<name>" of every workload -> the ServiceAccounts its pods run as."""
    secret_types: set[str] = field(default_factory=set)
    """The types of the Secrets the charts render."""


def _group(api_version: str) -> str:
    return api_version.split("/", maxsplit=1)[0] if "/" in api_version else ""


def _crd_kinds(docs: Iterable[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, bool]]:
    kinds = {}
    for doc in docs:
        if doc.get("kind") == "CustomResourceDefinition":
            spec = doc["spec"]
            names = spec["names"]
            kinds[(spec["group"], names["kind"])] = (names["plural"], spec["scope"] == "Namespaced")
    return kinds


def _add(rendered: Rendered, docs: list[dict[str, Any]], label: str) -> None:
    kinds = {**BUILTIN, **_crd_kinds(docs)}
    for doc in docs:
        group, kind = _group(doc.get("apiVersion", "")), doc.get("kind", "")
        if (group, kind) not in kinds:
            raise RbacError(
                f"{label} renders {kind} ({group or 'core'}), which the release RBAC does not "
                "know: add it to BUILTIN in hack/release_rbac.py and review what it allows"
            )
        resource, namespaced = kinds[(group, kind)]
        (rendered.namespaced if namespaced else rendered.cluster).add((group, resource))
        if group in (RBAC, CRD_GROUP):
            rendered.names.setdefault((group, resource), set()).add(doc["metadata"]["name"])
        if kind in ("Role", "ClusterRole"):
            _add_role(rendered, doc, label)
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            _add_binding(rendered, doc, label)
        if (group, resource) in WORKLOADS:
            key = f"{group}/{resource}/{doc['metadata']['name']}"
            account = doc["spec"]["template"]["spec"].get("serviceAccountName") or "default"
            rendered.workloads.setdefault(key, set()).add(account)
        if kind == "Secret":
            rendered.secret_types.add(doc.get("type") or "Opaque")


def _add_role(rendered: Rendered, doc: dict[str, Any], label: str) -> None:
    """The account holds what the chart's roles grant: then it may create and bind them."""
    if doc.get("aggregationRule"):
        raise RbacError(f"{label} renders {doc['kind']} {doc['metadata']['name']} with an "
                        "aggregationRule, whose rights nobody can know beforehand")  # fmt: skip
    held = rendered.cluster_rules if doc["kind"] == "ClusterRole" else rendered.namespaced_rules
    held.extend(_normal(rule) for rule in doc.get("rules") or [])


def _add_binding(rendered: Rendered, doc: dict[str, Any], label: str) -> None:
    ref = doc["roleRef"]
    plural = "clusterroles" if ref["kind"] == "ClusterRole" else "roles"
    rendered.bound.setdefault(plural, set()).add(ref["name"])
    (rendered.cluster if plural == "clusterroles" else rendered.namespaced).add((RBAC, plural))
    name = doc["metadata"]["name"]
    for subject in doc.get("subjects") or []:
        namespace = subject.get("namespace", TARGET_NAMESPACE)
        if subject.get("kind") != "ServiceAccount" or namespace != TARGET_NAMESPACE:
            raise RbacError(
                f"{label} renders {doc['kind']} {name} with subject {subject}: the release "
                f"account binds only ServiceAccounts in {TARGET_NAMESPACE}; review it"
            )
        rendered.subjects.add(subject["name"])


def _normal(rule: dict[str, Any]) -> dict[str, Any]:
    """A rule with its lists sorted, in the order RBAC prints them."""
    out: dict[str, Any] = {
        key: sorted(rule[key]) for key in ("apiGroups", "resources", "verbs") if key in rule
    }
    for key in ("resourceNames", "nonResourceURLs"):
        if rule.get(key):
            out[key] = sorted(rule[key])
    return out


def _render(chart: Path, values: dict[str, Any], label: str) -> list[dict[str, Any]]:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        yaml.safe_dump(values, handle)
        handle.flush()
        result = subprocess.run(
            [str(HELM), "template", "gpu-operator", str(chart), "--namespace", TARGET_NAMESPACE,
             "--include-crds", "--kube-version", "v1.36.0",
             "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
             # the DRA stack (spec.stack DRA) renders only where resource.k8s.io is served
             "--api-versions", "resource.k8s.io/v1/DeviceClass", "-f", handle.name],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    if result.returncode != 0:
        raise RbacError(f"helm template failed for {label}: {result.stderr.strip()}")
    return [d for d in yaml.safe_load_all(result.stdout) if isinstance(d, dict) and d]


def _value_sets() -> Iterator[tuple[str, dict[str, Any]]]:
    """The values of each golden scenario, alone and with every switch on; duplicates once."""
    seen: set[str] = set()
    for plan in sorted(SCENARIOS.glob("*/plan.yaml")):
        values = (yaml.safe_load(plan.read_text()) or {}).get("values") or {}
        for label, candidate in ((plan.parent.name, values),
                                 (f"{plan.parent.name}+every switch",
                                  _merged(values, EVERY_SWITCH))):  # fmt: skip
            key = yaml.safe_dump(candidate, sort_keys=True)
            if key not in seen:
                seen.add(key)
                yield label, candidate


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        old = out.get(key)
        out[key] = (
            _merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return out


def supported_charts() -> list[Path]:
    versions = sorted(p.stem for p in (ROOT / "values-rules" / "charts").glob("v*.yaml"))
    charts = [CHARTS / f"gpu-operator-{v}.tgz" for v in versions]
    missing = [c.name for c in charts if not c.exists()]
    if missing:
        raise RbacError(f"charts not found in {CHARTS}: {', '.join(missing)}")
    return charts


def collect() -> Rendered:
    rendered = Rendered()
    narrowings = Catalog(ROOT / "values-rules").chart_rbac.narrowings
    for chart in supported_charts():
        version = chart.stem.removeprefix("gpu-operator-")
        for name, values in _value_sets():
            label = f"{chart.name} with {name}"
            docs = narrowed(_render(chart, values, label), for_version(narrowings, version), label)
            _add(rendered, docs, label)
    check_bound(rendered)
    return rendered


def narrowed(docs: list[dict[str, Any]], narrowings: Iterable[RuleNarrowing],
             label: str) -> list[dict[str, Any]]:  # fmt: skip
    """The documents as the HelmRelease's post-renderer leaves them; then no role may still
    change or delete admission policies by any name (the module's own are among them)."""
    try:
        docs = apply(docs, narrowings)
    except NarrowingMismatch as err:
        raise RbacError(f"{label}: values-rules/chart-rbac.yaml does not fit: {err}") from err
    roles = [d for d in docs if d.get("kind") in ("Role", "ClusterRole")]
    for doc in roles:
        for rule in doc.get("rules") or []:
            if _changes_policies(rule):
                raise RbacError(
                    f"{label} renders {doc['kind']} {doc['metadata']['name']} with {rule}: it "
                    "could change or delete the module's admission policy kyma-gpu-release; "
                    "narrow it in values-rules/chart-rbac.yaml and review it"
                )
    return docs


def _changes_policies(rule: dict[str, Any]) -> bool:
    """An unnamed rule that may update, patch or delete admission policies or their bindings."""
    groups, resources = set(rule.get("apiGroups") or []), set(rule.get("resources") or [])
    writes = {"update", "patch", "delete", "deletecollection", "*"} & set(rule.get("verbs") or [])
    policies = {"validatingadmissionpolicies", "validatingadmissionpolicybindings", "*"}
    return bool(groups & {"admissionregistration.k8s.io", "*"} and resources & policies
                and writes and not rule.get("resourceNames"))  # fmt: skip


def check_bound(rendered: Rendered) -> None:
    """`bind` is granted on the roles the charts' bindings name: each must be a role the
    charts define (whose rules the account holds), never one that exists for someone else."""
    for plural in ("roles", "clusterroles"):
        foreign = rendered.bound.get(plural, set()) - rendered.names.get((RBAC, plural), set())
        if foreign:
            raise RbacError(
                f"the charts bind {plural} they do not define ({', '.join(sorted(foreign))}): "
                "the release account would bind rights it does not hold; review it"
            )


def _rule(group: str, resources: list[str], verbs: list[str], names: Iterable[str] = ()) -> Rule:
    rule: dict[str, Any] = {"apiGroups": [group], "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = sorted(names)
    return rule


def _limited(rendered: Rendered, group: str, resource: str, extra: list[str]) -> list[Rule]:
    """create/list/watch for the kind, every other verb (and `extra`) only on the chart's names.
    (The chart's roles, which the account holds too, may grant more: the admission policy
    holds it to these names.)"""
    names = _names(rendered, group, resource)
    return [_rule(group, [resource], ["create", "list", "watch"]),
            _rule(group, [resource], [*NAMED, *extra], names)]  # fmt: skip


def _names(rendered: Rendered, group: str, resource: str) -> set[str]:
    """The objects of a kind limited by name: the chart's, and the roles its bindings name."""
    names = rendered.names.get((group, resource), set())
    return names | rendered.bound.get(resource, set()) if group == RBAC else names


def _rules(rendered: Rendered, kinds: set[tuple[str, str]], namespaced: bool) -> list[Rule]:
    rules = []
    by_group: dict[str, list[str]] = {}
    for group, resource in sorted(kinds):
        if group in (RBAC, CRD_GROUP):
            # `bind` on the chart's role names only: Helm applies a hook's role and binding in
            # one batch (the chart's pre-upgrade CRD hook), and without `bind` the API server
            # must read the role to check the binding, which fails while the role is not there
            # yet. It adds no power: holding the role's rules already lets it bind the role.
            extra = ["bind"] if resource in ("roles", "clusterroles") else []
            rules += _limited(rendered, group, resource, extra)
        elif (group, resource) == ("", "namespaces"):
            rules.append(_rule("", ["namespaces"], ["get"], [TARGET_NAMESPACE]))
        else:
            by_group.setdefault(group, []).append(resource)
    if namespaced:  # Helm keeps its release records as Secrets in the storage namespace
        by_group.setdefault("", []).append("secrets")
        rules += STATUS_READS
    rules += [_rule(g, sorted(set(r)), list(ALL)) for g, r in sorted(by_group.items())]
    if not namespaced:  # `createNamespace` only looks the module's namespace up
        rules.append(_rule("", ["namespaces"], ["get"], [TARGET_NAMESPACE]))
    # What the chart's own roles grant, so that it may create and bind them (no escalate).
    rules += rendered.namespaced_rules if namespaced else rendered.cluster_rules
    return _dedupe(rules)


def _dedupe(rules: list[Rule]) -> list[Rule]:
    out: list[Rule] = []
    for rule in rules:
        if rule not in out:
            out.append(rule)
    return out


def manifests(rendered: Rendered) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": "gpu-operator-release",
              "app.kubernetes.io/part-of": "kyma-gpu"}  # fmt: skip
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": MODULE_NAMESPACE}
    name = "kyma-gpu-release"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SERVICE_ACCOUNT, "namespace": MODULE_NAMESPACE, "labels": labels}},
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole",
         "metadata": {"name": name, "labels": labels},
         "rules": _rules(rendered, rendered.cluster, namespaced=False)},
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name, "labels": labels},
         "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
         "subjects": [subject]},
        {"apiVersion": f"{RBAC}/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": TARGET_NAMESPACE, "labels": labels},
         "rules": _rules(rendered, rendered.namespaced, namespaced=True)},
        {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": TARGET_NAMESPACE, "labels": labels},
         "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
         "subjects": [subject]},
        *admission_policy(rendered, labels),
    ]  # fmt: skip


ACCOUNT = f"system:serviceaccount:{MODULE_NAMESPACE}:{SERVICE_ACCOUNT}"
POLICY = "kyma-gpu-release"
LEASE_RENEWALS = [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["*"],
                   "resources": ["leases"], "operations": ["UPDATE"]}]  # fmt: skip
"""Not matched: every kubelet renews its Lease every 10 s (2,000 updates/s at 20,000 Nodes), and
RBAC already limits the account's Lease updates by name (benchmarks/admission_cost.py)."""


def _cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in sorted(items)) + "]"


def _kind_key(group: str, resource: str) -> str:
    """How the policy names a resource: group/resource, the core group empty ("/secrets")."""
    return f"{group}/{resource}"


def _names_map(rendered: Rendered) -> str:
    """CEL: kind -> the names the charts give their RBAC objects and CRDs."""
    kinds = rendered.cluster | rendered.namespaced
    named = {_kind_key(g, r): _names(rendered, g, r) for g, r in kinds if g in (RBAC, CRD_GROUP)}
    return "{" + ", ".join(f"'{k}': {_cel_list(v)}" for k, v in sorted(named.items())) + "}"


def _accounts_map(rendered: Rendered) -> str:
    """CEL: "<group>/<resource>/<name>" of each workload -> the accounts its pods run as."""
    return "{" + ", ".join(f"'{k}': {_cel_list(v)}" for k, v in
                           sorted(rendered.workloads.items())) + "}"  # fmt: skip


def _policy_validations(rendered: Rendered) -> list[dict[str, str]]:
    """What the release account may write, in CEL: the chart's objects and nothing else."""
    cluster_kinds = sorted(_kind_key(g, r) for g, r in rendered.cluster if r != "namespaces")
    who = f"the release account {SERVICE_ACCOUNT} ({MODULE_NAMESPACE})"
    subject = "s.kind + ' ' + (has(s.namespace) ? s.namespace : variables.ns) + '/' + s.name"
    good_subject = (f"s.kind == 'ServiceAccount' && (has(s.namespace) ? s.namespace : "
                    f"variables.ns) == '{TARGET_NAMESPACE}' && "
                    f"s.name in {_cel_list(rendered.subjects)}")  # fmt: skip
    roles = {p: sorted(rendered.bound.get(p, set())) for p in ("roles", "clusterroles")}
    role_ref = (f"object.roleRef.name in (object.roleRef.kind == 'ClusterRole' ? "
                f"{_cel_list(roles['clusterroles'])} : {_cel_list(roles['roles'])})")  # fmt: skip
    return [
        {"expression": f"variables.ns == '' || variables.ns == '{TARGET_NAMESPACE}'",
         "messageExpression": f"'{who} writes only in namespace {TARGET_NAMESPACE}, where the "
                              "chart is installed; refused: ' + variables.what + ' in namespace '"
                              " + variables.ns"},
        {"expression": f"variables.ns != '' || variables.kind in {_cel_list(cluster_kinds)}",
         "messageExpression": f"'{who} writes only the cluster-scoped kinds the supported charts "
                              f"render ({', '.join(cluster_kinds)}); refused: ' + variables.what"},
        {"expression": "!(variables.kind in variables.names) || "
                       "variables.target in variables.names[variables.kind]",
         "messageExpression": f"'{who} writes RBAC objects and CRDs only by the names the "
                              "supported charts give them; refused: ' + variables.what"},
        {"expression": "!variables.binding || !has(object.subjects) || "
                       f"object.subjects.all(s, {good_subject})",
         "messageExpression": f"'{who} binds roles only to the ServiceAccounts of the chart in "
                              f"{TARGET_NAMESPACE} ({', '.join(sorted(rendered.subjects))}); "
                              "refused: ' + variables.what + ' naming ' + object.subjects"
                              f".filter(s, !({good_subject})).map(s, {subject})[0]"},
        *_workload_validations(rendered, who),
        {"expression": f"!variables.binding || {role_ref}",
         "messageExpression": f"'{who} binds only the roles of the chart; refused: ' + "
                              "variables.what + ' to ' + object.roleRef.kind + ' ' + "
                              "object.roleRef.name"},
    ]  # fmt: skip


def _workload_validations(rendered: Rendered, who: str) -> list[dict[str, str]]:
    """Issue 32, finding 2: nothing the release account writes runs as another account than
    the chart's own workload does, and it mints no token: only the namespaced kinds the charts
    render, no subresource, no Secret of a type the charts do not render (Helm's release
    history aside), every workload by the chart's name and with its ServiceAccount."""
    kinds = sorted({_kind_key(g, r) for g, r in rendered.namespaced} | {"/secrets"})
    types = sorted(rendered.secret_types | {HELM_STORAGE})
    workload = (f"variables.writes && variables.kind in "
                f"{_cel_list(_kind_key(g, r) for g, r in WORKLOADS)}")  # fmt: skip
    key = "variables.kind + '/' + variables.target"
    runs_as = ("(has(object.spec.template.spec.serviceAccountName) ? "
               "object.spec.template.spec.serviceAccountName : 'default')")  # fmt: skip
    return [
        {"expression": "variables.subresource == ''",
         "messageExpression": f"'{who} writes no subresource; refused: ' + variables.what"},
        {"expression": f"variables.ns == '' || variables.kind in {_cel_list(kinds)}",
         "messageExpression": f"'{who} writes only the namespaced kinds the supported charts "
                              f"render ({', '.join(kinds)}); refused: ' + variables.what"},
        {"expression": "!variables.writes || variables.kind != '/secrets' || "
                       f"(has(object.type) ? object.type : 'Opaque') in {_cel_list(types)}",
         "messageExpression": f"'{who} writes only Secrets of the types the charts render and "
                              f"Helm keeps ({', '.join(types)}); refused: ' + variables.what + "
                              "' of type ' + object.type"},
        {"expression": f"!({workload}) || ({key} in variables.accounts && "
                       f"{runs_as} in variables.accounts[{key}])",
         "messageExpression": f"'{who} writes only the workloads of the chart, each running as "
                              "the chart\\'s ServiceAccount for it; refused: ' + variables.what"
                              f" + ' running as ' + {runs_as}"},
    ]  # fmt: skip


def admission_policy(rendered: Rendered, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy (and its binding) on the release account's requests."""
    variables = [
        {"name": "names", "expression": _names_map(rendered)},
        {"name": "ns",
         "expression": "has(request.namespace) ? request.namespace : ''"},
        {"name": "target", "expression": "has(request.name) ? request.name : ''"},
        {"name": "subresource",
         "expression": "has(request.subResource) ? request.subResource : ''"},
        {"name": "kind",
         "expression": "request.resource.group + '/' + request.resource.resource"},
        {"name": "what",
         "expression": "request.operation + ' ' + request.resource.resource + "
                       "(variables.subresource != '' ? '/' + variables.subresource : '') + "
                       "(variables.target != '' ? ' ' + variables.target : '')"},
        {"name": "accounts", "expression": _accounts_map(rendered)},
        {"name": "writes", "expression": "request.operation in ['CREATE', 'UPDATE']"},
        {"name": "binding",
         "expression": "request.operation != 'DELETE' && request.operation != 'CONNECT' && "
                       f"request.resource.group == '{RBAC}' && variables.subresource == '' && "
                       "request.resource.resource in ['rolebindings', 'clusterrolebindings']"},
    ]  # fmt: skip
    rules = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"],
              "operations": ["CREATE", "UPDATE", "DELETE", "CONNECT"], "scope": "*"}]  # fmt: skip
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": rules, "excludeResourceRules": LEASE_RENEWALS},
        "matchConditions": [{"name": "the-release-account",
                             "expression": f"request.userInfo.username == '{ACCOUNT}'"}],
        "variables": variables,
        "validations": _policy_validations(rendered),
    }  # fmt: skip
    api = "admissionregistration.k8s.io/v1"
    return [
        {"apiVersion": api, "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": POLICY, "labels": labels}, "spec": spec},
        {"apiVersion": api, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": POLICY, "labels": labels},
         "spec": {"policyName": POLICY, "validationActions": ["Deny"]}},
    ]  # fmt: skip


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


HEADER = """\
# Generated by `make release-rbac` (hack/release_rbac.py) from the rendered NVIDIA GPU Operator
# charts in values-rules/charts/. Do not edit: `make check` fails when a chart needs more.
#
# helm-controller runs the gpu-operator HelmRelease as this ServiceAccount (Flux's
# multi-tenancy pattern) instead of its own cluster-admin rights. It may write the kinds the
# chart renders, and holds what the chart's own Roles and ClusterRoles grant (no escalate;
# bind on their names only), so it can create and bind those and nothing beyond what it holds.
# The admission policy kyma-gpu-release holds its writes to the chart's namespace, kinds,
# names and subjects.
"""


def render_file(rendered: Rendered) -> str:
    body = yaml.dump_all(manifests(rendered), Dumper=_NoAliases, sort_keys=False,
                         default_flow_style=False)  # fmt: skip
    return HEADER + "---\n" + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is not current")
    args = parser.parse_args(argv)
    if not HELM.exists():
        print(f"release-rbac: {HELM} missing; run `make tools`", file=sys.stderr)
        return 2
    try:
        text = render_file(collect())
    except RbacError as err:
        print(f"release-rbac: {err}", file=sys.stderr)
        return 1
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            where = OUT.relative_to(ROOT)
            message = f"{where} is not what the supported charts need"
            print(f"release-rbac: {message}; run `make release-rbac`, review the diff, and "
                  "commit it", file=sys.stderr)  # fmt: skip
            return 1
        print(f"release-rbac: {OUT.relative_to(ROOT)} covers every supported chart")
        return 0
    OUT.write_text(text)
    print(f"release-rbac: wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
