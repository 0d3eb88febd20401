"""The manager's Node writes are held at admission (issue 33), on the real API server.

Node marks for GPU health let the manager's account patch nodes and nodes/status (RBAC cannot
narrow a patch to fields); the ValidatingAdmissionPolicy kyma-gpu-manager-nodes allows only
its marks: the condition KymaGpuUnhealthy (True only on a node with GPU evidence), a cordon of
a GPU node with the annotation gpu.kyma-project.io/cordoned, and the uncordon of a node that
carries it. Each write here is what the manager sends (a strategic merge patch, impersonating
system:serviceaccount:kyma-system:gpu-manager) to two plain Nodes of its own (no kubelet): one
with GPU evidence (a g6.xlarge), one without (an m5.large); config/default is in force as KLM
applies it. GPU evidence is what no tenant writes (issue 43): GPU resources the kubelet
reports, a GPU machine type of the registry, the mark itself; never NFD's or GFD's labels.

Two writes never reach admission as sent: the API server's own strategies drop a spec change
through nodes/status and a status change through nodes before any admission plugin sees them,
so those are shown to change nothing rather than to be refused.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kyma_gpu.extensions.node_marks.names import (
    CORDON_ANNOTATION,
    CORDON_VALUE,
    NODE_CONDITION,
    UNTRUSTED_GPU_LABELS,
)
from kyma_gpu.facts.node import GPU_RESOURCE
from kyma_gpu_tools.manager_policy import ACCOUNT, NODE_SPEC_FIELDS, NODE_STATUS_FIELDS, NODES_NAME
from tests.harness.cluster import LocalCluster, close_client
from tests.harness.module import install_crds, install_module_rbac, wait_until

pytestmark = pytest.mark.integration

SMP = "application/strategic-merge-patch+json"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
WORDS = "the manager's account gpu-manager (kyma-system)"
Write = Callable[..., tuple[bool, str]]


def _client(cluster: LocalCluster, user: str | None) -> Any:
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
    if user is not None:
        api_client.set_default_header("Impersonate-User", user)
    return client.CoreV1Api(api_client)


def _patch(api: Any, name: str, body: dict[str, Any], status: bool = False) -> tuple[bool, str]:
    """A strategic merge patch, as the manager sends it: (allowed, the API server's words)."""
    from kubernetes.client.exceptions import ApiException

    call = api.patch_node_status if status else api.patch_node
    try:
        call(name, body, _content_type=SMP)
    except ApiException as err:
        return False, str(json.loads(err.body or "{}").get("message", err.body))
    return True, ""


def _node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {"team": "a"}}}  # fmt: skip


def _mark(status: str, reason: str = "GpusMissing") -> dict[str, Any]:
    now = "2026-01-01T00:00:00Z"
    condition = {"type": NODE_CONDITION, "status": status, "reason": reason, "message": "2 of 4",
                 "lastTransitionTime": now, "lastHeartbeatTime": now}  # fmt: skip
    return {"status": {"conditions": [condition]}}


def _cordon(unschedulable: bool, annotation: str | None) -> dict[str, Any]:
    return {"spec": {"unschedulable": unschedulable},
            "metadata": {"annotations": {CORDON_ANNOTATION: annotation}}}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(local_cluster: LocalCluster) -> LocalCluster:
    install_crds(local_cluster)
    install_module_rbac(local_cluster)
    manager = _client(local_cluster, ACCOUNT)
    probe = f"marks-probe-{uuid.uuid4().hex[:6]}"
    local_cluster.apply(_node(probe, {}))

    def refused() -> bool:
        # a new value each time: a probe the policy missed must not make the next one a no-op
        label = {"metadata": {"labels": {"probe": uuid.uuid4().hex[:8]}}}
        return NODES_NAME in _patch(manager, probe, label)[1]

    try:
        # A new admission policy takes effect once the API server has loaded it (about a second).
        wait_until(refused, 30, "the policy kyma-gpu-manager-nodes in force")
    finally:
        local_cluster.kubectl("delete", "node", probe, "--wait=false", check=False)
        close_client(manager.api_client)
    return local_cluster


@pytest.fixture
def nodes(cluster: LocalCluster) -> Iterator[tuple[str, str]]:
    """(a node with GPU evidence, a node without), fresh for each test."""
    suffix = uuid.uuid4().hex[:6]
    gpu, cpu = f"marks-gpu-{suffix}", f"marks-cpu-{suffix}"
    cluster.apply(_node(gpu, {INSTANCE_TYPE: "g6.xlarge", "team": "a"}),
                  _node(cpu, {INSTANCE_TYPE: "m5.large", "team": "a"}))  # fmt: skip
    yield gpu, cpu
    cluster.kubectl("delete", "node", gpu, cpu, "--wait=false", check=False)


@pytest.fixture(scope="module")
def as_manager(cluster: LocalCluster) -> Iterator[Write]:
    api = _client(cluster, ACCOUNT)
    yield lambda name, body, status=False: _patch(api, name, body, status)
    close_client(api.api_client)


@pytest.fixture(scope="module")
def as_admin(cluster: LocalCluster) -> Iterator[Write]:
    api = _client(cluster, None)
    yield lambda name, body, status=False: _patch(api, name, body, status)
    close_client(api.api_client)


def _get(cluster: LocalCluster, name: str) -> dict[str, Any]:
    node = cluster.get_object("node", name)
    assert node is not None, name
    return node


def _marks(cluster: LocalCluster, name: str) -> list[str]:
    conditions = _get(cluster, name).get("status", {}).get("conditions", [])
    return [c["status"] for c in conditions if c["type"] == NODE_CONDITION]


def _refused(said: tuple[bool, str], words: str) -> None:
    ok, message = said
    assert not ok, "allowed"
    assert NODES_NAME in message, message
    assert f"{WORDS} " in message, message
    assert words in message, message


# -- the condition (nodes/status) --


def test_it_marks_a_gpu_node_and_clears_the_mark(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write
) -> None:
    gpu, _ = nodes
    assert as_manager(gpu, _mark("True"), status=True) == (True, "")
    assert _marks(cluster, gpu) == ["True"]
    assert as_manager(gpu, _mark("True", "GpusUnhealthy"), status=True) == (True, "")
    assert as_manager(gpu, _mark("False", "GpusHealthy"), status=True) == (True, "")
    assert _marks(cluster, gpu) == ["False"]
    removed = {"status": {"conditions": [{"type": NODE_CONDITION, "$patch": "delete"}]}}
    assert as_manager(gpu, removed, status=True) == (True, "")
    assert _marks(cluster, gpu) == []


def test_it_marks_no_node_without_gpu_evidence(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write
) -> None:
    _, cpu = nodes
    _refused(as_manager(cpu, _mark("True"), status=True), "True only on a Node with GPU evidence")
    assert _marks(cluster, cpu) == []
    # a node that lost its evidence can still be cleared
    assert as_manager(cpu, _mark("False", "GpusHealthy"), status=True) == (True, "")


EVIDENCE: dict[str, tuple[dict[str, Any], bool]] = {
    # the kubelet's device plugin advertises GPUs (a patch of nodes/status)
    "capacity": ({"status": {"capacity": {GPU_RESOURCE: "4"}}}, True),
    "allocatable": ({"status": {"allocatable": {GPU_RESOURCE: "1"}}}, True),
    "a MIG instance": ({"status": {"capacity": {"nvidia.com/mig-1g.10gb": "7"}}}, True),
    "a GPU machine type": ({"metadata": {"labels": {INSTANCE_TYPE: "g4dn.xlarge"}}}, False),
    "the beta machine type label": (
        {"metadata": {"labels": {"beta.kubernetes.io/instance-type": "g2-standard-4"}}},
        False,
    ),
}


@pytest.mark.parametrize("evidence", sorted(EVIDENCE))
def test_other_gpu_evidence(
    cluster: LocalCluster,
    nodes: tuple[str, str],
    as_manager: Write,
    as_admin: Write,
    evidence: str,
) -> None:
    _, cpu = nodes
    body, status = EVIDENCE[evidence]
    assert as_admin(cpu, body, status=status)[0]
    assert as_manager(cpu, _mark("True"), status=True) == (True, "")
    assert _marks(cluster, cpu) == ["True"]
    assert as_manager(cpu, _cordon(True, CORDON_VALUE)) == (True, "")


TENANT_LABELS = {
    **dict.fromkeys(UNTRUSTED_GPU_LABELS, "true"),
    "nvidia.com/gpu.count": "4",
    "nvidia.com/gpu.product": "NVIDIA-L4",
    "nvidia.com/gpu-driver-upgrade-state": "upgrade-failed",
}
"""What NFD rules in spec.values (or extraLabelNs), or the node itself, can publish (issue 43)."""


@pytest.mark.parametrize("capacity", [None, "0"], ids=["no-capacity", "capacity-0"])
def test_labels_anyone_can_write_are_no_gpu_evidence(
    cluster: LocalCluster,
    nodes: tuple[str, str],
    as_manager: Write,
    as_admin: Write,
    capacity: str | None,
) -> None:
    """An m5.large labelled as a GPU node whose driver upgrade failed: the manager's account
    may neither mark nor cordon it."""
    _, cpu = nodes
    assert as_admin(cpu, {"metadata": {"labels": TENANT_LABELS}})[0]
    if capacity is not None:  # a device plugin that found no GPU
        assert as_admin(cpu, {"status": {"capacity": {GPU_RESOURCE: capacity}}}, status=True)[0]
    _refused(as_manager(cpu, _mark("True", "DriverFailed"), status=True),
             "True only on a Node with GPU evidence")  # fmt: skip
    _refused(as_manager(cpu, _cordon(True, CORDON_VALUE)), "with GPU evidence")
    node = _get(cluster, cpu)
    assert _marks(cluster, cpu) == []
    assert not node["spec"].get("unschedulable")
    assert CORDON_ANNOTATION not in node["metadata"]["annotations"]


def test_a_marked_node_stays_markable(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write, as_admin: Write
) -> None:
    """A node carrying the mark True had GPU evidence when it was marked ("has reported"): its
    reason may change, it may be cordoned, and the mark cleared, though the kubelet reports
    no GPU now (here the mark was set by an administrator on an m5.large)."""
    _, cpu = nodes
    assert as_admin(cpu, _mark("True"), status=True)[0]
    assert as_manager(cpu, _mark("True", "DriverFailed"), status=True) == (True, "")
    assert as_manager(cpu, _cordon(True, CORDON_VALUE)) == (True, "")
    assert as_manager(cpu, _mark("False", "GpusHealthy"), status=True) == (True, "")
    assert as_manager(cpu, _cordon(False, None)) == (True, "")
    _refused(as_manager(cpu, _mark("True"), status=True), "True only on a Node with GPU")


READY = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "x"}
STATUS_CHANGES: dict[str, tuple[dict[str, Any], str]] = {
    "another condition": ({"status": {"conditions": [READY]}}, "its condition KymaGpuUnhealthy"),
    "another condition beside the mark": (
        {"status": {"conditions": [*_mark("True")["status"]["conditions"], READY]}},
        "its condition KymaGpuUnhealthy",
    ),
    "capacity": ({"status": {"capacity": {GPU_RESOURCE: "8"}}}, "its condition KymaGpuUnhealthy"),
    "allocatable": ({"status": {"allocatable": {"cpu": "64"}}}, "its condition KymaGpuUnhealthy"),
    "addresses": (
        {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}},
        "its condition KymaGpuUnhealthy",
    ),
    "a label": ({"metadata": {"labels": {"team": "b"}}}, "changes no label"),
    "an annotation": ({"metadata": {"annotations": {"team": "b"}}}, "changes no annotation"),
    "the cordon annotation": (
        {"metadata": {"annotations": {CORDON_ANNOTATION: CORDON_VALUE}}},
        "only through nodes",
    ),
    "a finalizer": ({"metadata": {"finalizers": ["example.com/keep"]}}, "changes no label"),
}


@pytest.mark.parametrize("change", sorted(STATUS_CHANGES))
def test_nodes_status_changes_nothing_else(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write, change: str
) -> None:
    gpu, _ = nodes
    body, words = STATUS_CHANGES[change]
    before = _get(cluster, gpu)
    _refused(as_manager(gpu, body, status=True), words)
    after = _get(cluster, gpu)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    "body",
    [{"spec": {"taints": [{"key": "example.com/x", "effect": "NoSchedule"}]}},
     {"spec": {"unschedulable": True}},
     _mark("True")],
    ids=["taints through nodes/status", "a cordon through nodes/status", "the mark through nodes"],
)  # fmt: skip
def test_what_the_api_server_drops_before_admission_changes_nothing(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write, body: dict[str, Any]
) -> None:
    """nodes/status keeps the old spec, nodes the old status (the API server's strategies)."""
    gpu, _ = nodes
    status = "spec" in body
    before = _get(cluster, gpu)
    as_manager(gpu, body, status=status)
    after = _get(cluster, gpu)
    assert after["spec"] == before["spec"]
    assert after.get("status", {}).get("conditions") == before.get("status", {}).get("conditions")


# -- the cordon (nodes) --


OWNER = {"apiVersion": "v1", "kind": "Namespace", "name": "default", "uid": str(uuid.uuid4())}
NODE_CHANGES: dict[str, tuple[dict[str, Any], str]] = {
    "a label": ({"metadata": {"labels": {"team": "b"}}}, "changes no label"),
    "a GPU label": (
        {"metadata": {"labels": {UNTRUSTED_GPU_LABELS[1]: "true"}}},
        "changes no label",
    ),
    "its machine type": (
        {"metadata": {"labels": {INSTANCE_TYPE: "p5.48xlarge"}}},
        "changes no label",
    ),
    "an annotation": ({"metadata": {"annotations": {"team": "b"}}}, "changes no annotation"),
    "a new annotation": ({"metadata": {"annotations": {"x": "y"}}}, "changes no annotation"),
    "an owner": (
        {"metadata": {"ownerReferences": [OWNER]}},
        "changes no label",
    ),
    "taints": (
        {"spec": {"taints": [{"key": "example.com/x", "effect": "NoExecute"}]}},
        "spec but unschedulable",
    ),
    # the API server lets podCIDR and providerID be set once: these are the first
    "podCIDR": ({"spec": {"podCIDR": "10.2.0.0/24"}}, "spec but unschedulable"),
    "providerID": ({"spec": {"providerID": "aws:///x/i-1"}}, "spec but unschedulable"),
    "a cordon with a taint": (
        {
            **_cordon(True, CORDON_VALUE),
            "spec": {"unschedulable": True, "taints": [{"key": "x", "effect": "NoSchedule"}]},
        },
        "spec but unschedulable",
    ),
}


@pytest.mark.parametrize("change", sorted(NODE_CHANGES))
def test_nodes_changes_nothing_but_the_cordon(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write, change: str
) -> None:
    gpu, _ = nodes
    body, words = NODE_CHANGES[change]
    before = _get(cluster, gpu)
    _refused(as_manager(gpu, body), words)
    assert (
        _get(cluster, gpu)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    )


def test_it_cordons_a_gpu_node_and_uncordons_it(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write
) -> None:
    gpu, _ = nodes
    assert as_manager(gpu, _cordon(True, CORDON_VALUE)) == (True, "")
    node = _get(cluster, gpu)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][CORDON_ANNOTATION] == CORDON_VALUE
    _refused(
        as_manager(gpu, {"spec": {"unschedulable": False}}), "uncordons only a Node it cordoned"
    )
    _refused(as_manager(gpu, _cordon(True, "other")), f"adds {CORDON_ANNOTATION} only when")
    assert as_manager(gpu, _cordon(False, None)) == (True, "")
    node = _get(cluster, gpu)
    assert not node["spec"].get("unschedulable")
    assert CORDON_ANNOTATION not in node["metadata"]["annotations"]
    assert node["metadata"]["annotations"]["team"] == "a"


def test_it_cordons_no_node_without_gpu_evidence(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write
) -> None:
    _, cpu = nodes
    _refused(as_manager(cpu, _cordon(True, CORDON_VALUE)), "with GPU evidence")
    _refused(as_manager(cpu, {"spec": {"unschedulable": True}}), "cordons only a Node with GPU")
    assert not _get(cluster, cpu)["spec"].get("unschedulable")


def test_a_cordon_needs_the_annotation(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write
) -> None:
    gpu, _ = nodes
    _refused(as_manager(gpu, {"spec": {"unschedulable": True}}), f"marking it {CORDON_ANNOTATION}")
    _refused(as_manager(gpu, {"metadata": {"annotations": {CORDON_ANNOTATION: CORDON_VALUE}}}),
             f"adds {CORDON_ANNOTATION} only when it cordons")  # fmt: skip


def test_it_leaves_someone_elses_cordon_alone(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write, as_admin: Write
) -> None:
    """An administrator cordoned the node (no annotation): the manager cannot uncordon it, nor
    claim the cordon by adding the annotation first."""
    gpu, _ = nodes
    assert as_admin(gpu, {"spec": {"unschedulable": True}})[0]
    _refused(as_manager(gpu, {"spec": {"unschedulable": False}}), "uncordons only a Node it")
    _refused(as_manager(gpu, _cordon(False, None)), "uncordons only a Node it cordoned")
    _refused(as_manager(gpu, _cordon(True, CORDON_VALUE)), f"adds {CORDON_ANNOTATION} only when")
    assert _get(cluster, gpu)["spec"]["unschedulable"] is True


def test_it_drops_its_annotation_after_someone_else_uncordoned(
    cluster: LocalCluster, nodes: tuple[str, str], as_manager: Write, as_admin: Write
) -> None:
    gpu, _ = nodes
    assert as_manager(gpu, _cordon(True, CORDON_VALUE)) == (True, "")
    assert as_admin(gpu, {"spec": {"unschedulable": False}})[0]
    assert as_manager(gpu, {"metadata": {"annotations": {CORDON_ANNOTATION: None}}}) == (True, "")
    assert CORDON_ANNOTATION not in _get(cluster, gpu)["metadata"]["annotations"]


# -- what RBAC refuses, and who else is not held --


@pytest.mark.parametrize("verb", ["create", "delete", "deletecollection", "update"])
def test_rbac_lets_it_patch_nodes_only(cluster: LocalCluster, verb: str) -> None:
    for resource in ("nodes", "nodes --subresource=status"):
        args = ["auth", "can-i", verb, *resource.split(), f"--as={ACCOUNT}"]
        assert cluster.kubectl(*args, check=False).stdout.strip() == "no", (verb, resource)
        args[2] = "patch"
        assert cluster.kubectl(*args, check=False).stdout.strip() == "yes", resource


def test_it_never_creates_or_deletes_a_node(cluster: LocalCluster, nodes: tuple[str, str]) -> None:
    gpu, _ = nodes
    said = cluster.kubectl("delete", "node", gpu, f"--as={ACCOUNT}", check=False)
    assert said.returncode != 0, said.stdout
    assert "forbidden" in said.stderr, said.stderr
    assert cluster.get_object("node", gpu) is not None
    body = json.dumps(_node(f"marks-new-{uuid.uuid4().hex[:6]}", {}))
    said = cluster.kubectl("create", "-f", "-", f"--as={ACCOUNT}", input=body, check=False)
    assert said.returncode != 0, said.stdout
    assert "forbidden" in said.stderr, said.stderr


def test_other_accounts_are_not_held(
    cluster: LocalCluster, nodes: tuple[str, str], as_admin: Write
) -> None:
    _, cpu = nodes
    assert as_admin(cpu, {"metadata": {"labels": {"team": "b"}}}) == (True, "")
    assert as_admin(cpu, _mark("True"), status=True) == (True, "")
    assert as_admin(cpu, {"spec": {"unschedulable": True}}) == (True, "")


def test_the_policy_names_every_field_of_the_api_servers_node(cluster: LocalCluster) -> None:
    """CEL cannot iterate a Node's fields, so the policy names them: a field a newer API server
    adds to NodeSpec or NodeStatus must be added to the policy (or to this exception list)."""
    schemas = json.loads(cluster.kubectl("get", "--raw", "/openapi/v3/api/v1").stdout)
    schemas = schemas["components"]["schemas"]
    spec = set(schemas["io.k8s.api.core.v1.NodeSpec"]["properties"])
    status = set(schemas["io.k8s.api.core.v1.NodeStatus"]["properties"])
    assert spec - {"unschedulable"} == set(NODE_SPEC_FIELDS)
    assert status - {"conditions"} == set(NODE_STATUS_FIELDS)
