#!/usr/bin/env python3
"""Render the kustomize bases with kubectl and check the module's rules on them.

    hack/check_manifests.py            # or: KUBECTL=/path/to/kubectl hack/check_manifests.py

Checked (each failure names the object and the rule):

  labels    every object of config/default, config/install, config/module-bundle
            and flux carries kyma-project.io/module=gpu,
            app.kubernetes.io/{name,part-of=kyma-gpu,managed-by=kustomize,
            version=0.1.0} (flux: managed-by=kyma-gpu and gpu.kyma-project.io/flux=provided,
            the manager installs it); pod templates carry module and name.
  rbac      no wildcard in apiGroups/resources/verbs, no nonResourceURLs, no
            escalate/bind/impersonate, anywhere in our own roles, except by
            resourceNames on the module's own roles (escalate, bind) and
            ServiceAccounts (impersonate); the GPU manager's roles never mention
            Secrets; the only binding to a built-in role is helm-controller ->
            cluster-admin (documented in flux/helm-controller/rbac.yaml); a
            ClusterRole aggregated into the stock
            `view` only reads (config/rbac/aggregate_user_roles.yaml).
  manager   two replicas, RollingUpdate with maxUnavailable 0, a
            PodDisruptionBudget, `--leader-election` and a Lease Role, non-root,
            read-only root filesystem, no privilege escalation, all
            capabilities dropped, seccomp RuntimeDefault, requests and limits,
            liveness GET /healthz on 8080; a NetworkPolicy selects the manager;
            priorityClassName gpu-priority-class and that PriorityClass (not the
            global default).
  no-flux   the module manifest (config/module-bundle, and the committed
            config/module/manifest.yaml that the ModuleTemplate points at) has no Flux
            CRD, no Flux controller, no Flux bundle object: the manager provides Flux
            itself when the cluster has none.
  scanned   every image of the module manifest and of the Flux bundle is in
            config/module/sec-scanners-config.yaml `bdba`; third-party images there
            follow Kyma's europe-docker.pkg.dev/kyma-project/prod/external/ convention.
  metrics   readiness GET /readyz and `--metrics-address` on the port `metrics`
            (8081), which the Service gpu-manager-metrics exposes.
  policies  config/default takes the NetworkPolicies from the component
            config/components/network-policy (the switch); none of the module's
            policies selects every pod (`podSelector: {}`); one admits the
            metrics port to pods labelled networking.kyma-project.io/metrics-scraping.
  optional  no ServiceMonitor in config/default (GPU metrics: spec.components.serviceMonitor);
            config/default + config/components/service-monitor renders one that
            selects the metrics Service by its labels and port name.
  flux      images are Kyma's mirrors of the tools/versions.env versions; containers
            hardened like the manager's.

Needs PyYAML (the project's venv has it) and kubectl (tools/bin/kubectl).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
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
BASES = ["config/default", "config/install", "config/module-bundle", "flux"]
MODULE_MANIFEST = ROOT / "config" / "module" / "manifest.yaml"
SEC_SCANNERS = ROOT / "config" / "module" / "sec-scanners-config.yaml"
THIRD_PARTY_PREFIX = "europe-docker.pkg.dev/kyma-project/prod/external/"
FLUX_LABELS = {"app.kubernetes.io/managed-by": "kyma-gpu", "gpu.kyma-project.io/flux": "provided"}
FLUX_CONTROLLERS = (
    "source-controller",
    "helm-controller",
    "kustomize-controller",
    "notification-controller",
    "image-reflector-controller",
    "image-automation-controller",
)
PRIORITY_CLASS = "gpu-priority-class"
READ_VERBS = {"get", "list", "watch"}
MANAGER_NAMESPACE = "kyma-system"
METRICS_PORT = 8081
METRICS_SERVICE = f"Service/{MANAGER_NAMESPACE}/gpu-manager-metrics"
SCRAPER_LABEL = "networking.kyma-project.io/metrics-scraping"
RBAC_KINDS = {"Role", "ClusterRole"}
DANGEROUS_VERBS = {"escalate", "bind", "impersonate"}

problems: list[str] = []


def fail(where: str, rule: str, message: str) -> None:
    problems.append(f"{where}: [{rule}] {message}")


def render(base: str, path: Path | None = None) -> list[dict[str, Any]]:
    result = subprocess.run(
        [KUBECTL, "kustomize", str(path or ROOT / base)],
        capture_output=True,
        text=True,
        check=False,
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
    want = {**COMMON_LABELS, **FLUX_LABELS} if base == "flux" else COMMON_LABELS
    for obj in objs:
        labels = obj.get("metadata", {}).get("labels") or {}
        for key, value in want.items():
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


OWN: dict[str, set[str]] = {"roles": set(), "serviceaccounts": set()}
"""Names of the module's own Roles/ClusterRoles and ServiceAccounts, over every base."""


def own_names_only(rule: dict[str, Any]) -> set[str]:
    """The dangerous verbs a rule may have because it names only the module's own objects:
    escalate/bind on its own Roles/ClusterRoles (the manager installs the Flux bundle's RBAC;
    those roles are checked here like every other), impersonate on its own ServiceAccounts
    (helm-controller acts as gpu-operator-release, whose RBAC is generated and checked)."""
    names = set(rule.get("resourceNames") or [])
    resources = set(rule.get("resources") or [])
    if not names:
        return set()
    if resources <= {"roles", "clusterroles"} and names <= OWN["roles"]:
        return {"escalate", "bind"}
    if resources == {"serviceaccounts"} and names <= OWN["serviceaccounts"]:
        return {"impersonate"}
    return set()


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
                bad -= own_names_only(rule)
                if bad:
                    fail(where, "rbac", f"dangerous verbs {sorted(bad)}")
                if obj["metadata"]["name"] == "gpu-manager":
                    resources = set(rule.get("resources") or [])
                    if {"secrets", "*"} & resources:
                        fail(where, "rbac", "the GPU manager must not access Secrets")
                labels = obj["metadata"].get("labels") or {}
                if (
                    kind == "ClusterRole"
                    and labels.get("rbac.authorization.k8s.io/aggregate-to-view") == "true"
                    and set(rule.get("verbs") or []) - READ_VERBS
                ):
                    fail(where, "rbac", "a role aggregated into `view` may only read")
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
    check_metrics(base, by_id, c, ports)
    if not str(c.get("image", "")).startswith(
        "europe-docker.pkg.dev/kyma-project/prod/gpu-manager:"
    ):
        fail(base, "manager", f"unexpected image {c.get('image')}")
    role = by_id.get(f"Role/{MANAGER_NAMESPACE}/gpu-manager") or {}
    if not any("leases" in (r.get("resources") or []) for r in role.get("rules") or []):
        fail(base, "manager", "the manager's Role does not grant its Lease")
    if "CustomResourceDefinition/gpus.gpu.kyma-project.io" not in by_id:
        fail(base, "manager", "the Gpu CRD is not rendered")
    if pod.get("priorityClassName") != PRIORITY_CLASS:
        fail(base, "manager", f"priorityClassName is not {PRIORITY_CLASS}")
    priority = by_id.get(f"PriorityClass/{PRIORITY_CLASS}")
    if priority is None:
        fail(base, "manager", f"PriorityClass {PRIORITY_CLASS} not rendered")
    elif priority.get("globalDefault"):
        fail(base, "manager", f"PriorityClass {PRIORITY_CLASS} must not be the global default")
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


def check_metrics(
    base: str, by_id: dict[str, dict[str, Any]], c: dict[str, Any], ports: dict[str, Any]
) -> None:
    """Readiness and /metrics on the port `metrics`, and the Service in front of it."""
    if ports.get("metrics") != METRICS_PORT:
        fail(base, "metrics", f"no container port `metrics` {METRICS_PORT}: {ports}")
    args = " ".join((c.get("command") or []) + (c.get("args") or []))
    if f"--metrics-address 0.0.0.0:{METRICS_PORT}" not in args:
        fail(base, "metrics", f"command/args lack --metrics-address 0.0.0.0:{METRICS_PORT}")
    probe = (c.get("readinessProbe") or {}).get("httpGet") or {}
    if probe.get("path") != "/readyz" or probe.get("port") not in ("metrics", METRICS_PORT):
        fail(base, "metrics", f"readiness probe is {probe}, want GET /readyz on `metrics`")
    service = by_id.get(METRICS_SERVICE) or {}
    service_ports = {p.get("name"): p for p in (service.get("spec") or {}).get("ports") or []}
    if (service_ports.get("metrics") or {}).get("targetPort") not in ("metrics", METRICS_PORT):
        fail(base, "metrics", f"{METRICS_SERVICE} does not expose the port `metrics`")


def check_policies(base: str, objs: list[dict[str, Any]]) -> None:
    """The module's NetworkPolicies: switchable, never for every pod, one for the scrape."""
    kustomization = yaml.safe_load((ROOT / "config/default/kustomization.yaml").read_text())
    if "../components/network-policy" not in (kustomization.get("components") or []):
        fail(base, "policies", "config/default does not list ../components/network-policy")
    ours = [o for o in objs if o.get("kind") == "NetworkPolicy"
            and o["metadata"].get("namespace") == MANAGER_NAMESPACE]  # fmt: skip
    for policy in ours:
        selector = policy["spec"].get("podSelector") or {}
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            fail(f"{base} {ident(policy)}", "policies", "podSelector {} selects every pod")
    scrape = [
        rule for policy in ours for rule in policy["spec"].get("ingress") or []
        if any(p.get("port") == METRICS_PORT for p in rule.get("ports") or [])
        and any(SCRAPER_LABEL in ((peer.get("podSelector") or {}).get("matchLabels") or {})
                for peer in rule.get("from") or [])
    ]  # fmt: skip
    if not scrape:
        fail(base, "policies", f"no policy admits {METRICS_PORT} to pods with {SCRAPER_LABEL}")


def check_service_monitor(default: list[dict[str, Any]]) -> None:
    """config/default + the opt-in component: a ServiceMonitor that finds the Service."""
    with tempfile.TemporaryDirectory() as overlay:
        relative = os.path.relpath(ROOT, overlay)  # kustomize takes no absolute paths
        (Path(overlay) / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"resources: [{relative}/config/default]\n"
            f"components: [{relative}/config/components/service-monitor]\n"
        )
        objs = render("config/default + components/service-monitor", Path(overlay))
    check_labels("config/components/service-monitor", objs)
    monitors = [o for o in objs if o.get("kind") == "ServiceMonitor"]
    service = next((o for o in default if ident(o) == METRICS_SERVICE), None)
    if len(monitors) != 1 or service is None:
        fail("config/components/service-monitor", "optional", "no ServiceMonitor or no Service")
        return
    spec, labels = monitors[0]["spec"], service["metadata"].get("labels") or {}
    wanted = (spec.get("selector") or {}).get("matchLabels") or {}
    ports = [e.get("port") for e in spec.get("endpoints") or []]
    if any(labels.get(k) != v for k, v in wanted.items()) or ports != ["metrics"]:
        fail("config/components/service-monitor", "optional",
             f"selects {wanted} port {ports}; the Service has {labels}")  # fmt: skip


def images_of(objs: list[dict[str, Any]]) -> list[str]:
    return [
        str(c.get("image"))
        for o in objs
        if o.get("kind") in {"Deployment", "DaemonSet", "StatefulSet", "Job"}
        for c in containers_of(o)
    ]


def controller_of(image: str) -> str:
    """`source-controller` from any registry's .../fluxcd/source-controller:TAG[@DIGEST]."""
    return image.split("@", 1)[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]


def check_flux(objs: list[dict[str, Any]]) -> None:
    versions: dict[str, str] = {}
    for line in (ROOT / "tools" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip().strip("\"'")
    want = {
        name: f"{THIRD_PARTY_PREFIX}fluxcd/{name}:{versions.get(key)}"
        for name, key in (
            ("source-controller", "SOURCE_CONTROLLER_VERSION"),
            ("helm-controller", "HELM_CONTROLLER_VERSION"),
        )
    }
    # By image, not by name: the bundle names its Deployments after the module.
    deployments = {
        controller_of(containers_of(o)[0]["image"]): o
        for o in objs
        if o.get("kind") == "Deployment" and containers_of(o)
    }
    for name, image in want.items():
        dep = deployments.get(name)
        if dep is None:
            fail("flux", "flux", f"no Deployment runs {name}")
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
    source = deployments.get("source-controller")
    pod_labels = (source or {}).get("spec", {}).get("template", {}).get("metadata", {})
    pod_labels = pod_labels.get("labels") or {}
    if source is not None and not any(
        o.get("kind") == "Service"
        and (o.get("spec") or {}).get("selector")
        and all(pod_labels.get(k) == v for k, v in o["spec"]["selector"].items())
        for o in objs
    ):
        fail("flux", "flux", "no Service selects source-controller (artifact storage)")


def flux_objects(objs: list[dict[str, Any]]) -> list[str]:
    """What of Flux is in a rendered manifest: its CRDs, its controllers, its bundle's objects,
    its namespace."""
    found = []
    for obj in objs:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if obj.get("kind") == "CustomResourceDefinition" and str(
            (obj.get("spec") or {}).get("group", "")
        ).endswith(".fluxcd.io"):
            found.append(f"{ident(obj)} (a Flux CRD)")
        elif any(
            "fluxcd" in image or controller_of(image) in FLUX_CONTROLLERS
            for image in images_of([obj])
        ):
            found.append(f"{ident(obj)} (a Flux controller)")
        elif labels.get("gpu.kyma-project.io/flux") or (
            obj.get("kind") == "Namespace" and meta.get("name") == "flux-system"
        ):
            found.append(f"{ident(obj)} (part of a Flux install)")
    return found


def check_no_flux(where: str, objs: list[dict[str, Any]]) -> None:
    for found in flux_objects(objs):
        fail(
            where,
            "no-flux",
            f"{found}: the module manifest must not contain Flux; the manager installs it "
            "when the cluster has none (config/module-bundle/kustomization.yaml)",
        )


def check_scanned(module: list[dict[str, Any]], flux: list[dict[str, Any]]) -> None:
    bdba = [str(i) for i in (yaml.safe_load(SEC_SCANNERS.read_text()) or {}).get("bdba") or []]
    where = str(SEC_SCANNERS.relative_to(ROOT))
    for image in images_of(module) + images_of(flux):
        # The release pins the manager by digest (hack/render_module_template.py --release);
        # the scanners list it by tag.
        if image.split("@", 1)[0] not in bdba:
            fail(where, "scanned", f"image {image} is deployed but not listed in bdba")
    for image in bdba:
        if "/kyma-project/prod/" not in image:
            fail(where, "scanned", f"bdba image {image} is not in Kyma's prod registry")
        elif image.split("/kyma-project/prod/", 1)[1].count("/") and not image.startswith(
            THIRD_PARTY_PREFIX
        ):
            fail(where, "scanned", f"third-party image {image} is not under {THIRD_PARTY_PREFIX}")


def main() -> int:
    if not Path(KUBECTL).exists():
        print(f"check-manifests: kubectl not found at {KUBECTL} (set KUBECTL)", file=sys.stderr)
        return 2
    rendered = {base: render(base) for base in BASES}
    for objs in rendered.values():
        for obj in objs:
            if obj.get("kind") in RBAC_KINDS:
                OWN["roles"].add(obj["metadata"]["name"])
            elif obj.get("kind") == "ServiceAccount":
                OWN["serviceaccounts"].add(obj["metadata"]["name"])
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
    check_policies("config/default", rendered["config/default"])
    check_service_monitor(rendered["config/default"])
    check_flux(rendered["flux"])
    committed = [d for d in yaml.safe_load_all(MODULE_MANIFEST.read_text()) if d]
    for where, objs in (
        ("config/default", rendered["config/default"]),
        ("config/module-bundle", rendered["config/module-bundle"]),
        (str(MODULE_MANIFEST.relative_to(ROOT)), committed),
    ):
        check_no_flux(where, objs)
    check_scanned(rendered["config/module-bundle"], rendered["flux"])
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"check-manifests: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check-manifests: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
