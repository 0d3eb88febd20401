"""Derive the RBAC of the HelmRelease's ServiceAccount from the rendered NVIDIA charts.

helm-controller installs, upgrades and uninstalls the GPU operator chart as the ServiceAccount
`gpu-operator-release` (HelmRelease spec.serviceAccountName), not with its own cluster-admin
rights. This script renders every supported chart version (values-rules/charts/) with the
values of every golden scenario and with every optional component switched on, collects the
kinds and the RBAC objects the renders contain, and writes the ServiceAccount, a ClusterRole
for the cluster-scoped kinds and a Role in the target namespace for the namespaced ones:

- the chart's own Roles and ClusterRoles are not held: the ServiceAccount may `escalate` and
  `bind` exactly those names (resourceNames), so it can create them without holding what they
  grant;
- CustomResourceDefinitions, ClusterRoles and ClusterRoleBindings are limited by name wherever
  the API allows it (every verb except create, list and watch);
- a kind the script does not know stops it with the chart version that renders it.

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
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = doc["roleRef"]
            plural = "clusterroles" if ref["kind"] == "ClusterRole" else "roles"
            rendered.bound.setdefault(plural, set()).add(ref["name"])
            # Binding a role needs `bind` on it, even when the chart does not define it.
            (rendered.cluster if plural == "clusterroles" else rendered.namespaced).add(
                (RBAC, plural)
            )


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
    for chart in supported_charts():
        for name, values in _value_sets():
            label = f"{chart.name} with {name}"
            _add(rendered, _render(chart, values, label), label)
    return rendered


def _rule(group: str, resources: list[str], verbs: list[str], names: Iterable[str] = ()) -> dict:
    rule: dict[str, Any] = {"apiGroups": [group], "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = sorted(names)
    return rule


def _limited(rendered: Rendered, group: str, resource: str, extra: list[str]) -> list[dict]:
    """create/list/watch for the kind, every other verb (and `extra`) only on the chart's names."""
    names = rendered.names.get((group, resource), set())
    if resource in ("roles", "clusterroles"):
        names = names | rendered.bound.get(resource, set())
    return [_rule(group, [resource], ["create", "list", "watch"]),
            _rule(group, [resource], [*NAMED, *extra], names)]  # fmt: skip


def _rules(rendered: Rendered, kinds: set[tuple[str, str]], namespaced: bool) -> list[dict]:
    rules = []
    by_group: dict[str, list[str]] = {}
    for group, resource in sorted(kinds):
        if group == RBAC:
            extra = ["escalate", "bind"] if resource in ("roles", "clusterroles") else []
            rules += _limited(rendered, group, resource, extra)
        elif group == CRD_GROUP:
            rules += _limited(rendered, group, resource, [])
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
    return _dedupe(rules)


def _dedupe(rules: list[dict]) -> list[dict]:
    out: list[dict] = []
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
# chart renders, and the chart's own Roles and ClusterRoles only by name (escalate/bind).
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
