"""The shipped RBAC is sufficient and no wider than needed: the operator runs with the
gpu-manager ServiceAccount's token only (leader election on, as in the Deployment) through a
create/status/delete cycle, and `kubectl auth can-i` refuses what it must not do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.harness.cluster import LocalCluster
from tests.harness.module import (
    MODULE_NAMESPACE,
    ROOT,
    OperatorProcess,
    gpu,
    helm_release,
    install_crds,
    module_on,
    wait_until,
)

pytestmark = pytest.mark.integration

SA = f"system:serviceaccount:{MODULE_NAMESPACE}:gpu-manager"


def _install_module(cluster: LocalCluster) -> None:
    """config/default as KLM would apply it (CRDs first), minus the manager Deployment: the
    operator runs here as a local process with the Deployment's ServiceAccount."""
    rendered = cluster.kubectl("kustomize", str(ROOT / "config" / "default")).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    rest = [o for o in objects if o["kind"] not in ("CustomResourceDefinition", "Deployment")]
    cluster.apply(*crds)
    for crd in crds:
        cluster.wait_crds_established(crd["metadata"]["name"])
    cluster.apply(*rest)


def _service_account_kubeconfig(cluster: LocalCluster) -> Path:
    token = cluster.kubectl("create", "token", "gpu-manager", "-n", MODULE_NAMESPACE,
                            "--duration=2h").stdout.strip()  # fmt: skip
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "gpu-manager", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "gpu-manager"
    path = cluster.workdir / "gpu-manager.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def sa_operator(local_cluster: LocalCluster) -> Iterator[OperatorProcess]:
    install_crds(local_cluster)  # also the Flux CRDs and the kyma-system namespace
    _install_module(local_cluster)
    with module_on(
        local_cluster, name="operator-rbac", kubeconfig=_service_account_kubeconfig(local_cluster),
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
    assert "403" not in log, log
    assert "Forbidden" not in log, log


ALLOWED = [
    ("list", "nodes", None),
    ("watch", "pods", None),
    ("patch", "gpus.gpu.kyma-project.io/status", None),
    ("create", "helmreleases.helm.toolkit.fluxcd.io", MODULE_NAMESPACE),
    ("delete", "helmrepositories.source.toolkit.fluxcd.io", MODULE_NAMESPACE),
    ("update", "leases.coordination.k8s.io/kyma-gpu-manager", MODULE_NAMESPACE),
]
DENIED = [
    ("get", "secrets", MODULE_NAMESPACE),
    ("list", "secrets", None),
    ("get", "configmaps", MODULE_NAMESPACE),
    ("create", "pods", "default"),
    ("delete", "pods", "default"),
    ("patch", "nodes", None),
    ("delete", "nodes", None),
    ("create", "helmreleases.helm.toolkit.fluxcd.io", "default"),
    ("patch", "helmrepositories.source.toolkit.fluxcd.io", "flux-system"),
    ("create", "daemonsets.apps", "gpu-operator"),
    ("patch", "clusterpolicies.nvidia.com", None),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", None),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
    ("delete", "gpus.gpu.kyma-project.io", None),
    ("impersonate", "serviceaccounts", MODULE_NAMESPACE),
    ("update", "leases.coordination.k8s.io/kube-scheduler", "kube-system"),
    ("update", "leases.coordination.k8s.io/other", MODULE_NAMESPACE),
    ("*", "*", None),
]


def _can(cluster: LocalCluster, verb: str, resource: str, namespace: str | None) -> bool:
    scope = ["-n", namespace] if namespace else ["--all-namespaces"]
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
