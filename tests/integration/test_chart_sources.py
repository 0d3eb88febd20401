"""Doors 3 and 4 of issue 20 on the real API server: where the chart comes from is the platform's.

A user bound only to the module's edit role (ClusterRole kyma-gpu-edit) writes Gpus that name
another repository, chart, version or Secret; the manager (on its own ServiceAccount, with
config/default's RBAC and admission policies, as KLM installs them) refuses each in the
status, with the words of `kyma-gpu plan`, and writes no Flux object. Neither that user nor
one with the ConfigMap rights of the stock `edit` role cluster-wide can write the ConfigMap
of allowed sources; once an administrator lists the source in it, the same Gpu is planned and
its HelmRelease written (no helm-controller runs here: nothing is installed).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kyma_gpu.api.chart_sources import CONFIG_MAP_KEY, CONFIG_MAP_NAME, WHO_MAY_CHANGE
from kyma_gpu_tools.cli import main
from tests.harness.chart_sources import allow_chart_sources, chart_sources_config_map
from tests.harness.cluster import LocalCluster
from tests.harness.module import (
    MODULE_NAMESPACE,
    ROOT,
    OperatorProcess,
    condition,
    gpu,
    install_crds,
    install_module_rbac,
    module_on,
    service_account_kubeconfig,
    wait_until,
)

pytestmark = pytest.mark.integration

EDITOR = "gpu-source-editor"
STOCK_EDITOR = "gpu-stock-editor"
"""A user with the ConfigMap rights of the stock `edit` role bound cluster-wide (the rule of
system:aggregate-to-edit, bound directly: no wait for the aggregation controller)."""
CONFIG_MAP_WRITER: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": "test-config-map-writer"},
    "rules": [{"apiGroups": [""], "resources": ["configmaps"],
               "verbs": ["create", "delete", "deletecollection", "patch", "update", "get"]}],
}  # fmt: skip
NAMESPACE_OWNER = "gpu-namespace-owner"
"""A user whose RoleBinding in kyma-system grants `*` on `*` (a common "namespace owner"
set-up): every right there, none cluster-wide (issue 32, finding 3)."""
OWNER_ROLE: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": "test-namespace-owner"},
    "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
}  # fmt: skip
OWNER_BINDING: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
    "metadata": {"name": "test-namespace-owner", "namespace": MODULE_NAMESPACE},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "test-namespace-owner"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                  "name": NAMESPACE_OWNER}],
}  # fmt: skip
MIRROR = "https://charts.mirror.example/nvidia"
FLUX_KINDS = ("helmreleases.helm.toolkit.fluxcd.io", "helmrepositories.source.toolkit.fluxcd.io",
              "ocirepositories.source.toolkit.fluxcd.io")  # fmt: skip


def _binding(user: str, role: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": f"test-{user}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }  # fmt: skip


@pytest.fixture(scope="module")
def manager(local_cluster: LocalCluster) -> Iterator[OperatorProcess]:
    install_crds(local_cluster)
    install_module_rbac(local_cluster)  # config/default: the Role, the chart sources' policy
    local_cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE,
                          "--ignore-not-found")  # fmt: skip
    local_cluster.apply(CONFIG_MAP_WRITER, _binding(EDITOR, "kyma-gpu-edit"),
                        _binding(STOCK_EDITOR, CONFIG_MAP_WRITER["metadata"]["name"]),
                        OWNER_ROLE, OWNER_BINDING)  # fmt: skip
    with module_on(local_cluster, name="operator-sources",
                   kubeconfig=service_account_kubeconfig(local_cluster)) as process:  # fmt: skip
        yield process
    local_cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE,
                          "--ignore-not-found")  # fmt: skip
    for user in (EDITOR, STOCK_EDITOR):
        local_cluster.kubectl("delete", "clusterrolebinding", f"test-{user}", "--ignore-not-found")
    local_cluster.kubectl("delete", "clusterrole", CONFIG_MAP_WRITER["metadata"]["name"])
    local_cluster.kubectl("delete", "rolebinding", "test-namespace-owner", "-n", MODULE_NAMESPACE)
    local_cluster.kubectl("delete", "clusterrole", "test-namespace-owner")


def _as_editor(cluster: LocalCluster, spec: dict[str, Any]) -> None:
    body = {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
            "metadata": {"name": "gpu"}, "spec": spec}  # fmt: skip
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=editor",
                    f"--as={EDITOR}", "-f", "-", input=json.dumps(body))  # fmt: skip


def _refusal(cluster: LocalCluster, saying: str = "") -> str:
    """The Gpu's message while its Preflight says ChartSourceNotAllowed (and the message says
    `saying`); '' otherwise."""
    body = gpu(cluster)
    preflight = condition(body, "Preflight") or {}
    message = str(((body or {}).get("status") or {}).get("message", ""))
    refused = preflight.get("reason") == "ChartSourceNotAllowed" and saying in message
    return message if refused else ""


def _flux(cluster: LocalCluster, kind: int) -> dict[str, Any] | None:
    return cluster.get_object(FLUX_KINDS[kind], "gpu-operator", MODULE_NAMESPACE)


def _flux_objects(cluster: LocalCluster) -> list[str]:
    return [f"{kind}/{o['metadata']['name']}" for kind in FLUX_KINDS
            for o in cluster.list_objects(kind, MODULE_NAMESPACE)]  # fmt: skip


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("other-repository", {"source": {"chartRepository": MIRROR}},
     f"chart gpu-operator from {MIRROR} is not an allowed chart source"),
    ("other-chart", {"source": {"chartName": "not-the-gpu-operator"}},
     "chart not-the-gpu-operator from https://helm.ngc.nvidia.com/nvidia is not an allowed"),
    ("unsupported-version", {"operatorVersion": "v99.0.0"},
     "version v99.0.0 of chart gpu-operator from https://helm.ngc.nvidia.com/nvidia is not "
     "allowed (allowed: v26.3.3, v26.7.0)"),
    ("secret-not-listed", {"source": {"secretRef": "platform-registry-auth"}},
     "spec.source.secretRef platform-registry-auth is not allowed for chart gpu-operator from "
     "https://helm.ngc.nvidia.com/nvidia (allowed: none)"),
]  # fmt: skip


@pytest.mark.parametrize(("door", "spec", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_editor_cannot_pick_the_chart(
    local_cluster: LocalCluster, manager: OperatorProcess, door: str, spec: dict[str, Any],
    words: str,
) -> None:  # fmt: skip
    _as_editor(local_cluster, spec)
    message = wait_until(lambda: _refusal(local_cluster, words), 60, f"{door}: refused")
    where = f"the ConfigMap {MODULE_NAMESPACE}/{CONFIG_MAP_NAME}, key {CONFIG_MAP_KEY}"
    assert where in message, message
    assert f"only {WHO_MAY_CHANGE} can change" in message, message
    assert (gpu(local_cluster) or {})["status"]["state"] == "Error"
    assert _flux_objects(local_cluster) == [], "a refused source reached Flux"


def test_the_same_words_offline(local_cluster: LocalCluster, manager: OperatorProcess) -> None:
    """`kyma-gpu plan` on the Gpu as stored says what the status says."""
    _as_editor(local_cluster, {"source": {"chartRepository": MIRROR}})
    message = wait_until(lambda: _refusal(local_cluster, MIRROR), 60, "refused")
    stored = local_cluster.kubectl("get", "gpus.gpu.kyma-project.io", "gpu", "-o", "yaml").stdout
    out, err = io.StringIO(), io.StringIO()
    plan = ["plan", "-f", "-", "-o", "yaml"]
    assert main(plan, stdin=io.StringIO(stored), stdout=out, stderr=err) == 1
    findings = yaml.safe_load(out.getvalue())["preflight"]["findings"]
    assert {"severity": "error", "reason": "ChartSourceNotAllowed", "message": message} in findings


@pytest.mark.parametrize("user", [EDITOR, STOCK_EDITOR, NAMESPACE_OWNER])
def test_editors_cannot_write_the_allowed_sources(
    local_cluster: LocalCluster, manager: OperatorProcess, user: str
) -> None:
    """The module's edit role has no ConfigMap rights; `edit` bound cluster-wide has them in
    kyma-system, and a namespace owner holds `*` there; the policy kyma-gpu-chart-sources asks
    for a cluster-scoped right and refuses both: create, change and delete of the one ConfigMap
    (an administrator's copy stands in between)."""
    may = local_cluster.kubectl("auth", "can-i", "create", "configmaps", "-n", MODULE_NAMESPACE,
                                f"--as={user}", check=False).stdout.strip()  # fmt: skip
    assert may == ("no" if user == EDITOR else "yes"), may
    words = "forbidden" if user == EDITOR else "only a cluster administrator can change it"
    body = json.dumps(chart_sources_config_map({"kind": "HelmRepository", "url": MIRROR}))
    said = local_cluster.kubectl("create", "-f", "-", f"--as={user}", input=body, check=False)
    assert said.returncode != 0, said.stdout
    assert words in said.stderr, said.stderr
    allow_chart_sources(local_cluster)  # the administrator writes it
    try:
        for args in (("replace", "-f", "-"),
                     ("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE)):  # fmt: skip
            said = local_cluster.kubectl(*args, f"--as={user}", input=body, check=False)
            assert said.returncode != 0, (args, said.stdout)
            assert words in said.stderr, (args, said.stderr)
        held = local_cluster.get_object("configmap", CONFIG_MAP_NAME, MODULE_NAMESPACE)
        assert held is not None
        assert MIRROR not in json.dumps(held)
    finally:
        local_cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE)


def test_an_administrator_allows_the_mirror(
    local_cluster: LocalCluster, manager: OperatorProcess
) -> None:
    """The watch sees the ConfigMap: the refused Gpu is planned again, unchanged, and its
    HelmRelease written; taking the source out again leaves it refused (nothing deleted)."""
    spec = {"source": {"chartRepository": MIRROR, "secretRef": "mirror-auth"}}
    _as_editor(local_cluster, spec)
    wait_until(lambda: _refusal(local_cluster, f"from {MIRROR} is not an allowed"), 60, "refused")
    allow_chart_sources(local_cluster, {"kind": "HelmRepository", "url": MIRROR,
                                        "secretRefs": ["mirror-auth"]})  # fmt: skip
    release = wait_until(lambda: _flux(local_cluster, 0), 60, "HelmRelease written")
    repository = _flux(local_cluster, 1)
    assert repository is not None
    assert repository["spec"]["url"] == MIRROR
    assert repository["spec"]["secretRef"] == {"name": "mirror-auth"}
    assert release["spec"]["chart"]["spec"]["chart"] == "gpu-operator"
    assert _refusal(local_cluster) == ""
    allow_chart_sources(local_cluster)  # NVIDIA's only, again
    wait_until(lambda: _refusal(local_cluster), 60, "refused again")
    assert _flux(local_cluster, 0) is not None


def test_the_manager_only_reads_the_config_map(local_cluster: LocalCluster) -> None:
    """Its Role: get, list and watch of that one name; no write of any ConfigMap."""
    sa = "system:serviceaccount:kyma-system:gpu-manager"
    install_module_rbac(local_cluster)
    for verb, expected in (("get", "yes"), ("watch", "yes"), ("update", "no"), ("create", "no"),
                           ("delete", "no")):  # fmt: skip
        what = f"configmap/{CONFIG_MAP_NAME}"
        answer = local_cluster.kubectl("auth", "can-i", verb, what, "-n", MODULE_NAMESPACE,
                                       f"--as={sa}", check=False)  # fmt: skip
        assert answer.stdout.strip() == expected, (verb, answer.stdout)
    sample = yaml.safe_load((ROOT / "config" / "samples" / "chart_sources.yaml").read_text())
    assert sample["metadata"]["name"] == CONFIG_MAP_NAME


def _delete_collection(cluster: LocalCluster, user: str, name: str) -> tuple[bool, str]:
    """A raw DELETECOLLECTION of the ConfigMaps of kyma-system that a field selector picks: the
    API server calls admission once per item, a DELETE whose request carries no name."""
    path = f"/api/v1/namespaces/{MODULE_NAMESPACE}/configmaps?fieldSelector=metadata.name%3D{name}"
    said = cluster.kubectl("delete", "--raw", path, f"--as={user}", check=False)
    return said.returncode == 0, said.stdout + said.stderr


@pytest.mark.parametrize("user", [STOCK_EDITOR, NAMESPACE_OWNER])
def test_the_allowed_sources_survive_a_delete_collection(
    local_cluster: LocalCluster, manager: OperatorProcess, user: str
) -> None:
    """Issue 43: the policy matched the request's name, which a DELETECOLLECTION leaves empty,
    so a namespace owner deleted the ConfigMap that way (and every registry was allowed). It
    matches the object's own name now; another ConfigMap of kyma-system still goes."""
    other = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "not-the-sources", "namespace": MODULE_NAMESPACE}}  # fmt: skip
    allow_chart_sources(local_cluster)
    local_cluster.apply(other)
    try:
        ok, said = _delete_collection(local_cluster, user, CONFIG_MAP_NAME)
        assert not ok, said
        assert "only a cluster administrator can change it" in said, said
        assert local_cluster.get_object("configmap", CONFIG_MAP_NAME, MODULE_NAMESPACE)
        ok, said = _delete_collection(local_cluster, user, "not-the-sources")
        assert ok, said
        assert local_cluster.get_object("configmap", "not-the-sources", MODULE_NAMESPACE) is None
    finally:
        local_cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "not-the-sources", "-n",
                              MODULE_NAMESPACE, "--ignore-not-found")  # fmt: skip
