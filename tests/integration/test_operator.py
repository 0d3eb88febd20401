"""The operator against a real API server with real controllers (no Flux controllers here:
the tests write the HelmRelease status through the status subresource, standing in for
helm-controller; with no chart installed there is no NVIDIA controller either, and no test
writes what it would). One operator process serves the whole module; tests run in file order.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from kyma_gpu.adapter import KubeAdapter, ListQuery, ObjectRef
from kyma_gpu.observe.watches import FluxFacts, flux_facts, flux_watch
from tests.harness.cluster import LocalCluster
from tests.harness.module import (
    MODULE_NAMESPACE,
    TARGET_NAMESPACE,
    OperatorProcess,
    condition,
    gpu,
    helm_release,
    install_crds,
    module_on,
    operator_writes,
    wait_until,
)

pytestmark = pytest.mark.integration
CRD_MANAGER = ("--field-manager=kyma-gpu-tests", "--force-conflicts")
"""The harness's field manager for the CRDs (tests/harness/module.py install_crds)."""

GPU_MANIFEST: dict[str, Any] = {
    "apiVersion": "gpu.kyma-project.io/v1beta1",
    "kind": "Gpu",
    "metadata": {"name": "gpu"},
    "spec": {},
}
UBUNTU_NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "azure-t4-ubuntu", "labels": {
        "node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3",
        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
        "worker.gardener.cloud/pool": "gpu-ubuntu"}},
    "spec": {"providerID": "azure:///subscriptions/x/resourceGroups/y/providers/"
                           "Microsoft.Compute/virtualMachines/azure-t4-ubuntu"},
    "status": {"capacity": {"cpu": "4", "memory": "28Gi", "pods": "110", "nvidia.com/gpu": "1"},
               "allocatable": {"cpu": "4", "memory": "28Gi", "pods": "110",
                               "nvidia.com/gpu": "1"},
               "nodeInfo": {"osImage": "Ubuntu 22.04.5 LTS", "architecture": "amd64",
                            "kernelVersion": "6.5.0-1025-azure", "operatingSystem": "linux",
                            "containerRuntimeVersion": "containerd://1.7.27",
                            "kubeletVersion": "v1.33.4", "kubeProxyVersion": "",
                            "bootID": "b0", "machineID": "m0", "systemUUID": "u0"}},
}  # fmt: skip


@pytest.fixture(scope="module")
def operator(local_cluster: LocalCluster) -> Iterator[OperatorProcess]:
    with module_on(local_cluster) as process:
        yield process


@pytest.fixture
def show_operator_log(operator: OperatorProcess, request: pytest.FixtureRequest) -> Iterator[None]:
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed > failed_before:
        print(f"--- operator log (tail) ---\n{operator.log()}")


def _apply(cluster: LocalCluster, obj: dict[str, Any]) -> Any:
    return cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager=kyma-gpu-tests",
        "-f",
        "-",
        input=json.dumps(obj),
        check=False,
    )


BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("unknown mode", {"driver": {"mode": "Foo"}}, 'Unsupported value: "Foo"'),
    ("version letters", {"driver": {"version": "abc"}}, "spec.driver.version"),
    ("version two digits", {"driver": {"version": "59"}}, "spec.driver.version"),
    ("version as number", {"driver": {"version": 590}}, "spec.driver.version"),
    ("installer latest", {"driver": {"installerRelease": "latest"}}, "installerRelease"),
    ("installer short", {"driver": {"installerRelease": "1.17"}}, "installerRelease"),
    ("chart version", {"operatorVersion": "26.7"}, "spec.operatorVersion"),
    (
        "ftp repository",
        {"source": {"chartRepository": "ftp://charts.example.com"}},
        "spec.source.chartRepository",
    ),
    (
        "http without insecure",
        {"source": {"chartRepository": "http://charts.example.com"}},
        "use https:// or oci://",
    ),
    (
        "registry with scheme",
        {"source": {"imageRegistry": "https://registry.example.com"}},
        "spec.source.imageRegistry",
    ),
    (
        "too many pull secrets",
        {"source": {"imagePullSecrets": [f"s{i}" for i in range(9)]}},
        "spec.source.imagePullSecrets",
    ),
    ("chart name", {"source": {"chartName": "Bad_Name"}}, "spec.source.chartName"),
    ("secret name", {"source": {"secretRef": "UPPER"}}, "spec.source.secretRef"),
    ("switch type", {"components": {"dcgmExporter": "yes"}}, "spec.components.dcgmExporter"),
    ("insecure type", {"source": {"insecure": "true"}}, "spec.source.insecure"),
    ("values not object", {"values": "driver.enabled=false"}, "spec.values"),
    ("unknown field", {"driverr": {}}, ".spec.driverr: field not declared in schema"),
]


@pytest.mark.parametrize(("case", "spec", "message"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_api_server_refuses_bad_specs(
    local_cluster: LocalCluster,
    operator: OperatorProcess,
    case: str,
    spec: dict[str, Any],
    message: str,
) -> None:
    obj = {**GPU_MANIFEST, "spec": spec}
    result = _apply(local_cluster, obj)
    assert result.returncode != 0, f"{case}: accepted {spec}"
    assert message in result.stderr, result.stderr


def test_api_server_refuses_other_names(
    local_cluster: LocalCluster, operator: OperatorProcess
) -> None:
    obj = copy.deepcopy(GPU_MANIFEST)
    obj["metadata"]["name"] = "my-gpu"
    result = _apply(local_cluster, obj)
    assert result.returncode != 0
    assert "metadata.name must be 'gpu'" in result.stderr


def test_creating_gpu_writes_flux_objects(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    _apply(local_cluster, GPU_MANIFEST)
    hr = wait_until(lambda: helm_release(local_cluster), 60, "the HelmRelease")
    obj = gpu(local_cluster)
    assert obj is not None
    owners = hr["metadata"]["ownerReferences"]
    assert owners == [
        {
            "apiVersion": "gpu.kyma-project.io/v1beta1",
            "kind": "Gpu",
            "name": "gpu",
            "uid": obj["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    values = hr["spec"]["values"]
    assert values["driver"]["usePrecompiled"] is True
    assert (
        values["driver"]["repository"] == "ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0"
    )
    assert values["toolkit"]["installDir"] == "/opt/nvidia"
    assert hr["spec"]["install"]["crds"] == "CreateReplace"
    assert hr["spec"]["driftDetection"]["mode"] == "enabled"
    source = local_cluster.get_object(
        "helmrepositories.source.toolkit.fluxcd.io", "gpu-operator", MODULE_NAMESPACE
    )
    assert source is not None
    assert source["metadata"]["ownerReferences"] == owners
    status = wait_until(lambda: (gpu(local_cluster) or {}).get("status"), 30, "Gpu status")
    assert status["gpuNodeCount"] == 2
    assert status["state"] == "Processing"
    assert status["driverMode"] == "Precompiled"
    release = condition(gpu(local_cluster), "ReleaseReady")
    assert release is not None
    assert release["reason"] in ("ReleasePending", "Progressing")


def test_the_safety_pass_reads_what_the_informers_list(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    """The periodic safety pass reads each of the module's Flux objects again
    (`KubeAdapter.read`, a GET). On the real API server its answer folds into the very facts
    the informers' LIST gives, so an object in order changes nothing in the store and the pass
    writes nothing; an object that is not there reads as None (a ghost goes)."""
    _apply(local_cluster, GPU_MANIFEST)  # as the file's first test left it (also run alone)
    wait_until(lambda: helm_release(local_cluster), 60, "the HelmRelease")
    with local_cluster.kube_client() as api:
        _read_as_listed(KubeAdapter(api=api))


def test_a_list_in_pages_asked_ahead_gives_every_object_once(local_cluster: LocalCluster) -> None:
    """adapter.list_pages requests page n+1 (its token read from page n's raw head) while page
    n is parsed: on the real API server every object comes once, in the server's order."""
    names = [f"paged-{i:02d}" for i in range(7)]
    local_cluster.kubectl("create", "namespace", "paged")
    for name in names:
        local_cluster.kubectl("create", "configmap", name, "-n", "paged")
    query = ListQuery("/api/v1/namespaces/paged/configmaps", label_selector=None)
    with local_cluster.kube_client() as api:
        pages = list(KubeAdapter(api=api).list_pages(query, 2))
    listed = [item["metadata"]["name"] for page in pages for item in page["items"]]
    assert [n for n in listed if n.startswith("paged-")] == names
    assert len(pages) == -(-len(listed) // 2)  # kube-root-ca.crt is listed too
    assert not pages[-1]["metadata"].get("continue")
    local_cluster.kubectl("delete", "namespace", "paged", "--wait=false")


def _read_as_listed(adapter: KubeAdapter) -> None:
    """Each listed object of the module, read again: the same facts."""

    def listed_and_read(plural: str) -> list[tuple[FluxFacts, FluxFacts | None]]:
        query = flux_watch(plural, MODULE_NAMESPACE).query
        pairs: list[tuple[FluxFacts, FluxFacts | None]] = []
        for item in adapter.list_page(query, 500).get("items") or ():
            facts = flux_facts(plural, item)
            live = facts[0]
            ref = ObjectRef(live.api_version, live.kind, live.namespace, live.name)
            body = asyncio.run(adapter.read(ref))
            pairs.append((facts, flux_facts(plural, body) if body is not None else None))
        return pairs

    def in_order(plural: str) -> list[tuple[FluxFacts, FluxFacts | None]] | None:
        """Listed and read alike (a write between the two is tried again)."""
        pairs = listed_and_read(plural)
        return pairs if pairs and all(listed == read for listed, read in pairs) else None

    for plural in ("helmreleases", "helmrepositories"):
        pairs = wait_until(partial(in_order, plural), 30, f"the {plural} read as listed")
        assert len(pairs) == 1  # the module's one HelmRelease, its one HelmRepository
    release = ObjectRef("helm.toolkit.fluxcd.io/v2", "HelmRelease", MODULE_NAMESPACE, "no-such")
    assert asyncio.run(adapter.read(release)) is None


def _values(cluster: LocalCluster) -> dict[str, Any]:
    return dict((helm_release(cluster) or {}).get("spec", {}).get("values") or {})


def test_adding_and_removing_nodes_updates_the_release(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    with local_cluster.kube_client() as api:
        from tests.harness import nodes as nodes_module

        nodes_module.create_nodes(api, [UBUNTU_NODE])
    local_cluster.wait_nodes_ready(["azure-t4-ubuntu"])
    wait_until(
        lambda: _values(local_cluster).get("driver", {}).get("nvidiaDriverCRD", {}).get("enabled"),
        30,
        "per-pool drivers for the mixed fleet",
    )
    drivers = _values(local_cluster)["extraObjects"]
    assert sorted(d["metadata"]["name"] for d in drivers) == ["gpu-gardenlinux", "gpu-ubuntu"]
    local_cluster.delete_node("azure-t4-ubuntu")
    wait_until(
        lambda: "extraObjects" not in _values(local_cluster),
        30,
        "single-OS values after the Ubuntu node left",
    )
    # Status writes are coalesced (reconcile/loop.py STATUS_SECONDS): the count follows the
    # release within that window, not in the same instant.
    wait_until(
        lambda: ((gpu(local_cluster) or {}).get("status") or {}).get("gpuNodeCount") == 2,
        30,
        "gpuNodeCount 2 in the status after the Ubuntu node left",
    )


def test_spec_change_updates_the_release(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    local_cluster.kubectl(
        "patch",
        "gpus.gpu.kyma-project.io",
        "gpu",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"driver": {"version": "580"}}}),
    )
    wait_until(
        lambda: _values(local_cluster)["driver"]["version"] == "580",
        30,
        "driver.version 580 in the HelmRelease",
    )
    status = wait_until(
        lambda: (
            (gpu(local_cluster) or {}).get("status", {}).get("desiredDriverVersion") == "580"
            and gpu(local_cluster)
        ),
        30,
        "status",
    )
    assert status["status"]["observedGeneration"] == status["metadata"]["generation"]


def _quiet_writes(cluster: LocalCluster, settle: float = 3.0) -> int:
    """Wait until the operator has stopped writing; return its write count."""
    count = -1
    while True:
        now = len(operator_writes(cluster))
        if now == count:
            return now
        count = now
        time.sleep(settle)


def test_heartbeats_and_unrelated_node_changes_cause_no_writes(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    before = _quiet_writes(local_cluster)
    node = local_cluster.node_names[0]
    for i in range(5):
        local_cluster.kubectl("label", "node", node, f"example.com/unrelated=v{i}", "--overwrite")
        local_cluster.kubectl("annotate", "node", node, f"example.com/note=n{i}", "--overwrite")
    # kwok renews leases and node conditions by itself meanwhile: real heartbeats.
    time.sleep(8)
    after = len(operator_writes(local_cluster))
    assert after == before, operator_writes(local_cluster)[before:]


def _patch_release_status(cluster: LocalCluster, status: dict[str, Any]) -> None:
    """Write the HelmRelease status as helm-controller would (no Flux controllers here)."""
    cluster.kubectl("patch", "helmreleases.helm.toolkit.fluxcd.io", "gpu-operator",
                    "-n", MODULE_NAMESPACE, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))  # fmt: skip


def _set_helm_release_ready(cluster: LocalCluster) -> None:
    hr = helm_release(cluster)
    assert hr is not None
    generation = hr["metadata"]["generation"]
    status = {"observedGeneration": generation, "conditions": [
        {"type": "Ready", "status": "True", "reason": "InstallSucceeded",
         "message": "Helm install succeeded for release gpu-operator/gpu-operator.v1 with chart "
                    "gpu-operator@v26.7.0", "observedGeneration": generation,
         "lastTransitionTime": "2026-11-30T00:00:00Z"}],
        "history": [{"chartVersion": "v26.7.0", "status": "deployed", "name": "gpu-operator",
                     "namespace": TARGET_NAMESPACE, "version": 1, "chartName": "gpu-operator",
                     "appVersion": "v26.7.0", "configDigest": "sha256:0", "digest": "sha256:0",
                     "firstDeployed": "2026-11-30T00:00:00Z",
                     "lastDeployed": "2026-11-30T00:00:00Z"}]}  # fmt: skip
    _patch_release_status(cluster, status)


def test_status_follows_the_release(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    """HelmRelease conditions are mirrored. The operands and the ClusterPolicy state come
    from the real NVIDIA controller, which runs only with Flux (tests/e2e/test_flux.py); here
    the chart is not installed, so the Gpu waits for its components."""
    if local_cluster.get_object("namespace", TARGET_NAMESPACE) is None:
        local_cluster.create_namespace(TARGET_NAMESPACE)
    _set_helm_release_ready(local_cluster)
    waiting = wait_until(
        lambda: (
            (g := gpu(local_cluster))
            and (condition(g, "ReleaseReady") or {}).get("status") == "True"
            and g
        ),
        30,
        "ReleaseReady=True mirrored from the HelmRelease",
    )
    components = condition(waiting, "ComponentsReady")
    assert components is not None
    assert (components["status"], components["reason"]) == ("Unknown", "WaitingForComponents")
    assert waiting["status"]["state"] == "Processing"

    # A failed upgrade is mirrored as Error, with Flux's message.
    hr = helm_release(local_cluster)
    assert hr is not None
    generation = hr["metadata"]["generation"]
    failed = {
        "observedGeneration": generation,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "UpgradeFailed",
                "message": "Helm upgrade failed: timed out waiting for the condition",
                "observedGeneration": generation,
                "lastTransitionTime": "2026-11-30T00:01:00Z",
            }
        ],
    }
    _patch_release_status(local_cluster, failed)
    error = wait_until(
        lambda: (g := gpu(local_cluster)) and g["status"]["state"] == "Error" and g,
        30,
        "Error state from UpgradeFailed",
    )
    assert "timed out waiting for the condition" in error["status"]["message"]
    _set_helm_release_ready(local_cluster)
    wait_until(
        lambda: (gpu(local_cluster) or {}).get("status", {}).get("state") == "Processing",
        30,
        "out of Error once the release is healthy again",
    )


def test_restart_converges_without_duplicates(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    before = _quiet_writes(local_cluster)
    state = (gpu(local_cluster) or {})["status"]["state"]
    operator.kill()
    operator.start()
    time.sleep(6)
    after = _quiet_writes(local_cluster)
    new = operator_writes(local_cluster)[before:after]
    flux_writes = [w for w in new if w["resource"] in ("helmreleases", "helmrepositories")]
    assert flux_writes == [], flux_writes
    releases = local_cluster.list_objects("helmreleases.helm.toolkit.fluxcd.io")
    assert [r["metadata"]["name"] for r in releases] == ["gpu-operator"]
    finalizers = (gpu(local_cluster) or {})["metadata"].get("finalizers", [])
    assert finalizers == ["gpu.kyma-project.io/finalizer"]
    assert (gpu(local_cluster) or {})["status"]["state"] == state


def _gpu_pod(name: str, complete_after: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml"}
    if complete_after:  # kwok (tests/harness/kwok) lets the pod succeed after this long
        meta["annotations"] = {"harness.kyma-gpu.test/complete-after": complete_after}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "cuda", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip


def _phase(cluster: LocalCluster, name: str) -> str:
    return str((cluster.get_object("pod", name, "ml") or {}).get("status", {}).get("phase"))


def _running(cluster: LocalCluster, name: str) -> bool:
    return _phase(cluster, name) == "Running"


def test_removing_a_value_removes_it_from_the_release(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    values = {"migManager": {"config": {"name": "mig-layouts"}}}
    local_cluster.kubectl("patch", "gpus.gpu.kyma-project.io", "gpu", "--type=merge",
                          "-p", json.dumps({"spec": {"values": values}}))  # fmt: skip
    wait_until(lambda: _values(local_cluster).get("migManager", {}).get("config") ==
               {"name": "mig-layouts"}, 30, "spec.values in the HelmRelease")  # fmt: skip
    local_cluster.kubectl("patch", "gpus.gpu.kyma-project.io", "gpu", "--type=json",
                          "-p", json.dumps([{"op": "remove", "path": "/spec/values"}]))  # fmt: skip
    wait_until(lambda: "config" not in _values(local_cluster).get("migManager", {}), 30,
               "the value gone from the HelmRelease once gone from the spec")  # fmt: skip


FLOOD_PODS = 40
FLOOD_IMAGE = "registry.example/" + "a" * 10_000 + ":1"
"""Issue 43: any pod creator in the GPU operator's namespace chose the length of the image
names the Gpu's ComponentsReady message quoted."""


def _flood_pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"flood-{i}", "namespace": TARGET_NAMESPACE},
            "spec": {"nodeSelector": {"kyma-gpu.test/nowhere": "true"}, "containers": [
                {"name": "c", "image": f"{FLOOD_IMAGE}{i}"}]}}  # fmt: skip


def _cannot_pull(i: int) -> dict[str, Any]:
    """What a kubelet reports of a pod whose image it cannot pull (the status subresource)."""
    waiting = {"reason": "ErrImagePull", "message": "x" * 10_000}
    return {"status": {"phase": "Pending", "containerStatuses": [{
        "name": "c", "image": f"{FLOOD_IMAGE}{i}", "imageID": "", "ready": False,
        "restartCount": 0, "state": {"waiting": waiting}}]}}  # fmt: skip


def test_echoed_image_names_leave_the_status_bounded(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    """40 pending pods with 10 kB image names: ComponentsReady names a few, each cut, and the
    whole status stays under STATUS_SIZE_LIMIT (it once quoted every image whole)."""
    from kyma_gpu.facts.echo import MESSAGE_LIMIT, NAME_LIMIT
    from kyma_gpu.status.aggregate import STATUS_SIZE_LIMIT

    if local_cluster.get_object("namespace", TARGET_NAMESPACE) is None:
        local_cluster.create_namespace(TARGET_NAMESPACE)
    local_cluster.apply(*(_flood_pod(i) for i in range(FLOOD_PODS)))
    for i in range(FLOOD_PODS):
        local_cluster.kubectl("patch", "pod", f"flood-{i}", "-n", TARGET_NAMESPACE,
                              "--subresource=status", "--type=merge",
                              "-p", json.dumps(_cannot_pull(i)))  # fmt: skip
    counted = f"{FLOOD_PODS} pods of the GPU operator cannot pull"

    def components() -> dict[str, Any] | None:
        said = condition(gpu(local_cluster), "ComponentsReady")
        return said if said and counted in str(said.get("message")) else None

    said = wait_until(components, 30, "ComponentsReady naming all the pods")
    message = str(said["message"])
    assert said["reason"] == "ImagePullFailed", said
    assert len(message) <= MESSAGE_LIMIT, len(message)
    assert FLOOD_IMAGE[: NAME_LIMIT - 3] in message
    assert FLOOD_IMAGE[:NAME_LIMIT] not in message  # cut, each name to NAME_LIMIT
    assert "kyma-gpu images --check" in message  # the advice survives the cut
    size = len(json.dumps((gpu(local_cluster) or {})["status"]))
    assert size < STATUS_SIZE_LIMIT, size
    local_cluster.kubectl("delete", "pods", "-n", TARGET_NAMESPACE, "--all", "--wait=false")
    wait_until(lambda: (condition(gpu(local_cluster), "ComponentsReady") or {}).get("reason")
               != "ImagePullFailed", 60, "ComponentsReady without the pods")  # fmt: skip


VALIDATOR_IMAGE = {"cuda": {"env": [{"name": "VALIDATOR_IMAGE", "value": "evil.example/v:1"}]}}
"""Issue 43: NVIDIA's controller ran this image, privileged, as the CUDA validator."""


def _crd_before_the_allowlist() -> dict[str, Any]:
    """The Gpu CRD as it was before issue 43: spec.values kept whatever it was given."""
    from kyma_gpu_tools.crd import crd

    old = crd()
    schema = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["values"] = {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}  # fmt: skip
    return old


def _ready_reason(cluster: LocalCluster, *words: str) -> dict[str, Any] | None:
    ready = condition(gpu(cluster), "Ready") or {}
    message = str(ready.get("message", ""))
    return ready if all(w in message for w in words) else None


def test_a_value_the_allowlist_dropped_leaves_the_release_as_it_was(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    """A Gpu written while spec.values kept anything: once the CRD holds the allowlist, the
    API server prunes the value on every read, the Gpu is Invalid (its managedFields still
    name the value) and nothing is written; a server-side apply without it makes it valid."""
    manifest = {**GPU_MANIFEST, "spec": {"values": {"operator": {"logging": {"level": "debug"}}}}}
    path = local_cluster.workdir / "gpu-tenant.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    local_cluster.kubectl("apply", "-f", str(path))  # a client-side apply, as most users do
    wait_until(lambda: _values(local_cluster).get("operator", {}).get("logging"), 30,
               "the listed value in the HelmRelease")  # fmt: skip
    local_cluster.kubectl("apply", "--server-side", *CRD_MANAGER, "-f", "-",
                          input=json.dumps(_crd_before_the_allowlist()))  # fmt: skip
    manifest["spec"]["values"]["validator"] = VALIDATOR_IMAGE
    path.write_text(json.dumps(manifest), encoding="utf-8")
    local_cluster.kubectl("apply", "-f", str(path))
    wait_until(lambda: _ready_reason(local_cluster, 'unknown field "spec.values.validator.cuda"'),
               30, "Invalid while the old CRD kept the value")  # fmt: skip
    release = helm_release(local_cluster) or {}
    assert "validator" not in release["spec"]["values"]
    install_crds(local_cluster)  # the CRD of today
    stored = gpu(local_cluster) or {}
    assert "cuda" not in stored["spec"]["values"].get("validator", {}), stored["spec"]
    local_cluster.kubectl("label", "gpus.gpu.kyma-project.io", "gpu", "touched=yes")
    wait_until(lambda: _ready_reason(local_cluster, "spec.values.validator.cuda", "--server-side"),
               30, "Invalid: the pruned value named, with the way out")  # fmt: skip
    after = helm_release(local_cluster) or {}
    assert after["metadata"]["generation"] == release["metadata"]["generation"]
    assert after["spec"] == release["spec"]
    del manifest["spec"]["values"]["validator"]
    manifest["spec"]["values"]["operator"]["logging"]["level"] = "info"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    local_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    wait_until(lambda: _values(local_cluster).get("operator", {}).get("logging") ==
               {"level": "info"}, 30, "the fixed Gpu applied again")  # fmt: skip
    local_cluster.kubectl("patch", "gpus.gpu.kyma-project.io", "gpu", "--type=json",
                          "-p", json.dumps([{"op": "remove", "path": "/spec/values"}]))  # fmt: skip


def _events_in_the_module_namespace_name_no_pods(cluster: LocalCluster) -> None:
    """The Gpu's Events are in kyma-system, not `default`, and say how many pods, not which
    (issue 32, finding 5); `kubectl events --for` finds them there."""
    selector = "involvedObject.kind=Gpu,involvedObject.name=gpu"

    def events() -> list[dict[str, Any]]:
        out = cluster.kubectl("get", "events", "-A", "-o", "json", "--field-selector", selector)
        return list(json.loads(out.stdout)["items"])

    waiting = wait_until(
        lambda: [e for e in events() if "deletion waits for 2 pods" in e["message"]],
        20, "an Event on the deletion's wait",
    )  # fmt: skip
    assert waiting[0]["metadata"]["namespace"] == MODULE_NAMESPACE
    assert waiting[0]["involvedObject"]["namespace"] == MODULE_NAMESPACE
    every = events()
    assert {e["metadata"]["namespace"] for e in every} == {MODULE_NAMESPACE}, every
    assert not [e["message"] for e in every if "ml/" in e["message"]]
    listed = cluster.kubectl("events", "-n", MODULE_NAMESPACE,
                             "--for", "gpus.gpu.kyma-project.io/gpu").stdout  # fmt: skip
    assert "deletion waits for 2 pods" in listed, listed


def test_deletion_waits_for_gpu_workloads(
    local_cluster: LocalCluster, operator: OperatorProcess, show_operator_log: None
) -> None:
    local_cluster.create_namespace("ml")
    local_cluster.apply(_gpu_pod("trainer"), _gpu_pod("batch", complete_after="25s"))
    for name in ("trainer", "batch"):
        wait_until(partial(_running, local_cluster, name), 60, f"pod {name} running")

    local_cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    blocked = wait_until(
        lambda: (g := gpu(local_cluster)) and g["status"].get("state") == "Warning" and g,
        20,
        "Warning while GPU pods run",
    )
    protected = condition(blocked, "WorkloadsProtected")
    assert protected is not None
    assert protected["status"] == "False"
    assert "ml/batch, ml/trainer" in protected["message"]
    assert helm_release(local_cluster) is not None
    _events_in_the_module_namespace_name_no_pods(local_cluster)

    local_cluster.kubectl("delete", "pod", "trainer", "-n", "ml", "--wait=true")
    wait_until(lambda: "ml/trainer" not in (condition(gpu(local_cluster), "WorkloadsProtected")
                                            or {}).get("message", "ml/trainer"),
               20, "the deleted pod dropped from the condition")  # fmt: skip
    assert helm_release(local_cluster) is not None  # batch still runs
    # The batch pod finishing (not deleted) must wake the deletion at once.
    wait_until(lambda: _phase(local_cluster, "batch") == "Succeeded", 60, "batch pod finished")
    finished = time.monotonic()
    wait_until(lambda: helm_release(local_cluster) is None, 30, "the HelmRelease removed")
    wait_until(lambda: gpu(local_cluster) is None, 30, "the Gpu released")
    assert time.monotonic() - finished < 30
