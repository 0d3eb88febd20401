"""What the module's admission policies cost every request of a cluster (issue 32).

Four of the module's ValidatingAdmissionPolicies match every kind (`*/*`) and select their
account by a matchCondition on the user name (kyma-gpu-release, kyma-gpu-manager,
kyma-gpu-chart-accounts); the others match a few kinds only. So every write in the cluster pays
at least those matchConditions. This starts the harness's cluster (real kube-apiserver and
etcd), creates N Nodes, then patches each Node's labels once (what kubelets and controllers do
most, as another user than the module's), and times it without the module's policies, with
them, and with them as the NVIDIA operator's account (where kyma-gpu-chart-accounts runs all of
its validations). Wall time on the client, sequential requests over one connection, so the
figures are API server latency per request.

    python benchmarks/admission_cost.py [--nodes 1000 5000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness.cluster import LocalCluster
from tests.harness.module import ROOT, install_crds

POLICIES = ROOT / "config" / "admission"
FILES = ("gpu_images_policy.yaml", "chart_sources_policy.yaml",
         "manager_policy.yaml", "flux_policy.yaml", "chart_accounts_policy.yaml")  # fmt: skip
CONTROLLER = "system:serviceaccount:gpu-operator:gpu-operator"


def _client(cluster: LocalCluster, user: str | None) -> Any:
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
    if user is not None:
        api_client.set_default_header("Impersonate-User", user)
    return client.CoreV1Api(api_client)


def _coordination(cluster: LocalCluster) -> Any:
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
    return client.CoordinationV1Api(api_client)


def _patch_all(api: Any, names: list[str], label: str) -> list[float]:
    times = []
    for i, name in enumerate(names):
        body = {"metadata": {"labels": {label: str(i)}}}
        start = time.perf_counter()
        api.patch_node(name, body)
        times.append(time.perf_counter() - start)
    return times


def _renew_all(api: Any, names: list[str]) -> list[float]:
    """Each Node's Lease in kube-node-lease renewed once, as a kubelet does every 10 s."""
    times = []
    for name in names:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        start = time.perf_counter()
        api.patch_namespaced_lease(name, "kube-node-lease", {"spec": {"renewTime": now}})
        times.append(time.perf_counter() - start)
    return times


def _row(what: str, times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p99 = ms[int(len(ms) * 0.99) - 1]
    return (
        f"| {what} | {len(ms)} | {statistics.median(ms):.2f} | {p99:.2f} | {sum(ms) / 1000:.1f} |"
    )


def _policies(cluster: LocalCluster, apply: bool) -> None:
    for name in FILES:
        docs = [d for d in yaml.safe_load_all((POLICIES / name).read_text()) if d]
        if apply:
            cluster.apply(*docs)
        else:
            for d in docs:
                cluster.kubectl("delete", d["kind"].lower(), d["metadata"]["name"],
                                "--ignore-not-found")  # fmt: skip
    release = ROOT / "config" / "rbac" / "release_rbac.yaml"
    for d in (d for d in yaml.safe_load_all(release.read_text()) if d):
        if d["kind"].startswith("ValidatingAdmissionPolicy"):
            if apply:
                cluster.apply(d)
            else:
                cluster.kubectl("delete", d["kind"].lower(), d["metadata"]["name"],
                                "--ignore-not-found")  # fmt: skip
    time.sleep(3)  # the API server loads (or drops) policies within about a second


def measure(count: int, rounds: int) -> list[str]:
    cluster = LocalCluster()
    cluster.start()
    try:
        install_crds(cluster)
        names = [f"bench-{i:05d}" for i in range(count)]
        nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in names]
        for start in range(0, count, 500):
            cluster.apply(*nodes[start : start + 500])
        leases = [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": n, "namespace": "kube-node-lease"},
                   "spec": {"holderIdentity": n}} for n in names]  # fmt: skip
        for start in range(0, count, 500):
            cluster.apply(*leases[start : start + 500])
        wide = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "bench-controller"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "gpu-operator",
                              "namespace": "gpu-operator"}]}  # fmt: skip
        cluster.apply(wide)
        admin, controller = _client(cluster, None), _client(cluster, CONTROLLER)
        _patch_all(admin, names[:200], "warm")  # connections, caches
        coordination = _coordination(cluster)
        renew_without: list[float] = []
        renew_with: list[float] = []
        without: list[float] = []
        with_policies: list[float] = []
        as_controller: list[float] = []
        for r in range(rounds):  # ABBA: each side goes first in half the rounds (drift, warmth)
            for apply in (False, True) if r % 2 == 0 else (True, False):
                _policies(cluster, apply=apply)
                if apply:
                    with_policies += _patch_all(admin, names, f"b{r}")
                    renew_with += _renew_all(coordination, names)
                    as_controller += _patch_all(controller, names, f"nvidia.com/c{r}")
                else:
                    without += _patch_all(admin, names, f"a{r}")
                    renew_without += _renew_all(coordination, names)
        return [
            _row(f"{count} Nodes x {rounds}, no module policy, admin", without),
            _row(f"{count} Nodes x {rounds}, the module's policies, admin", with_policies),
            _row(f"{count} Nodes x {rounds}, the module's policies, as gpu-operator",
                 as_controller),
            _row(f"{count} Lease renewals x {rounds}, no module policy", renew_without),
            _row(f"{count} Lease renewals x {rounds}, the module's policies", renew_with),
        ]  # fmt: skip
    finally:
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--rounds", type=int, default=4, help="alternations per size (ABBA)")
    args = parser.parse_args()
    print("| requests | n | median ms | p99 ms | total s |")
    print("|---|--:|--:|--:|--:|")
    for count in args.nodes:
        for row in measure(count, args.rounds):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
