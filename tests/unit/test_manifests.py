"""The module's policy for its rendered manifests, one named test per rule.

The kustomize bases are rendered with tools/bin/kubectl (``KUBECTL`` overrides it); a missing
kubectl fails under ``CI=true`` and skips elsewhere (``make tools`` builds it). Schema
validity is kubeconform's job (hack/validate-manifests.sh, ``make check``); this file checks
what a schema cannot:

- labels: every object of config/default, config/install, config/module-bundle and flux
  (and the opt-in ServiceMonitor) carries kyma-project.io/module=gpu,
  app.kubernetes.io/{name,part-of=kyma-gpu,managed-by=kustomize,version=0.1.0}; Flux's
  objects also managed-by=kyma-gpu and gpu.kyma-project.io/flux=provided (the manager
  installs them); pod templates carry module and name.
- rbac: no wildcard, no nonResourceURLs, no escalate/bind/impersonate, except by
  resourceNames on the module's own roles (escalate, bind) and ServiceAccounts
  (impersonate); the GPU manager's roles never mention Secrets; the only binding to a role
  the base does not define is helm-controller -> cluster-admin (flux/helm-controller/
  rbac.yaml); a ClusterRole aggregated into the stock `view` only reads.
- manager: two replicas, RollingUpdate with maxUnavailable 0, a PodDisruptionBudget,
  `--leader-election` and a Lease Role, the liveness probe GET /healthz on 8080, the
  PriorityClass (not the global default), a NetworkPolicy that selects it; hardening (also
  for Flux's controllers): non-root, read-only root filesystem, no privilege escalation, all
  capabilities dropped, seccomp RuntimeDefault, requests and limits, a liveness probe.
- metrics: readiness GET /readyz and ``--metrics-address`` on the port `metrics` (8081),
  exposed by the Service gpu-manager-metrics.
- policies: config/default takes the NetworkPolicies from the component (the switch); no
  policy selects every pod; one admits the metrics port to the scrapers.
- optional: no ServiceMonitor in config/default; the component renders one that selects the
  metrics Service by its labels and port name.
- flux: images are Kyma's mirrors of the tools/versions.env versions, the CRDs the manager
  needs are there, a Service selects source-controller.
- no-flux: the module manifest (config/default, config/module-bundle, the committed
  config/module/manifest.yaml) holds no Flux CRD, controller or bundle object.
- scanned: every image deployed is in config/module/sec-scanners-config.yaml `bdba`, and
  third-party images there follow Kyma's .../prod/external/ convention.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.extensions.own_flux.bundle import IMAGE_ENV, FluxImages
from tests.unit.test_provision import bundle_images

Obj = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = Path(os.environ.get("KUBECTL", str(ROOT / "tools" / "bin" / "kubectl")))

BASES = ("config/default", "config/install", "config/module-bundle", "flux")
CONFIG_BASES = BASES[:3]
SERVICE_MONITOR = "config/components/service-monitor"
MODULE_MANIFEST = ROOT / "config" / "module" / "manifest.yaml"
SEC_SCANNERS = ROOT / "config" / "module" / "sec-scanners-config.yaml"
COMMON_LABELS = {
    "kyma-project.io/module": "gpu",
    "app.kubernetes.io/part-of": "kyma-gpu",
    "app.kubernetes.io/managed-by": "kustomize",
    "app.kubernetes.io/version": "0.1.0",
}
FLUX_LABELS = {"app.kubernetes.io/managed-by": "kyma-gpu", "gpu.kyma-project.io/flux": "provided"}
THIRD_PARTY_PREFIX = "europe-docker.pkg.dev/kyma-project/prod/external/"
MANAGER_IMAGE_PREFIX = "europe-docker.pkg.dev/kyma-project/prod/gpu-manager:"
FLUX_CONTROLLERS = (
    "source-controller",
    "helm-controller",
    "kustomize-controller",
    "notification-controller",
    "image-reflector-controller",
    "image-automation-controller",
)
FLUX_VERSIONS = {
    "source-controller": "SOURCE_CONTROLLER_VERSION",
    "helm-controller": "HELM_CONTROLLER_VERSION",
}
FLUX_CRDS = (
    "helmreleases.helm.toolkit.fluxcd.io",
    "helmrepositories.source.toolkit.fluxcd.io",
    "ocirepositories.source.toolkit.fluxcd.io",
    "helmcharts.source.toolkit.fluxcd.io",
)
NS = "kyma-system"
MANAGER = f"Deployment/{NS}/gpu-manager"
PRIORITY_CLASS = "gpu-priority-class"
METRICS_PORT = 8081
METRICS_SERVICE = f"Service/{NS}/gpu-manager-metrics"
SCRAPER_LABEL = "networking.kyma-project.io/metrics-scraping"
RBAC_KINDS = {"Role", "ClusterRole"}
BINDING_KINDS = {"RoleBinding", "ClusterRoleBinding"}
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}
READ_VERBS = {"get", "list", "watch"}
DANGEROUS_VERBS = {"escalate", "bind", "impersonate"}


# --- rendering --------------------------------------------------------------------------


def require_kubectl() -> None:
    if not KUBECTL.exists():
        message = f"kubectl not found at {KUBECTL} (make tools, or set KUBECTL)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def kustomize(path: Path) -> tuple[Obj, ...]:
    result = subprocess.run(
        [str(KUBECTL), "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path}: {result.stderr.strip()}")
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


@functools.cache
def render(base: str) -> tuple[Obj, ...]:
    """The objects of a base; SERVICE_MONITOR is config/default plus that component."""
    if base != SERVICE_MONITOR:
        return kustomize(ROOT / base)
    with tempfile.TemporaryDirectory() as overlay:
        relative = os.path.relpath(ROOT, overlay)  # kustomize takes no absolute paths
        (Path(overlay) / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"resources: [{relative}/config/default]\n"
            f"components: [{relative}/{SERVICE_MONITOR}]\n"
        )
        return kustomize(Path(overlay))


def rendered(base: str) -> tuple[Obj, ...]:
    """For collection: the objects, or none if kubectl is missing or the base does not
    render (test_renders then fails or skips and says why)."""
    if not KUBECTL.exists():
        return ()
    try:
        return render(base)
    except RuntimeError:
        return ()


def committed_manifest() -> tuple[Obj, ...]:
    return tuple(d for d in yaml.safe_load_all(MODULE_MANIFEST.read_text()) if d)


def ident(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{(ns + '/') if ns else ''}{meta.get('name')}"


def by_ident(objs: Iterable[Obj]) -> dict[str, Obj]:
    return {ident(o): o for o in objs}


def per_object(bases: Iterable[str], kinds: set[str] | None = None) -> list[Any]:
    return [
        pytest.param(base, obj, id=f"{base}:{ident(obj)}")
        for base in bases
        for obj in rendered(base)
        if kinds is None or obj.get("kind") in kinds
    ]


def containers_of(obj: Obj) -> list[Obj]:
    spec = obj["spec"]["template"]["spec"]
    return list(spec.get("containers") or []) + list(spec.get("initContainers") or [])


def images_of(objs: Iterable[Obj]) -> list[str]:
    return [
        str(c.get("image"))
        for o in objs
        if o.get("kind") in WORKLOAD_KINDS
        for c in containers_of(o)
    ]


def controller_of(image: str) -> str:
    """`source-controller` from any registry's .../fluxcd/source-controller:TAG[@DIGEST]."""
    return image.split("@", 1)[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]


def manager_container(base: str) -> Obj:
    dep = by_ident(render(base)).get(MANAGER)
    assert dep is not None, f"{base}: {MANAGER} not rendered"
    container: Obj = dep["spec"]["template"]["spec"]["containers"][0]
    return container


def command_line(container: Obj) -> str:
    return " ".join((container.get("command") or []) + (container.get("args") or []))


def flux_deployments() -> dict[str, Obj]:
    """By image, not by name: the bundle names its Deployments after the module."""
    return {
        controller_of(containers_of(o)[0]["image"]): o
        for o in render("flux")
        if o.get("kind") == "Deployment" and containers_of(o)
    }


@functools.cache
def own_names() -> dict[str, frozenset[str]]:
    """The module's own Roles/ClusterRoles and ServiceAccounts, over every base."""
    objs = [o for base in BASES for o in rendered(base)]
    return {
        "roles": frozenset(o["metadata"]["name"] for o in objs if o.get("kind") in RBAC_KINDS),
        "serviceaccounts": frozenset(
            o["metadata"]["name"] for o in objs if o.get("kind") == "ServiceAccount"
        ),
    }


def flux_parts(objs: Iterable[Obj]) -> list[str]:
    """What of Flux is in a manifest: its CRDs, controllers, bundle objects, namespace."""
    found = []
    for obj in objs:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        group = str((obj.get("spec") or {}).get("group", ""))
        if obj.get("kind") == "CustomResourceDefinition" and group.endswith(".fluxcd.io"):
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


def bdba() -> list[str]:
    return [str(i) for i in (yaml.safe_load(SEC_SCANNERS.read_text()) or {}).get("bdba") or []]


def versions_env() -> dict[str, str]:
    versions: dict[str, str] = {}
    for line in (ROOT / "tools" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip().strip("\"'")
    return versions


@pytest.fixture(autouse=True)
def _kubectl() -> None:
    require_kubectl()


# --- render -----------------------------------------------------------------------------


@pytest.mark.parametrize("base", [*BASES, "config/samples", SERVICE_MONITOR])
def test_renders(base: str) -> None:
    assert render(base), f"{base} renders no object"


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_config_readme_counts_the_objects(base: str) -> None:
    """config/README.md says how many objects each base renders: it says the truth."""
    name = base.removeprefix("config/")
    row = next(line for line in (ROOT / "config" / "README.md").read_text().splitlines()
               if line.startswith(f"| `{name}/` |"))  # fmt: skip
    said = re.search(r"\| (\d+) objects? \|$", row)
    assert said, row
    assert int(said.group(1)) == len(render(base)), f"config/README.md, row {name}/"


# --- labels -----------------------------------------------------------------------------


@pytest.mark.parametrize(("base", "obj"), per_object([*BASES, SERVICE_MONITOR]))
def test_labels(base: str, obj: Obj) -> None:
    want = {**COMMON_LABELS, **FLUX_LABELS} if base == "flux" else COMMON_LABELS
    labels = obj["metadata"].get("labels") or {}
    wrong = {key: labels.get(key) for key, value in want.items() if labels.get(key) != value}
    assert not wrong, f"labels {wrong}, want {want}"
    assert labels.get("app.kubernetes.io/name"), "app.kubernetes.io/name is missing"


@pytest.mark.parametrize(("base", "obj"), per_object([*BASES, SERVICE_MONITOR], {"Deployment"}))
def test_pod_template_labels(base: str, obj: Obj) -> None:
    labels = obj["spec"]["template"].get("metadata", {}).get("labels") or {}
    for key in ("kyma-project.io/module", "app.kubernetes.io/name"):
        assert labels.get(key), f"the pod template lacks {key}"


# --- rbac -------------------------------------------------------------------------------


def rbac_rules() -> list[Any]:
    return [
        pytest.param(obj, rule, id=f"{base}:{ident(obj)}:rule{i}")
        for base in BASES
        for obj in rendered(base)
        if obj.get("kind") in RBAC_KINDS
        for i, rule in enumerate(obj.get("rules") or [])
    ]


@pytest.mark.parametrize(("role", "rule"), rbac_rules())
def test_rbac_no_wildcards(role: Obj, rule: Obj) -> None:
    assert not rule.get("nonResourceURLs"), "nonResourceURLs granted"
    for field in ("apiGroups", "resources", "verbs", "resourceNames"):
        assert "*" not in (rule.get(field) or []), f"wildcard in {field}"


@pytest.mark.parametrize(("role", "rule"), rbac_rules())
def test_rbac_no_dangerous_verbs(role: Obj, rule: Obj) -> None:
    """escalate/bind only on the module's own roles and impersonate only on its own
    ServiceAccounts, by name (the manager installs the Flux bundle's RBAC; helm-controller
    acts as the release ServiceAccount). The release role holds the chart's rules instead of
    escalating, and may `bind` the chart's roles by name only."""
    bad = DANGEROUS_VERBS & set(rule.get("verbs") or [])
    names = set(rule.get("resourceNames") or [])
    resources = set(rule.get("resources") or [])
    if role["metadata"]["name"] == "kyma-gpu-release" and names:
        bad -= {"bind"}
    own = own_names()
    if names and resources <= {"roles", "clusterroles"} and names <= own["roles"]:
        bad -= {"escalate", "bind"}
    if names and resources == {"serviceaccounts"} and names <= own["serviceaccounts"]:
        bad -= {"impersonate"}
    assert not bad, f"dangerous verbs {sorted(bad)}"


@pytest.mark.parametrize(("role", "rule"), rbac_rules())
def test_rbac_manager_no_secrets(role: Obj, rule: Obj) -> None:
    if role["metadata"]["name"] == "gpu-manager":
        assert not {"secrets", "*"} & set(rule.get("resources") or []), "Secrets granted"


@pytest.mark.parametrize(("role", "rule"), rbac_rules())
def test_rbac_view_aggregate_only_reads(role: Obj, rule: Obj) -> None:
    labels = role["metadata"].get("labels") or {}
    if (
        role["kind"] == "ClusterRole"
        and labels.get("rbac.authorization.k8s.io/aggregate-to-view") == "true"
    ):
        assert set(rule.get("verbs") or []) <= READ_VERBS, "a role aggregated into view writes"


@pytest.mark.parametrize(("base", "binding"), per_object(BASES, BINDING_KINDS))
def test_rbac_binds_own_roles(base: str, binding: Obj) -> None:
    """Only roles the base defines, except helm-controller -> cluster-admin (documented in
    flux/helm-controller/rbac.yaml)."""
    ref = binding.get("roleRef", {}).get("name")
    own = {o["metadata"]["name"] for o in render(base) if o.get("kind") in RBAC_KINDS}
    subjects = [s.get("name") for s in binding.get("subjects") or []]
    if ref not in own:
        assert ref == "cluster-admin", f"binds role {ref!r} that {base} does not define"
        assert subjects == ["helm-controller"], f"binds cluster-admin to {subjects}"


# --- hardening --------------------------------------------------------------------------


def hardened_containers() -> list[Any]:
    """Every container of the manager (each config base) and of the Flux controllers."""
    targets = [(base, o) for base in CONFIG_BASES for o in rendered(base) if ident(o) == MANAGER]
    targets += [
        ("flux", o)
        for o in rendered("flux")
        if o.get("kind") == "Deployment"
        and containers_of(o)
        and controller_of(containers_of(o)[0]["image"]) in FLUX_VERSIONS
    ]
    return [
        pytest.param(dep, c, id=f"{base}:{ident(dep)}:{c['name']}")
        for base, dep in targets
        for c in containers_of(dep)
    ]


@pytest.mark.parametrize(("dep", "container"), hardened_containers())
def test_hardening_security_context(dep: Obj, container: Obj) -> None:
    pod = dep["spec"]["template"]["spec"].get("securityContext") or {}
    sc = container.get("securityContext") or {}
    assert sc.get("runAsNonRoot") or pod.get("runAsNonRoot"), "runAsNonRoot is not set"
    assert sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem is not true"
    assert sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation is not false"
    assert (sc.get("capabilities") or {}).get("drop") == ["ALL"], "capabilities.drop != [ALL]"
    seccomp = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
    assert seccomp == "RuntimeDefault", f"seccompProfile {seccomp!r}"


@pytest.mark.parametrize(("dep", "container"), hardened_containers())
def test_hardening_resources(dep: Obj, container: Obj) -> None:
    resources = container.get("resources") or {}
    missing = [
        f"{part}.{key}"
        for part in ("requests", "limits")
        for key in ("cpu", "memory")
        if key not in (resources.get(part) or {})
    ]
    assert not missing, f"resources missing: {missing}"


@pytest.mark.parametrize(("dep", "container"), hardened_containers())
def test_hardening_liveness_probe(dep: Obj, container: Obj) -> None:
    assert container.get("livenessProbe"), "no livenessProbe"


def test_hardening_covers_every_workload() -> None:
    """The manager in each config base and both Flux controllers are checked above."""
    checked = {(p.id or "").rsplit(":", 1)[0] for p in hardened_containers()}
    assert len(checked) == len(CONFIG_BASES) + len(FLUX_VERSIONS), checked


# --- manager ----------------------------------------------------------------------------


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_manager_rollout(base: str) -> None:
    objs = by_ident(render(base))
    assert MANAGER in objs, f"{MANAGER} not rendered"
    spec = objs[MANAGER]["spec"]
    assert spec.get("replicas") == 2, "want 2 replicas (one leads, one waits)"
    strategy = spec.get("strategy") or {}
    assert strategy.get("type") == "RollingUpdate"
    assert (strategy.get("rollingUpdate") or {}).get("maxUnavailable") == 0
    assert f"PodDisruptionBudget/{NS}/gpu-manager" in objs, "no PodDisruptionBudget"


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_manager_command_and_image(base: str) -> None:
    container = manager_container(base)
    joined = command_line(container)
    for needle in (
        "kyma-gpu-manager",
        "--leader-election",
        "--liveness http://0.0.0.0:8080/healthz",
    ):
        assert needle in joined, f"command/args lack {needle!r}: {joined}"
    assert str(container.get("image", "")).startswith(MANAGER_IMAGE_PREFIX), container["image"]
    pod = by_ident(render(base))[MANAGER]["spec"]["template"]["spec"]
    assert pod.get("serviceAccountName") == "gpu-manager"


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_manager_liveness_probe(base: str) -> None:
    container = manager_container(base)
    probe = (container.get("livenessProbe") or {}).get("httpGet") or {}
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    port = ports.get(probe.get("port"), probe.get("port"))
    assert probe.get("path") == "/healthz", probe
    assert port == 8080, probe


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_manager_lease_role(base: str) -> None:
    role = by_ident(render(base)).get(f"Role/{NS}/gpu-manager") or {}
    assert any("leases" in (r.get("resources") or []) for r in role.get("rules") or [])


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_manager_crd_rendered(base: str) -> None:
    assert "CustomResourceDefinition/gpus.gpu.kyma-project.io" in by_ident(render(base))


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_manager_priority_class(base: str) -> None:
    objs = by_ident(render(base))
    assert objs[MANAGER]["spec"]["template"]["spec"].get("priorityClassName") == PRIORITY_CLASS
    priority = objs.get(f"PriorityClass/{PRIORITY_CLASS}")
    assert priority is not None, f"PriorityClass {PRIORITY_CLASS} not rendered"
    assert not priority.get("globalDefault"), "must not be the global default"


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_manager_network_policy(base: str) -> None:
    objs = render(base)
    pod_labels = by_ident(objs)[MANAGER]["spec"]["template"]["metadata"]["labels"]
    selecting = [
        o
        for o in objs
        if o.get("kind") == "NetworkPolicy"
        and o["metadata"].get("namespace") == NS
        and all(
            pod_labels.get(k) == v
            for k, v in (o["spec"].get("podSelector", {}).get("matchLabels") or {}).items()
        )
    ]
    assert selecting, "no NetworkPolicy selects the manager pod"


# --- metrics ----------------------------------------------------------------------------


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_metrics_port_and_flag(base: str) -> None:
    container = manager_container(base)
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    assert ports.get("metrics") == METRICS_PORT, ports
    assert f"--metrics-address 0.0.0.0:{METRICS_PORT}" in command_line(container)


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_metrics_readiness_probe(base: str) -> None:
    probe = (manager_container(base).get("readinessProbe") or {}).get("httpGet") or {}
    assert probe.get("path") == "/readyz", probe
    assert probe.get("port") in ("metrics", METRICS_PORT), probe


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_metrics_service(base: str) -> None:
    service = by_ident(render(base)).get(METRICS_SERVICE) or {}
    ports = {p.get("name"): p for p in (service.get("spec") or {}).get("ports") or []}
    target = (ports.get("metrics") or {}).get("targetPort")
    assert target in ("metrics", METRICS_PORT), f"{METRICS_SERVICE} does not expose `metrics`"


# --- policies ---------------------------------------------------------------------------


def own_policies() -> list[Obj]:
    return [
        o
        for o in render("config/default")
        if o.get("kind") == "NetworkPolicy" and o["metadata"].get("namespace") == NS
    ]


def test_policies_are_a_component() -> None:
    kustomization = yaml.safe_load((ROOT / "config/default/kustomization.yaml").read_text())
    assert "../components/network-policy" in (kustomization.get("components") or [])


@pytest.mark.parametrize(
    ("base", "policy"),
    [p for p in per_object(["config/default"], {"NetworkPolicy"}) if p.id and f"/{NS}/" in p.id],
)
def test_policies_never_select_every_pod(base: str, policy: Obj) -> None:
    selector = policy["spec"].get("podSelector") or {}
    assert selector.get("matchLabels") or selector.get("matchExpressions"), "podSelector {}"


def test_policies_admit_the_scrapers() -> None:
    scrape = [
        rule
        for policy in own_policies()
        for rule in policy["spec"].get("ingress") or []
        if any(p.get("port") == METRICS_PORT for p in rule.get("ports") or [])
        and any(
            SCRAPER_LABEL in ((peer.get("podSelector") or {}).get("matchLabels") or {})
            for peer in rule.get("from") or []
        )
    ]
    assert scrape, f"no policy admits {METRICS_PORT} to pods with {SCRAPER_LABEL}"
    # Issue 32: a pod label anyone can set is not enough; each peer also names the namespace
    # by the label only the API server sets.
    peers = [peer for rule in scrape for peer in rule.get("from") or []]
    for peer in peers:
        namespaces = (peer.get("namespaceSelector") or {}).get("matchLabels") or {}
        assert namespaces == {"kubernetes.io/metadata.name": NS}, peer
        assert (peer.get("podSelector") or {}).get("matchLabels"), peer


# --- optional parts ---------------------------------------------------------------------


def test_optional_no_service_monitor_by_default() -> None:
    assert not [o for o in render("config/default") if o.get("kind") == "ServiceMonitor"]


def test_optional_service_monitor_selects_the_metrics_service() -> None:
    monitors = [o for o in render(SERVICE_MONITOR) if o.get("kind") == "ServiceMonitor"]
    service = by_ident(render("config/default")).get(METRICS_SERVICE)
    assert len(monitors) == 1, "want one ServiceMonitor"
    assert service is not None, f"{METRICS_SERVICE} not rendered"
    spec, labels = monitors[0]["spec"], service["metadata"].get("labels") or {}
    wanted = (spec.get("selector") or {}).get("matchLabels") or {}
    assert all(labels.get(k) == v for k, v in wanted.items()), f"{wanted} vs {labels}"
    assert [e.get("port") for e in spec.get("endpoints") or []] == ["metrics"]


# --- flux -------------------------------------------------------------------------------


@pytest.mark.parametrize("controller", sorted(FLUX_VERSIONS))
def test_flux_images_are_the_pinned_mirrors(controller: str) -> None:
    version = versions_env().get(FLUX_VERSIONS[controller])
    dep = flux_deployments().get(controller)
    assert dep is not None, f"no Deployment runs {controller}"
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"{THIRD_PARTY_PREFIX}fluxcd/{controller}:{version}", "tools/versions.env"


@pytest.mark.parametrize("controller", sorted(FLUX_VERSIONS))
def test_flux_images_in_the_manager_environment(controller: str) -> None:
    """modulectl puts the images of the manager's environment into the OCM component (and
    Kyma localises them there): they must be the bundle's, which the manager then deploys."""
    dep = flux_deployments().get(controller)
    assert dep is not None, f"no Deployment runs {controller}"
    env = {e["name"]: e.get("value") for e in manager_container("config/default").get("env", [])}
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert env.get(IMAGE_ENV[controller]) == image, "config/manager/deployment.yaml env"
    assert bundle_images(FluxImages.from_env(env))[controller] == image


@pytest.mark.parametrize("crd", FLUX_CRDS)
def test_flux_crds(crd: str) -> None:
    assert f"CustomResourceDefinition/{crd}" in by_ident(render("flux"))


def test_flux_source_controller_service() -> None:
    """helm-controller fetches the chart artifacts through it; it ships with the module's
    manifest (flux/access), not in the manager's bundle."""
    source = flux_deployments().get("source-controller")
    assert source is not None, "no Deployment runs source-controller"
    pod_labels = source["spec"]["template"]["metadata"].get("labels") or {}
    assert any(
        o.get("kind") == "Service"
        and (o.get("spec") or {}).get("selector")
        and all(pod_labels.get(k) == v for k, v in o["spec"]["selector"].items())
        for o in render("config/default")
    ), "no Service selects source-controller"


def test_flux_accounts_ship_with_the_module() -> None:
    """Issue 32: the ServiceAccounts, Roles and RoleBindings of the module's Flux are in the
    module's manifest, so the manager holds no right to write ServiceAccounts or RBAC."""
    idents = set(by_ident(render("config/default")))
    for name in ("gpu-flux-source-controller", "gpu-flux-helm-controller"):
        for kind in ("ServiceAccount", "Role", "RoleBinding"):
            assert f"{kind}/kyma-system/{name}" in idents, (kind, name)
    assert "NetworkPolicy/kyma-system/gpu-flux-ingress" in idents
    assert {o["kind"] for o in render("flux")} == {"CustomResourceDefinition", "Deployment"}


# --- no Flux in the module manifest -----------------------------------------------------


@pytest.mark.parametrize("where", ["config/default", "config/module-bundle", "manifest.yaml"])
def test_no_flux_in_module_manifest(where: str) -> None:
    """The manager installs Flux when the cluster has none (config/module-bundle)."""
    objs = committed_manifest() if where == "manifest.yaml" else render(where)
    assert not flux_parts(objs), "the module manifest must not contain Flux"


def test_no_flux_detects_flux() -> None:
    """The rule above finds every part of the Flux bundle."""
    flux = render("flux")
    assert len(flux_parts(flux)) == len(flux)


# --- security scanners ------------------------------------------------------------------


def deployed_images() -> list[Any]:
    images = (
        images_of(rendered("config/module-bundle"))
        + images_of(rendered("flux"))
        + images_of(committed_manifest())
    )
    return [pytest.param(image, id=image) for image in sorted(set(images))]


@pytest.mark.parametrize("image", deployed_images())
def test_scanned_image_listed(image: str) -> None:
    """A release pins the manager by digest (hack/module.py release); the scanners list it
    by tag."""
    assert image.split("@", 1)[0] in bdba(), f"{image} is deployed but not in bdba"


@pytest.mark.parametrize("image", bdba())
def test_scanned_images_in_kyma_registry(image: str) -> None:
    assert "/kyma-project/prod/" in image, "not in Kyma's prod registry"
    if image.split("/kyma-project/prod/", 1)[1].count("/"):
        assert image.startswith(THIRD_PARTY_PREFIX), f"third-party, not under {THIRD_PARTY_PREFIX}"


@pytest.mark.parametrize(("role", "rule"), rbac_rules())
def test_rbac_no_token_requests(role: Obj, rule: Obj) -> None:
    """No identity of the module mints ServiceAccount tokens: a `serviceaccounts/token` right
    in kyma-system reaches every account there (the manager's, the release's), and none of
    the module's Flux sources names an account to get a token for."""
    assert "serviceaccounts/token" not in (rule.get("resources") or []), "token requests granted"


# --- the Gpu's Kyma dashboard extension (config/ui-extension) ---------------------------


@pytest.mark.parametrize("base", CONFIG_BASES)
def test_the_dashboard_extension_ships_with_the_module(base: str) -> None:
    """The plain install and the KLM manifest carry the one ConfigMap Busola reads."""
    extensions = [o for o in render(base) if o["kind"] == "ConfigMap"
                  and (o["metadata"].get("labels") or {}).get("busola.io/extension")]  # fmt: skip
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in extensions] == [
        ("kube-public", "gpus.gpu.kyma-project.io")
    ]
    assert set(extensions[0]["data"]) == {"general", "list", "details", "form", "translations",
                                          "presets"}  # fmt: skip


@pytest.mark.parametrize(("role", "rule"), rbac_rules())
def test_the_dashboard_extension_needs_no_rights_of_its_own(role: Obj, rule: Obj) -> None:
    """Kyma dashboard reads the extension and the Gpu with its user's rights: no identity of
    the module is granted anything in kube-public or on the extension's ConfigMap."""
    assert role["metadata"].get("namespace") != "kube-public", "a Role in kube-public"
    assert "gpus.gpu.kyma-project.io" not in (rule.get("resourceNames") or []), "rights on it"
