#!/usr/bin/env python3
"""Render the kustomize bases with kubectl and check the module's rules on them.

    hack/check_manifests.py            # or: KUBECTL=/path/to/kubectl hack/check_manifests.py

Checked (each failure names the object and the rule):

  labels    every object of config/default, config/install
            and flux carries kyma-project.io/module=gpu,
            app.kubernetes.io/{name,part-of=kyma-gpu,managed-by=kustomize,
            version=0.1.0}; pod templates carry module and name.
  rbac      no wildcard in apiGroups/resources/verbs, no nonResourceURLs, no
            escalate/bind/impersonate, anywhere in our own roles; the GPU
            manager's roles never mention Secrets; the only binding to a
            built-in role is helm-controller -> cluster-admin (documented in
            flux/helm-controller/rbac.yaml).
  manager   two replicas, RollingUpdate with maxUnavailable 0, a
            PodDisruptionBudget, `--leader-election` and a Lease Role, non-root,
            read-only root filesystem, no privilege escalation, all
            capabilities dropped, seccomp RuntimeDefault, requests and limits,
            liveness GET /healthz on 8080; a NetworkPolicy selects the manager.
  optional  no ServiceMonitor in config/default (GPU metrics: spec.components.serviceMonitor).
  flux      images match tools/versions.env; containers hardened like the
            manager's.

Needs PyYAML (the project's venv has it) and kubectl (tools/bin/kubectl).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
KUBECTL = os.environ.get("KUBECTL", str(ROOT / "tools" / "bin" / "kubectl"))

COMMON_LABELS = {
    "kyma-project.io/module": "gpu",
    "app.kubernetes.io/part-of": "kyma-gpu",
    "app.kubernetes.io/managed-by": "kustomize",
    "app.kubernetes.io/version": "0.1.0",
}
BASES = ["config/default", "config/install", "flux"]
MANAGER_NAMESPACE = "kyma-system"
RBAC_KINDS = {"Role", "ClusterRole"}
DANGEROUS_VERBS = {"escalate", "bind", "impersonate"}

problems: list[str] = []


def fail(where: str, rule: str, message: str) -> None:
    problems.append(f"{where}: [{rule}] {message}")


def render(base: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / base)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        fail(base, "render", result.stderr.strip())
        return []
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def ident(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{(ns + '/') if ns else ''}{meta.get('name')}"


def check_labels(base: str, objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        labels = obj.get("metadata", {}).get("labels") or {}
        for key, value in COMMON_LABELS.items():
            if labels.get(key) != value:
                fail(f"{base} {ident(obj)}", "labels", f"{key}={labels.get(key)!r}, want {value!r}")
        if not labels.get("app.kubernetes.io/name"):
            fail(f"{base} {ident(obj)}", "labels", "app.kubernetes.io/name is missing")
        template = obj.get("spec", {}).get("template") if obj.get("kind") == "Deployment" else None
        if template is not None:
            tlabels = template.get("metadata", {}).get("labels") or {}
            for key in ("kyma-project.io/module", "app.kubernetes.io/name"):
                if not tlabels.get(key):
                    fail(f"{base} {ident(obj)}", "labels", f"pod template lacks {key}")


def check_rbac(base: str, objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        kind = obj.get("kind")
        if kind in RBAC_KINDS:
            for i, rule in enumerate(obj.get("rules") or []):
                where = f"{base} {ident(obj)} rule {i}"
                if rule.get("nonResourceURLs"):
                    fail(where, "rbac", "nonResourceURLs granted")
                for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                    if "*" in (rule.get(field) or []):
                        fail(where, "rbac", f"wildcard in {field}")
                bad = DANGEROUS_VERBS & set(rule.get("verbs") or [])
                # The release ServiceAccount may escalate/bind the chart's own roles, by name.
                if obj["metadata"]["name"] == "kyma-gpu-release" and rule.get("resourceNames"):
                    bad -= {"escalate", "bind"}
                if bad:
                    fail(where, "rbac", f"dangerous verbs {sorted(bad)}")
                if obj["metadata"]["name"] == "gpu-manager":
                    resources = set(rule.get("resources") or [])
                    if {"secrets", "*"} & resources:
                        fail(where, "rbac", "the GPU manager must not access Secrets")
        if kind in {"RoleBinding", "ClusterRoleBinding"}:
            ref = obj.get("roleRef", {}).get("name")
            own = {o["metadata"]["name"] for o in objs if o.get("kind") in RBAC_KINDS}
            if ref not in own:
                subjects = [s.get("name") for s in obj.get("subjects") or []]
                if not (ref == "cluster-admin" and subjects == ["helm-controller"]):
                    fail(
                        f"{base} {ident(obj)}",
                        "rbac",
                        f"binds role {ref!r} that this base does not define",
                    )


def containers_of(dep: dict[str, Any]) -> list[dict[str, Any]]:
    spec = dep["spec"]["template"]["spec"]
    return list(spec.get("containers") or []) + list(spec.get("initContainers") or [])


def check_hardening(base: str, dep: dict[str, Any]) -> None:
    pod = dep["spec"]["template"]["spec"]
    psc = pod.get("securityContext") or {}
    for c in containers_of(dep):
        where = f"{base} {ident(dep)} container {c['name']}"
        sc = c.get("securityContext") or {}
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            fail(where, "hardening", "runAsNonRoot is not set")
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(where, "hardening", "readOnlyRootFilesystem is not true")
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(where, "hardening", "allowPrivilegeEscalation is not false")
        if (sc.get("capabilities") or {}).get("drop") != ["ALL"]:
            fail(where, "hardening", "capabilities.drop is not [ALL]")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp != "RuntimeDefault":
            fail(where, "hardening", f"seccompProfile {seccomp!r}, want RuntimeDefault")
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for key in ("cpu", "memory"):
                if key not in (res.get(part) or {}):
                    fail(where, "hardening", f"resources.{part}.{key} missing")
        if not c.get("livenessProbe"):
            fail(where, "hardening", "no livenessProbe")


def check_manager(base: str, objs: list[dict[str, Any]]) -> None:
    by_id = {ident(o): o for o in objs}
    dep = by_id.get(f"Deployment/{MANAGER_NAMESPACE}/gpu-manager")
    if dep is None:
        fail(base, "manager", "Deployment kyma-system/gpu-manager not rendered")
        return
    check_hardening(base, dep)
    spec = dep["spec"]
    if spec.get("replicas") != 2:
        fail(base, "manager", f"replicas {spec.get('replicas')}, want 2 (one leads, one waits)")
    strategy = spec.get("strategy") or {}
    if (
        strategy.get("type") != "RollingUpdate"
        or (strategy.get("rollingUpdate") or {}).get("maxUnavailable") != 0
    ):
        fail(base, "manager", "strategy is not RollingUpdate with maxUnavailable 0")
    if f"PodDisruptionBudget/{MANAGER_NAMESPACE}/gpu-manager" not in by_id:
        fail(base, "manager", "no PodDisruptionBudget for the manager")
    pod = spec["template"]["spec"]
    if pod.get("serviceAccountName") != "gpu-manager":
        fail(base, "manager", "serviceAccountName is not gpu-manager")
    c = pod["containers"][0]
    args = (c.get("command") or []) + (c.get("args") or [])
    joined = " ".join(args)
    for needle in ("kyma-gpu run", "--leader-election", "--liveness http://0.0.0.0:8080/healthz"):
        if needle not in joined:
            fail(base, "manager", f"command/args lack {needle!r}: {joined}")
    probe = (c.get("livenessProbe") or {}).get("httpGet") or {}
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    port = ports.get(probe.get("port"), probe.get("port"))
    if probe.get("path") != "/healthz" or port != 8080:
        fail(base, "manager", f"liveness probe is {probe}, want GET /healthz on 8080")
    if not str(c.get("image", "")).startswith(
        "europe-docker.pkg.dev/kyma-project/prod/gpu-manager:"
    ):
        fail(base, "manager", f"unexpected image {c.get('image')}")
    role = by_id.get(f"Role/{MANAGER_NAMESPACE}/gpu-manager") or {}
    if not any("leases" in (r.get("resources") or []) for r in role.get("rules") or []):
        fail(base, "manager", "the manager's Role does not grant its Lease")
    if "CustomResourceDefinition/gpus.gpu.kyma-project.io" not in by_id:
        fail(base, "manager", "the Gpu CRD is not rendered")
    pod_labels = spec["template"]["metadata"]["labels"]
    selected = [
        o
        for o in objs
        if o.get("kind") == "NetworkPolicy"
        and o["metadata"].get("namespace") == MANAGER_NAMESPACE
        and all(
            pod_labels.get(k) == v
            for k, v in (o["spec"].get("podSelector", {}).get("matchLabels") or {}).items()
        )
    ]
    if not selected:
        fail(base, "manager", "no NetworkPolicy selects the manager pod")


def check_flux(objs: list[dict[str, Any]]) -> None:
    versions: dict[str, str] = {}
    for line in (ROOT / "tools" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip().strip("\"'")
    want = {
        name: f"ghcr.io/fluxcd/{name}:{versions.get(key)}"
        for name, key in (
            ("source-controller", "SOURCE_CONTROLLER_VERSION"),
            ("helm-controller", "HELM_CONTROLLER_VERSION"),
        )
    }
    deployments = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "Deployment"}
    for name, image in want.items():
        dep = deployments.get(name)
        if dep is None:
            fail("flux", "flux", f"Deployment {name} not rendered")
            continue
        got = dep["spec"]["template"]["spec"]["containers"][0]["image"]
        if got != image:
            fail(f"flux {ident(dep)}", "flux", f"image {got}, want {image} (tools/versions.env)")
        check_hardening("flux", dep)
    crds = {o["metadata"]["name"] for o in objs if o.get("kind") == "CustomResourceDefinition"}
    for crd in (
        "helmreleases.helm.toolkit.fluxcd.io",
        "helmrepositories.source.toolkit.fluxcd.io",
        "ocirepositories.source.toolkit.fluxcd.io",
        "helmcharts.source.toolkit.fluxcd.io",
    ):
        if crd not in crds:
            fail("flux", "flux", f"CRD {crd} not rendered")
    if not any(
        o.get("kind") == "Service" and o["metadata"]["name"] == "source-controller" for o in objs
    ):
        fail("flux", "flux", "Service source-controller (artifact storage) not rendered")


def main() -> int:
    if not Path(KUBECTL).exists():
        print(f"check-manifests: kubectl not found at {KUBECTL} (set KUBECTL)", file=sys.stderr)
        return 2
    rendered = {base: render(base) for base in BASES}
    for base, objs in rendered.items():
        check_labels(base, objs)
        check_rbac(base, objs)
        if base.startswith("config/"):
            check_manager(base, objs)
        kinds = Counter(o.get("kind") for o in objs)
        print(
            f"check-manifests: {base}: {len(objs)} objects "
            f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})"
        )
    if any(o.get("kind") == "ServiceMonitor" for o in rendered["config/default"]):
        fail("config/default", "optional", "ServiceMonitor must not be in the default render")
    check_flux(rendered["flux"])
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"check-manifests: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check-manifests: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
