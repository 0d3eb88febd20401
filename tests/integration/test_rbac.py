"""The shipped RBAC is sufficient and no wider than needed: the operator runs with the
gpu-manager ServiceAccount's token only (leader election on, as in the Deployment) through a
create/status/delete cycle, and `kubectl auth can-i` refuses what it must not do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import yaml

from tests.harness.cluster import LocalCluster
from tests.harness.module import (
    MODULE_NAMESPACE,
    ROOT,
    OperatorProcess,
    forbidden_lines,
    gpu,
    helm_release,
    install_crds,
    install_module_rbac,
    module_on,
    service_account_kubeconfig,
    wait_until,
)

pytestmark = pytest.mark.integration

SA = f"system:serviceaccount:{MODULE_NAMESPACE}:gpu-manager"


@pytest.fixture(scope="module")
def sa_operator(local_cluster: LocalCluster) -> Iterator[OperatorProcess]:
    install_crds(local_cluster)  # also the Flux CRDs and the kyma-system namespace
    install_module_rbac(local_cluster)
    with module_on(
        local_cluster, name="operator-rbac", kubeconfig=service_account_kubeconfig(local_cluster),
        args=("--leader-election", "--liveness", "http://127.0.0.1:18181/healthz"),
    ) as process:  # fmt: skip
        yield process


def test_operator_works_with_the_service_account_only(
    local_cluster: LocalCluster, sa_operator: OperatorProcess
) -> None:
    local_cluster.apply(yaml.safe_load((ROOT / "config" / "samples" / "gpu.yaml").read_text()))
    wait_until(lambda: helm_release(local_cluster), 60, "the HelmRelease, written as the SA")
    wait_until(lambda: ((gpu(local_cluster) or {}).get("status") or {}).get("gpuNodeCount") == 2,
               60, "status written as the SA")  # fmt: skip
    local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    wait_until(lambda: gpu(local_cluster) is None, 60, "the Gpu released by the SA")
    assert helm_release(local_cluster) is None
    time.sleep(1)
    log = sa_operator.log(400)
    assert forbidden_lines(log) == [], log


ALLOWED = [
    ("list", "nodes", None),
    # Node marks for GPU health (issue 33), held field by field by kyma-gpu-manager-nodes
    ("patch", "nodes", None),
    ("patch", "nodes/status", None),
    ("watch", "pods", None),
    ("patch", "gpus.gpu.kyma-project.io/status", None),
    ("create", "helmreleases.helm.toolkit.fluxcd.io", MODULE_NAMESPACE),
    ("delete", "helmrepositories.source.toolkit.fluxcd.io", MODULE_NAMESPACE),
    ("update", "leases.coordination.k8s.io/kyma-gpu-manager", MODULE_NAMESPACE),
    # The module's own Flux, on a cluster without one (create cannot be limited by name).
    ("create", "customresourcedefinitions.apiextensions.k8s.io", None),
    (
        "delete",
        "customresourcedefinitions.apiextensions.k8s.io/helmreleases.helm.toolkit.fluxcd.io",
        None,
    ),
    ("patch", "deployments.apps/gpu-flux-helm-controller", MODULE_NAMESPACE),
]
DENIED = [
    ("get", "secrets", MODULE_NAMESPACE),
    ("list", "secrets", None),
    ("get", "configmaps", MODULE_NAMESPACE),
    ("create", "pods", "default"),
    ("delete", "pods", "default"),
    ("update", "nodes", None),
    ("update", "nodes/status", None),
    ("create", "nodes", None),
    ("delete", "nodes", None),
    ("create", "helmreleases.helm.toolkit.fluxcd.io", "default"),
    ("patch", "helmrepositories.source.toolkit.fluxcd.io", "flux-system"),
    ("create", "daemonsets.apps", "gpu-operator"),
    ("patch", "clusterpolicies.nvidia.com", None),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
    ("delete", "gpus.gpu.kyma-project.io", None),
    ("impersonate", "serviceaccounts", MODULE_NAMESPACE),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io/gpus.gpu.kyma-project.io", None),
    ("delete", "customresourcedefinitions.apiextensions.k8s.io/clusterpolicies.nvidia.com", None),
    ("patch", "deployments.apps/gpu-manager", MODULE_NAMESPACE),
    ("delete", "deployments.apps", "default"),
    ("escalate", "roles.rbac.authorization.k8s.io/gpu-manager", MODULE_NAMESPACE),
    # Issue 32: the module's Flux accounts and rights ship with the module (flux/access).
    ("bind", "roles.rbac.authorization.k8s.io/gpu-flux-helm-controller", MODULE_NAMESPACE),
    ("escalate", "roles.rbac.authorization.k8s.io/gpu-flux-helm-controller", MODULE_NAMESPACE),
    ("patch", "roles.rbac.authorization.k8s.io/gpu-flux-helm-controller", MODULE_NAMESPACE),
    ("create", "roles.rbac.authorization.k8s.io", MODULE_NAMESPACE),
    ("create", "rolebindings.rbac.authorization.k8s.io", MODULE_NAMESPACE),
    ("create", "serviceaccounts", MODULE_NAMESPACE),
    ("create", "services", MODULE_NAMESPACE),
    ("create", "networkpolicies.networking.k8s.io", MODULE_NAMESPACE),
    ("bind", "clusterroles.rbac.authorization.k8s.io/cluster-admin", None),
    ("create", "rolebindings.rbac.authorization.k8s.io", "default"),
    ("update", "leases.coordination.k8s.io/kube-scheduler", "kube-system"),
    ("update", "leases.coordination.k8s.io/other", MODULE_NAMESPACE),
    ("*", "*", None),
]


def _can(cluster: LocalCluster, verb: str, resource: str, namespace: str | None) -> bool:
    scope = ["-n", namespace] if namespace else ["--all-namespaces"]
    if resource.endswith("/status"):  # kubectl reads "kind/name": ask for the subresource
        scope.append("--subresource=status")
        resource = resource.removesuffix("/status")
    result = cluster.kubectl("auth", "can-i", verb, resource, f"--as={SA}", *scope, check=False)
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize(("verb", "resource", "namespace"), ALLOWED)
def test_service_account_may(
    local_cluster: LocalCluster,
    sa_operator: OperatorProcess,
    verb: str,
    resource: str,
    namespace: str | None,
) -> None:
    assert _can(local_cluster, verb, resource, namespace)


@pytest.mark.parametrize(("verb", "resource", "namespace"), DENIED)
def test_service_account_may_not(
    local_cluster: LocalCluster,
    sa_operator: OperatorProcess,
    verb: str,
    resource: str,
    namespace: str | None,
) -> None:
    assert not _can(local_cluster, verb, resource, namespace), json.dumps([verb, resource])
