"""Users bound to Kubernetes' stock view/edit/admin ClusterRoles get the Gpu through the
module's aggregated ClusterRoles (config/rbac/aggregate_user_roles.yaml), on the real API
server with the real clusterrole-aggregation controller: view reads and cannot write, edit
and admin write, a namespaced RoleBinding of edit does not reach the cluster-scoped Gpu.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.harness.binaries import require
from tests.harness.cluster import LocalCluster
from tests.harness.module import ROOT, install_crds, wait_until
from tests.harness.procs import ManagedProcess, free_port, http_ok, insecure_tls

pytestmark = pytest.mark.integration

GPUS = "gpus.gpu.kyma-project.io"
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
VIEWER, EDITOR, ADMIN, NS_EDITOR = "gpu-viewer", "gpu-editor", "gpu-admin", "gpu-ns-editor"
BINDINGS = {VIEWER: "view", EDITOR: "edit", ADMIN: "admin"}
PATCH = json.dumps({"metadata": {"annotations": {"test.kyma-project.io/touched": "yes"}}})


def _shipped_user_roles(cluster: LocalCluster) -> list[dict[str, Any]]:
    """The aggregated ClusterRoles as the module manifest (config/default) renders them."""
    rendered = cluster.kubectl("kustomize", str(ROOT / "config" / "default")).stdout
    return [
        o
        for o in yaml.safe_load_all(rendered)
        if o
        and o["kind"] == "ClusterRole"
        and any(k.startswith(AGGREGATE) for k in (o["metadata"].get("labels") or {}))
    ]


def _aggregated(cluster: LocalCluster, role: str, verb: str) -> bool:
    """The stock ClusterRole `role` has received a rule with `verb` on gpus."""
    obj = cluster.get_object("clusterrole", role) or {}
    return any(
        "gpu.kyma-project.io" in (r.get("apiGroups") or [])
        and "gpus" in (r.get("resources") or [])
        and verb in (r.get("verbs") or [])
        for r in obj.get("rules") or []
    )


def _binding(user: str, role: str, namespace: str | None = None) -> dict[str, Any]:
    """A ClusterRoleBinding (or, in `namespace`, a RoleBinding) of a stock ClusterRole."""
    meta: dict[str, Any] = {"name": f"test-{user}"}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


@pytest.fixture(scope="module")
def aggregation_controller(local_cluster: LocalCluster) -> Iterator[ManagedProcess]:
    """kube-controller-manager with only the clusterrole-aggregation controller.

    The harness's controller manager runs a fixed set of controllers without this one; a
    second instance with just it (no leader election, its own port) fills the stock roles.
    """
    port = free_port()
    process = ManagedProcess(
        "kube-controller-manager-aggregation",
        [
            str(require("kube-controller-manager")["kube-controller-manager"]),
            f"--kubeconfig={local_cluster.kubeconfig}",
            "--controllers=clusterrole-aggregation-controller",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={local_cluster.workdir / 'kube-controller-manager-aggregation'}",
            "--profiling=false",
        ],
        local_cluster.log_dir / "kube-controller-manager-aggregation.log",
        cwd=local_cluster.workdir,
    )
    local_cluster.register(process)
    process.start()
    try:
        context = insecure_tls()
        process.wait_healthy(
            lambda: http_ok(f"https://127.0.0.1:{port}/healthz", context=context), timeout=60
        )
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def users(local_cluster: LocalCluster, aggregation_controller: ManagedProcess) -> Iterator[str]:
    """The Gpu CRD, the shipped aggregated roles, the default Gpu, and one user per stock role
    (ClusterRoleBindings) plus a namespace owner (RoleBinding of edit). Yields that namespace."""
    install_crds(local_cluster)
    roles = _shipped_user_roles(local_cluster)
    assert sorted(r["metadata"]["name"] for r in roles) == ["kyma-gpu-edit", "kyma-gpu-view"]
    local_cluster.apply(*roles)
    for role, verb in (("view", "list"), ("edit", "patch"), ("admin", "patch")):
        wait_until(lambda: _aggregated(local_cluster, role, verb), 60,  # noqa: B023
                   f"{verb} on gpus aggregated into {role}")  # fmt: skip
    namespace = "gpu-rbac-users"
    if local_cluster.get_object("namespace", namespace) is None:
        local_cluster.create_namespace(namespace)
    bindings = [_binding(user, role) for user, role in BINDINGS.items()]
    bindings.append(_binding(NS_EDITOR, "edit", namespace))
    local_cluster.apply(*bindings)
    # The default Gpu as KLM creates it. No manager runs in this module, so nothing reconciles
    # it and nothing holds it back at deletion.
    local_cluster.apply(yaml.safe_load((ROOT / "config" / "samples" / "gpu.yaml").read_text()))
    try:
        yield namespace
    finally:
        local_cluster.kubectl("delete", GPUS, "gpu", "--wait=false", "--ignore-not-found")
        for binding in bindings:
            kind = binding["kind"].lower()
            scope = ["-n", namespace] if kind == "rolebinding" else []
            local_cluster.kubectl("delete", kind, binding["metadata"]["name"], *scope,
                                  "--ignore-not-found")  # fmt: skip
        local_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def _as(cluster: LocalCluster, user: str, *args: str) -> tuple[bool, str]:
    """kubectl as `user` (impersonated by the admin); (succeeded, stderr)."""
    result = cluster.kubectl(*args, f"--as={user}", check=False)
    return result.returncode == 0, result.stderr


@pytest.mark.parametrize("user", [VIEWER, EDITOR, ADMIN])
def test_stock_roles_read_the_gpu(local_cluster: LocalCluster, users: str, user: str) -> None:
    ok, err = _as(local_cluster, user, "get", GPUS, "gpu", "-o", "name")
    assert ok, err
    ok, err = _as(local_cluster, user, "get", GPUS, "-o", "name")
    assert ok, err
    ok, err = _as(local_cluster, user, "auth", "can-i", "watch", GPUS)
    assert ok, err


def test_view_cannot_change_the_gpu(local_cluster: LocalCluster, users: str) -> None:
    ok, err = _as(local_cluster, VIEWER, "patch", GPUS, "gpu", "--type=merge", "-p", PATCH)
    assert not ok
    assert "forbidden" in err.lower(), err
    for verb in ("update", "delete", "create"):
        ok, err = _as(local_cluster, VIEWER, "auth", "can-i", verb, GPUS)
        assert not ok, f"view may {verb} gpus"


@pytest.mark.parametrize("user", [EDITOR, ADMIN])
def test_edit_and_admin_change_the_gpu(local_cluster: LocalCluster, users: str, user: str) -> None:
    patch = json.dumps({"metadata": {"annotations": {"test.kyma-project.io/touched": user}}})
    ok, err = _as(local_cluster, user, "patch", GPUS, "gpu", "--type=merge", "-p", patch)
    assert ok, err
    gpu = local_cluster.get_object(GPUS, "gpu") or {}
    assert gpu["metadata"]["annotations"]["test.kyma-project.io/touched"] == user
    ok, err = _as(local_cluster, user, "auth", "can-i", "update", GPUS)
    assert ok, err
    # The status and the finalizer are the manager's alone.
    for sub in ("status", "finalizers"):
        ok, _ = _as(local_cluster, user, "auth", "can-i", "update", GPUS, f"--subresource={sub}")
        assert not ok, f"{user} may update gpus/{sub}"


def test_namespaced_edit_does_not_reach_the_gpu(local_cluster: LocalCluster, users: str) -> None:
    ok, err = _as(local_cluster, NS_EDITOR, "get", GPUS, "gpu")
    assert not ok
    assert "forbidden" in err.lower(), err
    ok, err = _as(local_cluster, NS_EDITOR, "patch", GPUS, "gpu", "--type=merge", "-p", PATCH)
    assert not ok
    assert "forbidden" in err.lower(), err
