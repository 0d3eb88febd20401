"""The chart's accounts do only what their code does (issue 32, finding 2), on the real API server.

The four attacks of the issue as the NVIDIA operator's account gpu-operator/gpu-operator, and
the CRD attack as the chart's upgrade hook account, each refused by the ValidatingAdmissionPolicy
kyma-gpu-chart-accounts; what the real controller writes (an operand's RBAC, DaemonSet,
node labels, a cordon, an eviction, the namespace's DRA label) is accepted the same way. The RBAC
these accounts hold is the chart's, bound here as the chart binds it. `--dry-run=server` for
every write: authorization and admission run, nothing is stored.
The real controller runs under the policy in tests/e2e/test_operations.py and test_flux.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster import LocalCluster
from tests.harness.module import install_crds, install_module_rbac, wait_until

pytestmark = pytest.mark.integration

TARGET = "gpu-operator"
CONTROLLER = f"system:serviceaccount:{TARGET}:gpu-operator"
HOOK = f"system:serviceaccount:{TARGET}:gpu-operator-upgrade-crd-hook-sa"
WORDS = "the NVIDIA operator's account gpu-operator (gpu-operator)"
WIDE: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": "test-chart-accounts"},
    "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
}  # fmt: skip
"""Stands in for the chart's wide ClusterRoles: every refusal below is admission's, not RBAC's."""


def _bind(user: str) -> dict[str, Any]:
    name = user.rsplit(":", 1)[1]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": f"test-chart-accounts-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": WIDE["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": TARGET}],
    }  # fmt: skip


NODE = "chart-accounts-node"


@pytest.fixture(scope="module")
def cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    install_crds(local_cluster)
    install_module_rbac(local_cluster)
    local_cluster.apply(WIDE, _bind(CONTROLLER), _bind(HOOK))
    local_cluster.apply({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": NODE, "labels": {"pool": "gpu"}}})  # fmt: skip
    wait_until(lambda: WORDS in _as(local_cluster, CONTROLLER, "create", "namespace", "x")[1], 30,
               "the policy in force")  # fmt: skip
    yield local_cluster
    local_cluster.kubectl("delete", "node", NODE, "--ignore-not-found")
    for user in (CONTROLLER, HOOK):
        local_cluster.kubectl("delete", "clusterrolebinding", _bind(user)["metadata"]["name"])
    local_cluster.kubectl("delete", "clusterrole", WIDE["metadata"]["name"])


def _as(cluster: LocalCluster, user: str, *args: str, body: Any = None) -> tuple[bool, str]:
    text = None if body is None else json.dumps(body)
    said = cluster.kubectl(*args, f"--as={user}", "--dry-run=server", input=text, check=False)
    # Admission runs before storage: "already exists" (an object an earlier test left) means
    # every policy let the request through.
    allowed = said.returncode == 0 or "(AlreadyExists)" in said.stderr
    return allowed, said.stdout + said.stderr


def _refused(cluster: LocalCluster, user: str, words: str, *args: str, body: Any = None) -> None:
    ok, said = _as(cluster, user, *args, body=body)
    assert not ok, said
    assert words in said, said


def _binding(name: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [subject]}  # fmt: skip


OPERAND = {"kind": "ServiceAccount", "name": "nvidia-driver", "namespace": TARGET}


@pytest.mark.parametrize(
    ("name", "role", "subject"),
    [
        ("x", "gpu-operator", {"kind": "User", "name": "mallory",
                               "apiGroup": "rbac.authorization.k8s.io"}),
        ("nvidia-driver", "gpu-operator", OPERAND),
        ("nvidia-driver", "nvidia-driver", {"kind": "User", "name": "mallory",
                                            "apiGroup": "rbac.authorization.k8s.io"}),
        ("nvidia-driver", "nvidia-driver", {"kind": "ServiceAccount", "name": "default",
                                            "namespace": "kube-system"}),
        ("cluster-admin", "cluster-admin", OPERAND),
    ],
)  # fmt: skip
def test_a1_it_binds_no_role_to_anyone_else(
    cluster: LocalCluster, name: str, role: str, subject: dict[str, str]
) -> None:
    _refused(cluster, CONTROLLER, WORDS, "create", "-f", "-", body=_binding(name, role, subject))


def test_a1_it_aggregates_into_no_role(cluster: LocalCluster) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "nvidia-driver",
                         "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
            "rules": []}  # fmt: skip
    _refused(cluster, CONTROLLER, "writes no aggregated role", "create", "-f", "-", body=role)


def test_a2_it_patches_no_pod(cluster: LocalCluster) -> None:
    cluster.create_namespace("team-a")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": "team-a"},
           "spec": {"containers": [{"name": "c", "image": "app:1"}]}}  # fmt: skip
    cluster.apply(pod)
    patch = json.dumps({"spec": {"containers": [{"name": "c", "image": "evil.example/x"}]}})
    _refused(cluster, CONTROLLER, WORDS, "patch", "pod", "app", "-n", "team-a", "-p", patch)
    _refused(cluster, CONTROLLER, WORDS, "create", "-f", "-",
             body={**pod, "metadata": {"name": "new", "namespace": TARGET}})  # fmt: skip


def test_a3_it_relabels_no_namespace(cluster: LocalCluster) -> None:
    privileged = "pod-security.kubernetes.io/enforce=privileged"
    _refused(cluster, CONTROLLER, WORDS, "label", "namespace", "team-a", privileged)
    _refused(cluster, CONTROLLER, WORDS, "label", "namespace", TARGET, "--overwrite",
             "pod-security.kubernetes.io/enforce-version=v1.0")  # fmt: skip
    ok, said = _as(cluster, CONTROLLER, "label", "namespace", TARGET, "--overwrite",
                   "resource.kubernetes.io/admin-access=true")  # fmt: skip
    assert ok, said  # the DRA stack's label


@pytest.mark.parametrize("user", [CONTROLLER, HOOK])
def test_a4_it_patches_no_crd(cluster: LocalCluster, user: str) -> None:
    patch = json.dumps({"metadata": {"labels": {"x": "y"}}})
    for crd in ("gpus.gpu.kyma-project.io", "helmreleases.helm.toolkit.fluxcd.io"):
        ok, said = _as(cluster, user, "patch", "crd", crd, "-p", patch)
        assert not ok, said
        assert "ValidatingAdmissionPolicy 'kyma-gpu-chart-accounts'" in said, said
    version = {
        "name": "v1alpha1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object"}},
    }
    names = {"plural": "nodefeatures", "singular": "nodefeature", "kind": "NodeFeature"}
    body: dict[str, Any] = {
           "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "nodefeatures.nfd.k8s-sigs.io"},
           "spec": {"group": "nfd.k8s-sigs.io", "scope": "Namespaced", "names": names,
                    "versions": [version]}}  # fmt: skip
    # create or update, whichever the cluster needs (an earlier test may have installed it)
    ok, said = _as(cluster, HOOK, "apply", "--server-side", "--force-conflicts",
                   "--field-manager=manage-crds", "-f", "-", body=body)  # fmt: skip
    assert ok, said  # the hook's own job: the chart's CRDs


def test_what_the_real_controller_writes_is_accepted(cluster: LocalCluster) -> None:
    """From the audit log of the real controller (docs/security.md)."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "nvidia-driver"}, "rules": []}  # fmt: skip
    labels = {"app": "nvidia-driver-daemonset"}
    pod = {"serviceAccountName": "nvidia-driver", "containers": [{"name": "d", "image": "d:1"}]}
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                 "metadata": {"name": "nvidia-driver-daemonset", "namespace": TARGET},
                 "spec": {"selector": {"matchLabels": labels},
                          "template": {"metadata": {"labels": labels}, "spec": pod}}}  # fmt: skip
    for body in (role, _binding("nvidia-driver", "nvidia-driver", OPERAND), daemonset):
        ok, said = _as(cluster, CONTROLLER, "create", "-f", "-", body=body)
        assert ok, said
    as_chart = json.loads(json.dumps(daemonset))
    as_chart["spec"]["template"]["spec"]["serviceAccountName"] = "gpu-operator"
    _refused(cluster, CONTROLLER, "runs its DaemonSets and Deployments only as", "create", "-f",
             "-", body=as_chart)  # fmt: skip
    for args in (("label", "node", NODE, "nvidia.com/gpu.deploy.driver=true"),
                 ("annotate", "node", NODE, "nvidia.com/gpu-driver-upgrade-enabled=true"),
                 ("cordon", NODE)):  # fmt: skip
        ok, said = _as(cluster, CONTROLLER, *args)
        assert ok, (args, said)
    _refused(cluster, CONTROLLER, "changes on a Node only nvidia.com/", "label", "node", NODE,
             "--overwrite", "pool=attacker")  # fmt: skip
    _refused(cluster, CONTROLLER, "changes on a Node only nvidia.com/", "taint", "node", NODE,
             "dedicated=attacker:NoSchedule")  # fmt: skip
