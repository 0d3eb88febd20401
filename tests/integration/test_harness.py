"""The local cluster harness itself: real control plane, kwok nodes, Flux."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.binaries import CLUSTER_BINARIES, require, tool_versions
from tests.harness.cluster import LocalCluster
from tests.harness.flux import FLUX_FATAL_PATTERNS, FluxStack, helm_release
from tests.harness.procs import (
    ManagedProcess,
    ProcessFailedError,
    free_port,
    http_ok,
    wait_for,
)

FAIL_FAST = 60.0
"""A start that fails must fail at once, not after its 120 s timeout: a bound at half of it
tells the two apart on a busy machine too (correctness, not speed; they take 1 to 5 s)."""

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"
GPU_OPERATOR_VERSION = "v26.3.3"


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


@pytest.mark.integration
def test_api_server_answers(local_cluster: LocalCluster) -> None:
    version = local_cluster.kubectl("version", "-o", "json").stdout
    assert tool_versions()["KUBERNETES_VERSION"] in version
    assert local_cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    namespaces = {ns["metadata"]["name"] for ns in local_cluster.list_objects("namespaces")}
    assert {"default", "kube-system"} <= namespaces


@pytest.mark.integration
def test_daemonset_gets_ready_on_kwok_nodes(
    local_cluster: LocalCluster, demo_fleet: list[str], namespace: str
) -> None:
    labels = {"app": "probe"}
    local_cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "pause", "image": PAUSE_IMAGE}]},
                },
            },
        }
    )
    nodes = len(demo_fleet)

    def ready() -> bool:
        ds = local_cluster.get_object("daemonset", "probe", namespace) or {}
        status = ds.get("status", {})
        return bool(
            status.get("observedGeneration") == ds["metadata"]["generation"]
            and status.get("desiredNumberScheduled") == nodes
            and status.get("numberReady") == nodes
            and status.get("numberAvailable") == nodes
        )

    wait_for(ready, 60, "DaemonSet probe ready on every node", interval=0.5)
    pods = local_cluster.list_objects("pods", namespace)
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == sorted(demo_fleet)
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert pod["status"]["podIP"]
        assert pod["status"]["containerStatuses"][0]["ready"] is True


def _gpu_pod(name: str, namespace: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "cuda",
                    "image": PAUSE_IMAGE,
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        },
    }


@pytest.mark.integration
def test_gpu_pod_runs_on_a_gpu_node(
    local_cluster: LocalCluster, demo_fleet: list[str], namespace: str
) -> None:
    local_cluster.apply(_gpu_pod("one-gpu", namespace, 1), _gpu_pod("too-many-gpus", namespace, 2))

    def running() -> bool:
        pod = local_cluster.get_object("pod", "one-gpu", namespace) or {}
        ready = _condition(pod, "Ready").get("status") == "True"
        return ready and pod["status"].get("phase") == "Running"

    wait_for(running, 60, "pod one-gpu Running and Ready", interval=0.5)
    pod = local_cluster.get_object("pod", "one-gpu", namespace)
    assert pod is not None
    node = local_cluster.get_object("node", pod["spec"]["nodeName"])
    assert node is not None
    assert node["metadata"]["labels"].get(GPU_LABEL) == "true"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"

    def unschedulable() -> bool:
        pod = local_cluster.get_object("pod", "too-many-gpus", namespace)
        return _condition(pod, "PodScheduled").get("reason") == "Unschedulable"

    wait_for(unschedulable, 60, "pod too-many-gpus reported Unschedulable", interval=0.5)


def _bare_pod(
    name: str,
    namespace: str,
    finalizers: list[str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if finalizers:
        metadata["finalizers"] = finalizers
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": PAUSE_IMAGE}],
        },
    }


def _phase(cluster: LocalCluster, pod: str, namespace: str) -> str | None:
    phase = ((cluster.get_object("pod", pod, namespace) or {}).get("status") or {}).get("phase")
    return str(phase) if phase is not None else None


@pytest.mark.integration
def test_job_pods_complete_and_deleted_pods_go(
    local_cluster: LocalCluster, demo_fleet: list[str], namespace: str
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once", "namespace": namespace},
        "spec": {"template": {"spec": _bare_pod("once", namespace)["spec"]}},
    }
    local_cluster.apply(job, _bare_pod("guarded", namespace, ["example.com/guard"]))
    local_cluster.apply(
        _bare_pod("one-shot", namespace, annotations={"harness.kyma-gpu.test/complete-after": "1s"})
    )

    def job_complete() -> bool:
        job = local_cluster.get_object("job", "once", namespace)
        return _condition(job, "Complete").get("status") == "True"

    wait_for(job_complete, 60, "Job once Complete", interval=0.5)
    wait_for(
        lambda: _phase(local_cluster, "one-shot", namespace) == "Succeeded",
        60,
        "annotated pod one-shot Succeeded",
        interval=0.5,
    )
    wait_for(
        lambda: _phase(local_cluster, "guarded", namespace) == "Running",
        60,
        "pod guarded Running",
        interval=0.5,
    )
    # A bare pod is not a Job: it keeps running until deleted.
    time.sleep(2)
    assert _phase(local_cluster, "guarded", namespace) == "Running"
    local_cluster.kubectl("delete", "pod", "guarded", "-n", namespace, "--wait=false")
    wait_for(
        lambda: local_cluster.get_object("pod", "guarded", namespace) is None,
        30,
        "pod guarded gone (finalizer removed by kwok)",
        interval=0.5,
    )


@pytest.mark.integration
@pytest.mark.e2e
def test_flux_installs_gpu_operator_from_local_helm_repo(
    local_cluster: LocalCluster, flux_stack: FluxStack, demo_fleet: list[str]
) -> None:
    namespace = "harness-gpu-operator"  # not the module's: the Flux e2e test leaves that one
    crds_before = {crd["metadata"]["name"] for crd in local_cluster.list_objects("crds")}
    local_cluster.create_namespace(namespace)
    began = time.monotonic()
    local_cluster.apply(
        flux_stack.helm_repository("local-charts", namespace),
        helm_release(
            "gpu-operator", namespace, "gpu-operator", GPU_OPERATOR_VERSION, "local-charts"
        ),
    )
    try:

        def release_ready() -> bool:
            hr = local_cluster.get_object("helmrelease", "gpu-operator", namespace)
            ready = _condition(hr, "Ready")
            return bool(
                hr
                and ready.get("status") == "True"
                and ready.get("observedGeneration") == hr["metadata"]["generation"]
            )

        wait_for(
            release_ready,
            300,
            "HelmRelease gpu-operator Ready",
            interval=1.0,
            alive=list(flux_stack.processes.values()),
        )
        print(f"HelmRelease gpu-operator Ready after {time.monotonic() - began:.1f}s")
        hr = local_cluster.get_object("helmrelease", "gpu-operator", namespace)
        assert hr is not None
        assert hr["status"]["history"][0]["chartVersion"] == GPU_OPERATOR_VERSION

        operator = local_cluster.get_object("deployment", "gpu-operator", namespace)
        assert operator is not None
        assert operator["status"]["availableReplicas"] == 1
        daemonsets = local_cluster.list_objects("daemonsets", namespace)
        workers = [ds for ds in daemonsets if ds["metadata"]["name"].endswith("worker")]
        assert workers, [ds["metadata"]["name"] for ds in daemonsets]
        assert workers[0]["status"]["numberReady"] == len(demo_fleet)
    finally:
        _uninstall(local_cluster, namespace, crds_before)


def _uninstall(cluster: LocalCluster, namespace: str, crds_before: set[str]) -> None:
    """Uninstall through Flux, as the operator will: delete the HelmRelease and wait until
    helm-controller has removed the release (its post-delete hook Job needs the nodes, so
    before the fleet goes). Helm never deletes CRDs; remove the chart's so later tests in the
    session start from a cluster without them, and wait for the namespace so it can be
    created again."""
    cluster.kubectl(
        "delete", "helmrelease", "gpu-operator", "-n", namespace, "--wait=false", check=False
    )
    wait_for(
        lambda: cluster.get_object("helmrelease", "gpu-operator", namespace) is None,
        180,
        "HelmRelease gpu-operator uninstalled",
        interval=1.0,
    )
    crds = {crd["metadata"]["name"] for crd in cluster.list_objects("crds")}
    if crds - crds_before:
        cluster.kubectl("delete", "crd", *sorted(crds - crds_before), "--timeout=60s")
    cluster.kubectl("delete", "namespace", namespace, "--timeout=90s")


@pytest.mark.integration
def test_a_flux_port_clash_fails_the_start_with_the_log(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The reported defect: metrics and artifact server on one port. One of them cannot
    bind; source-controller logs it and exits, and the start fails with its log tail."""
    FluxStack(local_cluster).install_crds()
    binary = require("source-controller")["source-controller"]
    clash, health = free_port(), free_port()
    process = ManagedProcess(
        "source-controller-clash",
        [
            str(binary),
            "--log-encoding=console",
            "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{clash}",
            f"--health-addr=127.0.0.1:{health}",
            f"--storage-path={tmp_path}",
            f"--storage-addr=127.0.0.1:{clash}",
            f"--storage-adv-addr=127.0.0.1:{clash}",
        ],
        local_cluster.log_dir / "source-controller-clash.log",
        env={"KUBECONFIG": str(local_cluster.kubeconfig)},
        fatal_patterns=FLUX_FATAL_PATTERNS,
    )
    process.start()
    try:
        began = time.monotonic()
        with pytest.raises(ProcessFailedError, match=r"(?s)ERROR\tsetup.*already in use"):
            process.wait_healthy(
                lambda: (
                    http_ok(f"http://127.0.0.1:{health}/readyz")
                    and http_ok(f"http://127.0.0.1:{clash}/")
                ),
                timeout=120,
                what="ready",
            )
        assert time.monotonic() - began < FAIL_FAST  # not the 120 s timeout
    finally:
        process.stop()


@pytest.mark.integration
def test_a_failed_cluster_start_reports_every_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kube-scheduler that cannot bind: the start fails at once, and the error carries
    the status and logs of every process, which go with the removed temp workdir."""
    bins = tmp_path / "bin"
    bins.mkdir()
    for name, path in require(*CLUSTER_BINARIES).items():
        (bins / name).symlink_to(path)
    (bins / "kube-scheduler").unlink()
    fake = bins / "kube-scheduler"
    fake.write_text("#!/bin/sh\necho 'failed to listen: bind: address already in use'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KYMA_GPU_TOOLS_BIN", str(bins))
    monkeypatch.delenv("KYMA_GPU_HARNESS_KEEP", raising=False)
    cluster = LocalCluster()
    began = time.monotonic()
    with pytest.raises(ProcessFailedError, match="kube-scheduler exited with code 1") as failure:
        cluster.start()
    assert time.monotonic() - began < FAIL_FAST  # not the 120 s timeout
    report = "\n".join(failure.value.__notes__)
    assert "kube-scheduler: EXITED on its own with code 1" in report
    assert "etcd: stopped by the harness" not in report  # the note is written before the stop
    assert "etcd: running" in report
    assert "----- kube-apiserver.log" in report
    assert "failed to listen: bind: address already in use" in report
    assert not cluster.workdir.exists()


# -- failing fast and failure reports (no cluster needed) ---------------------

FATAL_SETUP_LINE = (
    "2026-01-01T00:00:00.000Z\tERROR\tsetup\tartifact server error\t"
    '{"error": "listen tcp 127.0.0.1:1: bind: address already in use"}'
)


def _shell(name: str, script: str, log_dir: Path) -> ManagedProcess:
    return ManagedProcess(
        name, ["sh", "-c", script], log_dir / f"{name}.log", fatal_patterns=FLUX_FATAL_PATTERNS
    )


def test_a_process_that_exits_during_startup_fails_at_once(tmp_path: Path) -> None:
    process = _shell("quitter", "echo 'bind: address already in use'; exit 3", tmp_path)
    process.start()
    began = time.monotonic()
    with pytest.raises(ProcessFailedError, match=r"(?s)quitter exited with code 3.*already in use"):
        process.wait_healthy(lambda: False, timeout=120)
    assert time.monotonic() - began < FAIL_FAST  # not the 120 s timeout
    assert process.status() == "EXITED on its own with code 3"


def test_a_fatal_log_line_fails_at_once_while_the_process_runs(tmp_path: Path) -> None:
    process = _shell("stuck", f"printf '%s\\n' '{FATAL_SETUP_LINE}'; exec sleep 60", tmp_path)
    process.start()
    try:
        began = time.monotonic()
        with pytest.raises(ProcessFailedError, match=r"stuck logged a fatal error: .*artifact"):
            process.wait_healthy(lambda: False, timeout=120)
        assert time.monotonic() - began < FAIL_FAST  # not the 120 s timeout
        assert process.running()
        with pytest.raises(ProcessFailedError):  # later checks (wait_for alive=) fail too
            wait_for(lambda: False, 120, "never", alive=[process])
    finally:
        process.stop()
    assert process.status().startswith("stopped by the harness")
    assert "artifact server error" in process.status()


def test_a_process_the_harness_stopped_is_not_a_failure(tmp_path: Path) -> None:
    """`python -m tests.harness up --flux` checks every process; the NVIDIA controller that the
    harness stops with the chart's Deployment (a Gpu deleted) must not end the shell."""
    stopped = _shell("stopped", "exec sleep 60", tmp_path)
    stopped.start()
    stopped.stop()
    stopped.check_alive()
    assert stopped.status().startswith("stopped by the harness")
    crashed = _shell("crashed", "exit 0", tmp_path)
    crashed.start()
    wait_for(lambda: not crashed.running(), 30, "the shell to exit")
    with pytest.raises(ProcessFailedError, match="exited with code 0"):
        crashed.check_alive()


def test_fatal_lines_of_an_earlier_run_do_not_count(tmp_path: Path) -> None:
    log = tmp_path / "again.log"
    log.write_text(FATAL_SETUP_LINE + "\n", encoding="utf-8")
    process = _shell("again", "echo 'starting manager'; exec sleep 60", tmp_path)
    process.start()
    try:
        process.wait_healthy(lambda: "starting manager" in log.read_text(), timeout=30)
        process.check_alive()
    finally:
        process.stop()


def test_diagnostics_cover_every_log_and_only_the_end_of_the_audit_log(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    cluster.log_dir.mkdir()
    (cluster.log_dir / "etcd.log").write_text("etcd line\n", encoding="utf-8")
    (cluster.log_dir / "operator-e2e.log").write_text(
        "".join(f"operator line {n}\n" for n in range(100)), encoding="utf-8"
    )
    events = [json.dumps({"n": n, "pad": "x" * 1000}) for n in range(2000)]
    cluster.audit_log.write_text("\n".join(events) + "\n", encoding="utf-8")
    crashed = _shell("source-controller", f"echo '{FATAL_SETUP_LINE}'; exit 1", cluster.log_dir)
    cluster.register(crashed)
    crashed.start()
    wait_for(lambda: not crashed.running(), 30, "the crash")

    report = cluster.diagnostics(lines=40)

    assert "source-controller: EXITED on its own with code 1; fatal log line: " in report
    assert "etcd line" in report
    assert "operator line 99" in report
    assert "operator line 59" not in report  # the last 40 lines only
    assert f"audit.log ({cluster.audit_log.stat().st_size} bytes; last 3 lines" in report
    assert '{"n": 1999' in report
    assert '{"n": 1996' not in report
    assert len(report) < 20_000


def test_a_supervised_process_is_left_to_its_starter(tmp_path: Path) -> None:
    """The NVIDIA controller may end with the chart it belongs to (a Gpu deleted under
    `python -m tests.harness up --flux`): its supervisor decides whether that is a crash, so
    the cluster's check_alive() passes over it, while an unsupervised exit still fails, and the
    failure report still shows both."""
    cluster = LocalCluster(tmp_path)
    cluster.log_dir.mkdir()
    ended = _shell("nvidia-gpu-operator", "exit 0", cluster.log_dir)
    cluster.register(ended, supervised=True)
    ended.start()
    wait_for(lambda: not ended.running(), 30, "the controller's exit")

    cluster.check_alive()

    crashed = _shell("source-controller", "exit 3", cluster.log_dir)
    cluster.register(crashed)
    crashed.start()
    wait_for(lambda: not crashed.running(), 30, "the crash")
    with pytest.raises(ProcessFailedError, match="source-controller exited with code 3"):
        cluster.check_alive()
    report = cluster.diagnostics(lines=5)
    assert "nvidia-gpu-operator: EXITED on its own with code 0" in report
    assert "source-controller: EXITED on its own with code 3" in report
