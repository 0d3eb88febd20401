"""GPU health (issue 33) end to end, with real Flux and the real NVIDIA GPU Operator controller:
a GPU that the device plugin withdraws shows in `kubectl get gpu` (GPUS 1/2), in GpusHealthy,
status.unhealthyNodes, an Event on the Gpu and the manager's /metrics, without touching Ready;
with spec.health.remediation MarkAndCordon the node gets the condition KymaGpuUnhealthy and is
cordoned, at most maxMarkedPercent of a pool at once, and everything is undone when the GPUs
recover, when node marks are turned off (`Off`) and when the module goes, but a cordon that someone
else set.

The manager runs as its own account with config/default in force, so every Node write it makes
passes the RBAC and the admission policy (kyma-gpu-manager-nodes) a cluster has. kwok plays the
kubelet: a test breaks a GPU the way the device plugin does on a real node, through the Node's
status (WITHDRAW_GPU, the line docs/user-guide.md gives); nothing resets it (kwok writes a
Node's status only until it is Ready, the NVIDIA controller patches its labels, not its
status). Tests run in file order on the one Gpu the module fixture installs; each leaves both
GPU nodes healthy, unmarked and schedulable, the last deletes the Gpu.
"""

from __future__ import annotations

import json
import shlex
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kyma_gpu.extensions.node_marks.names import CORDON_ANNOTATION, NODE_CONDITION
from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.module import (
    MODULE_NAMESPACE,
    ROOT,
    OperatorProcess,
    condition,
    forbidden_lines,
    gpu,
    install_crds,
    install_module_rbac,
    module_on,
    operator_writes,
    service_account_kubeconfig,
    wait_until,
)
from tests.harness.nodes import DEMO_FLEET
from tests.harness.procs import free_port

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

GPUS = "gpus.gpu.kyma-project.io"
POOL = "gpu-l4"
WITHDRAW_GPU = (
    "kubectl patch node <node> --subresource=status --type=merge "
    """-p '{"status":{"allocatable":{"nvidia.com/gpu":"0"}}}'"""
)
"""What the device plugin does, through the kubelet, when a node's one GPU turns unhealthy: the
node still has the GPU (capacity 1), pods cannot get it (allocatable 0). docs/user-guide.md
gives newcomers this line to try GPU health on a test cluster."""
GFD_COUNT = "nvidia.com/gpu.count"
FOLLOW_SECONDS = 60
"""How long the Gpu's status, the marks and the metrics may take to follow a Node's change
(measured: within one poll of wait_until, 0.25 s, every time)."""
T = TypeVar("T")


def _gpu_nodes() -> list[str]:
    """The demo fleet's GPU nodes by name (the order the marks' budget goes by)."""
    items = yaml.safe_load(DEMO_FLEET.read_text())["items"]
    names = [n["metadata"]["name"] for n in items
             if "nvidia.com/gpu" in n["status"].get("capacity", {})]  # fmt: skip
    return sorted(names)


FIRST, SECOND = _gpu_nodes()


@pytest.fixture(scope="module")
def stack(
    local_cluster: LocalCluster, flux_stack: FluxStack
) -> Iterator[tuple[OperatorProcess, int]]:
    """The operator with its /metrics, as the manager's account with config/default in force
    (its RBAC, and the admission policy that holds its Node writes to its marks), the demo
    fleet (two g6.xlarge with one L4 each, one m5.large), and the Gpu with MarkAndCordon, Ready
    with both GPUs healthy."""
    install_crds(local_cluster)
    install_module_rbac(local_cluster)
    port = free_port()
    args = ("--standalone", "--metrics-address", f"127.0.0.1:{port}")
    with module_on(local_cluster, name="operator-health", args=args,
                   kubeconfig=service_account_kubeconfig(local_cluster)) as process:  # fmt: skip
        source = {"chartRepository": flux_stack.helm_repo_url, "insecure": True}
        local_cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                             "metadata": {"name": "gpu"},
                             "spec": {"source": source,
                                      "health": {"remediation": "MarkAndCordon"}}})  # fmt: skip
        wait_until(lambda: _showing(local_cluster, "2/2", "True"), 300,
                   "Ready with 2/2 GPUs healthy")  # fmt: skip
        yield process, port
        local_cluster.kubectl("delete", GPUS, "gpu", "--wait=false", "--ignore-not-found")
        wait_until(lambda: gpu(local_cluster) is None, 240, "the Gpu gone after Flux uninstalled")


@pytest.fixture
def healthy_after(
    local_cluster: LocalCluster, stack: tuple[OperatorProcess, int]
) -> Iterator[None]:
    """Both GPU nodes healthy, unmarked and schedulable when the test is done, whatever it did
    (a failed test must not hand the next a broken node)."""
    yield
    for name in (FIRST, SECOND):
        _set_gpus(local_cluster, name, capacity=1, allocatable=1)
    wait_until(lambda: _showing(local_cluster, "2/2", "True"), FOLLOW_SECONDS,
               "both GPUs healthy again")  # fmt: skip

    def unmarked() -> bool:
        nodes = [_node(local_cluster, name) for name in (FIRST, SECOND)]
        return all(_mark(n) != "True" and _cordoned(n)[1] is None for n in nodes)

    wait_until(unmarked, FOLLOW_SECONDS, "no node marked or cordoned by the module")
    for name in (FIRST, SECOND):
        local_cluster.kubectl("uncordon", name)


# -- reading -------------------------------------------------------------------------------------


def _status(cluster: LocalCluster) -> dict[str, Any]:
    return dict((gpu(cluster) or {}).get("status") or {})


def _showing(cluster: LocalCluster, gpus: str, healthy: str) -> dict[str, Any] | None:
    """The Gpu's status once it is Ready and says `gpus` with GpusHealthy `healthy`."""
    obj = gpu(cluster)
    status = dict((obj or {}).get("status") or {})
    cond = condition(obj, "GpusHealthy") or {}
    ok = (status.get("state") == "Ready" and status.get("gpus") == gpus
          and cond.get("status") == healthy)  # fmt: skip
    return status if ok else None


def _showing_reason(cluster: LocalCluster, name: str, reason: str) -> dict[str, Any] | None:
    """The status once it says 1/2 GPUs, GpusHealthy False for `reason`, and names the node
    unhealthy for it."""
    status = _showing(cluster, "1/2", "False")
    shown = _unhealthy(status or {}).get(name) or {}
    cond = condition(gpu(cluster), "GpusHealthy") or {}
    return status if shown.get("reason") == reason and cond.get("reason") == reason else None


def _showing_unmarked(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    """The status once it names the node unhealthy and not marked."""
    status = _status(cluster)
    shown = _unhealthy(status).get(name)
    return status if shown is not None and shown["marked"] is False else None


def _unhealthy(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in status.get("unhealthyNodes") or []}


def _node(cluster: LocalCluster, name: str) -> dict[str, Any]:
    node = cluster.get_object("node", name)
    assert node is not None, f"Node {name} is gone"
    return node


def _node_condition(node: dict[str, Any]) -> dict[str, Any] | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == NODE_CONDITION:
            return dict(cond)
    return None


def _mark(node: dict[str, Any]) -> str | None:
    """The status of the manager's condition on the node; None: it has none."""
    cond = _node_condition(node)
    return None if cond is None else str(cond.get("status"))


def _marked(cluster: LocalCluster, name: str, reason: str) -> dict[str, Any] | None:
    """The manager's condition on the node once it is True with that reason."""
    cond = _node_condition(_node(cluster, name)) or {}
    return cond if (cond.get("status"), cond.get("reason")) == ("True", reason) else None


def _cordoned(node: dict[str, Any]) -> tuple[bool, str | None]:
    """(spec.unschedulable, the module's cordon annotation)."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return bool((node.get("spec") or {}).get("unschedulable")), annotations.get(CORDON_ANNOTATION)


def _events(cluster: LocalCluster) -> list[dict[str, Any]]:
    """This Gpu's Events as `kubectl events -n kyma-system --for gpu/gpu` lists them (an earlier
    test module's Gpu had the same name, not the same uid)."""
    uid = ((gpu(cluster) or {}).get("metadata") or {}).get("uid")
    out = cluster.kubectl("events", "-n", MODULE_NAMESPACE, "--for", "gpu/gpu", "-o", "json")
    items = json.loads(out.stdout).get("items") or []
    return [e for e in items if (e.get("involvedObject") or {}).get("uid") == uid]


def _event(
    cluster: LocalCluster, type_: str, reason: str, *, besides: set[str]
) -> dict[str, Any] | None:
    """A new Event (its name not in `besides`) of that type and reason."""
    found = [e for e in _events(cluster) if (e["type"], e["reason"]) == (type_, reason)
             and e["metadata"]["name"] not in besides]  # fmt: skip
    return found[0] if found else None


def _event_names(cluster: LocalCluster) -> set[str]:
    return {e["metadata"]["name"] for e in _events(cluster)}


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _metrics_say(port: int, **wanted: float) -> Samples | None:
    """The first scrape where kyma_gpu_gpus{pool=POOL} says healthy=..., unhealthy=... and
    kyma_gpu_unhealthy_gpu_nodes{pool=POOL} nodes=..."""
    found = _scrape(port)
    seen = {
        "healthy": found.get(("kyma_gpu_gpus", (("health", "healthy"), ("pool", POOL)))),
        "unhealthy": found.get(("kyma_gpu_gpus", (("health", "unhealthy"), ("pool", POOL)))),
        "nodes": found.get(("kyma_gpu_unhealthy_gpu_nodes", (("pool", POOL),))),
    }
    return found if all(seen[k] == v for k, v in wanted.items()) else None


def _refused(process: OperatorProcess) -> list[str]:
    """The manager's API calls that RBAC or admission refused, from its whole log."""
    return forbidden_lines(process.log_path.read_text(errors="replace"))


def _node_writes(cluster: LocalCluster, name: str) -> list[dict[str, Any]]:
    """The manager's writes to the Node and its status, from the API server's audit log."""
    return [w for w in operator_writes(cluster)
            if w["resource"] == "nodes" and w["name"] == name]  # fmt: skip


# -- breaking ------------------------------------------------------------------------------------


def _run_documented(cluster: LocalCluster, line: str, node: str) -> None:
    """Run a kubectl line as a user would paste it, with the node's name filled in."""
    args = shlex.split(line.replace("<node>", node))
    assert args[0] == "kubectl", line
    cluster.kubectl(*args[1:])


def _set_gpus(cluster: LocalCluster, node: str, *, capacity: int, allocatable: int) -> None:
    gpus = {"capacity": {"nvidia.com/gpu": str(capacity)},
            "allocatable": {"nvidia.com/gpu": str(allocatable)}}  # fmt: skip
    cluster.kubectl("patch", "node", node, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": gpus}))  # fmt: skip


def _patch_health(cluster: LocalCluster, health: dict[str, Any]) -> None:
    patch = json.dumps({"spec": {"health": health}})
    cluster.kubectl("patch", GPUS, "gpu", "--type=merge", "-p", patch)


def _timed(probe: Callable[[], T | None], what: str) -> tuple[T, float]:
    """wait_until, and how long it took (printed: the report of a run with -s shows it)."""
    began = time.monotonic()
    found = wait_until(probe, FOLLOW_SECONDS, what)
    took = time.monotonic() - began
    print(f"{what}: {took:.2f}s")
    return found, took


# -- the tests -----------------------------------------------------------------------------------


def test_the_user_guide_breaks_a_gpu_with_this_line() -> None:
    """docs/user-guide.md gives newcomers WITHDRAW_GPU for the demo's first GPU node."""
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    assert WITHDRAW_GPU.replace("<node>", FIRST) in guide


def test_healthy_gpus_are_shown(
    local_cluster: LocalCluster, stack: tuple[OperatorProcess, int]
) -> None:
    _, port = stack
    status = _status(local_cluster)
    assert (status["gpusHealthy"], status["gpuTotal"]) == (2, 2), status
    assert (status.get("unhealthyNodes", []), status.get("unhealthyNodeCount", 0)) == ([], 0)
    pools = {p["name"]: p for p in status["pools"]}
    assert (pools[POOL]["nodes"], pools[POOL]["gpusHealthy"]) == (2, 2), pools
    healthy = condition(gpu(local_cluster), "GpusHealthy") or {}
    assert healthy.get("reason") == "GpusHealthy", healthy
    table = local_cluster.kubectl("get", "gpu", "gpu").stdout
    header, row = table.splitlines()[:2]
    assert "GPUS" in header.split(), table
    assert "2/2" in row.split(), table
    wait_until(lambda: _metrics_say(port, healthy=2, unhealthy=0, nodes=0), FOLLOW_SECONDS,
               "/metrics: 2 healthy GPUs in the pool")  # fmt: skip
    for name in (FIRST, SECOND):
        node = _node(local_cluster, name)
        assert (_mark(node), _cordoned(node)) == (None, (False, None)), node


def test_a_withdrawn_gpu_is_reported_marked_and_cordoned(
    local_cluster: LocalCluster, stack: tuple[OperatorProcess, int], healthy_after: None
) -> None:
    process, port = stack
    before = _event_names(local_cluster)
    _run_documented(local_cluster, WITHDRAW_GPU, FIRST)

    status, _ = _timed(lambda: _showing(local_cluster, "1/2", "False"), "status GPUS 1/2")
    healthy = condition(gpu(local_cluster), "GpusHealthy") or {}
    assert healthy["reason"] == "GpusUnhealthy", healthy
    assert FIRST in healthy["message"], healthy
    ready = condition(gpu(local_cluster), "Ready") or {}
    assert ready.get("status") == "True", ready  # health never flips Ready
    assert status["state"] == "Ready"
    assert status["unhealthyNodeCount"] == 1
    shown = _unhealthy(status)[FIRST]
    assert (shown["pool"], shown["reason"], shown["marked"]) == (POOL, "GpusUnhealthy", True)
    assert "withdrawn by the device plugin" in shown["message"], shown
    table = local_cluster.kubectl("get", "gpu", "gpu").stdout
    assert "1/2" in table.splitlines()[1].split(), table

    # The status follows the marks: they are on the Node by the time it names the node marked.
    node = _node(local_cluster, FIRST)
    cond = _node_condition(node) or {}
    assert (cond.get("status"), cond.get("reason")) == ("True", "GpusUnhealthy"), cond
    assert cond.get("message"), cond
    assert cond.get("lastTransitionTime"), cond
    assert _cordoned(node) == (True, NODE_CONDITION), node
    kubelet = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert kubelet["Ready"] == "True", kubelet  # the kubelet's conditions stay as they were
    other = _node(local_cluster, SECOND)
    assert (_mark(other), _cordoned(other)) == (None, (False, None)), other

    assert _refused(process) == []
    warning, _ = _timed(lambda: _event(local_cluster, "Warning", "GpusUnhealthy", besides=before),
                        "a Warning Event GpusUnhealthy")  # fmt: skip
    assert FIRST in warning["message"], warning
    _timed(lambda: _metrics_say(port, healthy=1, unhealthy=1, nodes=1),
           "/metrics: kyma_gpu_gpus unhealthy 1")  # fmt: skip


def test_the_mark_follows_the_finding_and_comes_off_on_recovery(
    local_cluster: LocalCluster, stack: tuple[OperatorProcess, int], healthy_after: None
) -> None:
    _, port = stack
    _run_documented(local_cluster, WITHDRAW_GPU, FIRST)
    first, _ = _timed(lambda: _marked(local_cluster, FIRST, "GpusUnhealthy"),
                      "the node marked GpusUnhealthy")  # fmt: skip

    # The GPU goes missing too: the kubelet's capacity drops (and GPU feature discovery, were it
    # running, would count one less). The mark's reason follows the finding, its time stays.
    before = _event_names(local_cluster)
    if GFD_COUNT in (_node(local_cluster, FIRST)["metadata"].get("labels") or {}):
        local_cluster.kubectl("label", "node", FIRST, f"{GFD_COUNT}-")
    _set_gpus(local_cluster, FIRST, capacity=0, allocatable=0)
    missing, _ = _timed(lambda: _marked(local_cluster, FIRST, "GpusMissing"),
                        "the node's mark GpusMissing")  # fmt: skip
    assert missing["lastTransitionTime"] == first["lastTransitionTime"], (first, missing)
    assert "0 of 1 GPUs present" in missing["message"], missing
    assert _cordoned(_node(local_cluster, FIRST)) == (True, NODE_CONDITION)
    # "1/2" held already while the GPU was only unhealthy: wait for the reason itself.
    status, _ = _timed(lambda: _showing_reason(local_cluster, FIRST, "GpusMissing"),
                       "status GPUS 1/2, the node GpusMissing")  # fmt: skip
    assert _unhealthy(status)[FIRST]["reason"] == "GpusMissing", status
    assert (condition(gpu(local_cluster), "GpusHealthy") or {})["reason"] == "GpusMissing"
    _timed(lambda: _event(local_cluster, "Warning", "GpusMissing", besides=before),
           "a Warning Event GpusMissing")  # fmt: skip

    # Recovery: the device plugin advertises the GPU again.
    before = _event_names(local_cluster)
    _set_gpus(local_cluster, FIRST, capacity=1, allocatable=1)
    status, _ = _timed(lambda: _showing(local_cluster, "2/2", "True"), "status GPUS 2/2")
    assert (status.get("unhealthyNodes", []), status["unhealthyNodeCount"]) == ([], 0), status
    assert (condition(gpu(local_cluster), "GpusHealthy") or {})["reason"] == "GpusHealthy"
    node = _node(local_cluster, FIRST)
    cond = _node_condition(node) or {}
    assert (cond.get("status"), cond.get("reason")) == ("False", "GpusHealthy"), cond
    assert _cordoned(node) == (False, None), node  # uncordoned, the annotation gone
    normal, _ = _timed(lambda: _event(local_cluster, "Normal", "GpusHealthy", besides=before),
                       "a Normal Event GpusHealthy")  # fmt: skip
    assert "2 of 2 GPUs healthy" in normal["message"], normal
    _timed(lambda: _metrics_say(port, healthy=2, unhealthy=0, nodes=0),
           "/metrics: kyma_gpu_gpus unhealthy 0")  # fmt: skip


def test_a_label_alone_is_reported_and_never_marks(
    local_cluster: LocalCluster, stack: tuple[OperatorProcess, int], healthy_after: None
) -> None:
    """GPU feature discovery's count is a label: a NodeFeature object can write it where NFD
    takes them from a tenant's namespace (issue 49, finding 3). Said to be 0 while the kubelet
    still advertises the GPU, the node is reported GpusMissing and is neither marked nor
    cordoned."""
    writes_before = len(_node_writes(local_cluster, FIRST))
    local_cluster.kubectl("label", "node", FIRST, f"{GFD_COUNT}=0", "--overwrite")
    try:
        status, _ = _timed(lambda: _showing_unmarked(local_cluster, FIRST),
                           "the node reported, not marked")  # fmt: skip
        assert _unhealthy(status)[FIRST]["reason"] == "GpusMissing", status
        # The status is written after the marks of the same pass: none came.
        assert len(_node_writes(local_cluster, FIRST)) == writes_before
        node = _node(local_cluster, FIRST)
        assert _mark(node) != "True", node  # False: a mark an earlier test cleared
        assert _cordoned(node) == (False, None), node
    finally:
        local_cluster.kubectl("label", "node", FIRST, f"{GFD_COUNT}-")


def test_at_most_max_marked_percent_of_a_pool_is_marked(
    local_cluster: LocalCluster, stack: tuple[OperatorProcess, int], healthy_after: None
) -> None:
    """20 % of a pool of two is one node (at least one): a second node breaking while the first
    is marked is reported, not marked; it gets the mark once the first recovers."""
    _run_documented(local_cluster, WITHDRAW_GPU, FIRST)
    _timed(lambda: _marked(local_cluster, FIRST, "GpusUnhealthy"), "the first node marked")
    writes_before = len(_node_writes(local_cluster, SECOND))

    _run_documented(local_cluster, WITHDRAW_GPU, SECOND)
    status, _ = _timed(lambda: _showing(local_cluster, "0/2", "False"), "status GPUS 0/2")
    shown = _unhealthy(status)
    assert status["unhealthyNodeCount"] == 2, status
    assert (shown[FIRST]["marked"], shown[SECOND]["marked"]) == (True, False), shown
    # The status is written after the marks of the same pass: the second node's turn has come
    # and gone without a write to it.
    assert len(_node_writes(local_cluster, SECOND)) == writes_before
    second = _node(local_cluster, SECOND)
    assert (_mark(second), _cordoned(second)) == (None, (False, None)), second
    assert _cordoned(_node(local_cluster, FIRST)) == (True, NODE_CONDITION)

    # The first recovers: its place goes to the second.
    _set_gpus(local_cluster, FIRST, capacity=1, allocatable=1)
    _timed(lambda: _marked(local_cluster, SECOND, "GpusUnhealthy"), "the second node marked")
    status, _ = _timed(lambda: _showing(local_cluster, "1/2", "False"), "status GPUS 1/2")
    assert [(n["name"], n["marked"]) for n in status["unhealthyNodes"]] == [(SECOND, True)]
    assert _cordoned(_node(local_cluster, SECOND)) == (True, NODE_CONDITION)
    first = _node(local_cluster, FIRST)
    assert (_mark(first), _cordoned(first)) == ("False", (False, None)), first


def test_a_cordon_the_module_did_not_set_stays(
    local_cluster: LocalCluster, stack: tuple[OperatorProcess, int], healthy_after: None
) -> None:
    """An administrator cordoned the node (for maintenance, say): the module marks it when its
    GPU breaks, but neither claims the cordon nor lifts it when the GPU recovers."""
    writes_before = len(_node_writes(local_cluster, SECOND))
    local_cluster.kubectl("cordon", SECOND)
    _run_documented(local_cluster, WITHDRAW_GPU, SECOND)
    _timed(lambda: _marked(local_cluster, SECOND, "GpusUnhealthy"), "the cordoned node marked")
    assert _cordoned(_node(local_cluster, SECOND)) == (True, None)

    _set_gpus(local_cluster, SECOND, capacity=1, allocatable=1)
    _timed(lambda: _mark(_node(local_cluster, SECOND)) == "False", "the mark off")
    wait_until(lambda: _showing(local_cluster, "2/2", "True"), FOLLOW_SECONDS, "2/2 healthy")
    assert _cordoned(_node(local_cluster, SECOND)) == (True, None)
    writes = _node_writes(local_cluster, SECOND)[writes_before:]
    cordons = [w for w in writes if w["subresource"] != "status"]
    assert cordons == [], cordons  # the manager never wrote the Node itself, only its status


def test_turning_remediation_off_undoes_the_marks(
    local_cluster: LocalCluster, stack: tuple[OperatorProcess, int], healthy_after: None
) -> None:
    """Node marks off: the GPU is still reported unhealthy, but the node loses the mark and
    the module's cordon."""
    _run_documented(local_cluster, WITHDRAW_GPU, FIRST)
    _timed(lambda: _marked(local_cluster, FIRST, "GpusUnhealthy"), "the node marked")
    try:
        _patch_health(local_cluster, {"remediation": "Off"})
        _timed(lambda: _mark(_node(local_cluster, FIRST)) == "False", "the mark off")
        status, _ = _timed(lambda: _showing_unmarked(local_cluster, FIRST), "shown unmarked")
        assert status["gpus"] == "1/2", status
        node = _node(local_cluster, FIRST)
        assert _cordoned(node) == (False, None), node
    finally:
        _patch_health(local_cluster, {"remediation": "MarkAndCordon"})


def test_uninstalling_lifts_the_modules_marks(
    local_cluster: LocalCluster, stack: tuple[OperatorProcess, int]
) -> None:
    """The last test: the Gpu goes (Kyma disables the module) while it has a node marked and
    cordoned. Nothing of the module's stays on the Nodes (no one else would ever lift its
    cordon), and a cordon someone else set stays."""
    try:
        local_cluster.kubectl("cordon", SECOND)
        _run_documented(local_cluster, WITHDRAW_GPU, FIRST)
        _timed(lambda: _marked(local_cluster, FIRST, "GpusUnhealthy"), "the node marked")
        # The condition and the cordon are two patches, in that order: wait for the second.
        _timed(lambda: _cordoned(_node(local_cluster, FIRST)) == (True, NODE_CONDITION) or None,
               "the node cordoned")  # fmt: skip

        local_cluster.kubectl("delete", GPUS, "gpu", "--wait=false")
        wait_until(lambda: gpu(local_cluster) is None, 240, "the Gpu gone after Flux uninstalled")
        first = _node(local_cluster, FIRST)
        assert _mark(first) in (None, "False"), _node_condition(first)
        assert _cordoned(first) == (False, None), first
        assert _cordoned(_node(local_cluster, SECOND)) == (True, None)
        assert _refused(stack[0]) == []  # nothing the module did all along was refused
    finally:
        _set_gpus(local_cluster, FIRST, capacity=1, allocatable=1)
        for name in (FIRST, SECOND):
            local_cluster.kubectl("uncordon", name)
