"""`make docs-capture`: run the demo, do what the user guide tells a newcomer to try, and keep
what each command printed in docs/captured/ (tests/harness/captured.py: how the docs show them
and how `make check` holds them to it).

    python -m tests.harness docs-capture   (make docs-capture)

The steps, in order, on one demo cluster (two g6.xlarge GPU nodes, one CPU node):

1. the Gpu Ready: `kubectl get gpu` (and -o wide), its conditions, the HelmRelease, /metrics;
2. a Gpu named other than `gpu`, refused by the API server;
3. a GPU withdrawn by the device plugin (allocatable below capacity): the Gpu's GPUS column,
   status.unhealthyNodes, the Events, /metrics; then back, and the Normal Event;
4. `spec.components.serviceMonitor: true` on a cluster without the Prometheus CRDs;
5. a `spec.values` toleration: the driver replaced node by node, a node cordoned (minutes);
6. the cuda-vectoradd pod of the user guide, as kwok runs it (scheduled, Running, no container);
7. the Gpu deleted while that pod runs: the wait, its Event; then the pod gone, the Gpu gone.

Each capture holds the command lines as a user types them (`kubectl ...`, the demo's kubectl
and KUBECONFIG), then what they printed. What varies from run to run is kept as printed (ages),
except the metrics port, shown as <port> (the demo prints its own).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import cli
from .captured import CAPTURED, docs, write_blocks, write_offline
from .cluster import LocalCluster
from .demo import log_tails, new_stack, start_stack, wait_ready
from .module import MODULE_NAMESPACE, condition, gpu, gpu_ready, helm_release, wait_until

BROKEN = "ip-10-250-0-11.eu-central-1.compute.internal"
"""The demo node whose GPU the capture withdraws (the user guide names it)."""
CUDA_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: cuda-vectoradd
spec:
  restartPolicy: OnFailure
  containers:
    - name: cuda-vectoradd
      image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
      resources:
        limits:
          nvidia.com/gpu: 1
"""
"""The user guide's pod, as it shows it (docs/user-guide.md, "Verify with a GPU pod")."""
MY_GPU = "apiVersion: gpu.kyma-project.io/v1beta1\nkind: Gpu\nmetadata:\n  name: my-gpu\nspec: {}\n"


@dataclass
class Session:
    """The demo cluster and where the captures go."""

    cluster: LocalCluster
    metrics_url: str
    out: Path
    workdir: Path

    def run(self, shown: str, stdin: str | None = None) -> str:
        """`shown` run as typed (kubectl with the demo's KUBECONFIG, curl against /metrics);
        the capture of it: the command line, then stdout and stderr."""
        words = shlex.split(shown)
        if words[0] == "kubectl":
            result = self.cluster.kubectl(*words[1:], input=stdin, check=False)
            printed = result.stdout + result.stderr
        else:
            command = shown.replace("<port>", self.metrics_url.split(":")[-1].split("/")[0])
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                                  timeout=60, check=False)  # fmt: skip
            printed = done.stdout + done.stderr
        return f"$ {shown}\n{printed}"

    def write(self, name: str, *captures: str) -> None:
        text = "".join(captures)
        (self.out / f"{name}.txt").write_text(text, encoding="utf-8")

    def status(self) -> dict[str, Any]:
        return ((gpu(self.cluster) or {}).get("status")) or {}


METRICS = "curl -s http://127.0.0.1:<port>/metrics | grep '^kyma_gpu_\\(gpus\\|unhealthy\\)'"


def ready(s: Session) -> None:
    """the Gpu Ready: the columns, the wide message, the conditions, Flux, /metrics"""
    s.write("gpu-ready", s.run("kubectl get gpu"))
    s.write("gpu-ready-wide", s.run("kubectl get gpu -o wide"))
    s.write("helmreleases", s.run("kubectl get hr -A"))
    s.write("conditions", _conditions(s.run("kubectl describe gpu gpu")))
    s.write("metrics-healthy", s.run(METRICS))


SHOWN_CONDITIONS = ("Ready", "NodesDetected", "ReleaseReady", "ComponentsReady", "GpusHealthy")


def _conditions(described: str) -> str:
    """`kubectl describe gpu gpu`, its Conditions only: SHOWN_CONDITIONS, without the times."""
    lines = described.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Conditions:")
    blocks: list[list[str]] = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        if line.strip().startswith("Last Transition Time:"):
            blocks.append([])
        elif blocks and not line.strip().startswith("Observed Generation:"):
            blocks[-1].append(line)
    kept = [b for b in blocks if any(line.split()[:2] == ["Type:", t] for line in b
                                     for t in SHOWN_CONDITIONS)]  # fmt: skip
    body = "\n".join(line for block in kept for line in block)
    return f"{lines[0]}\n...\n{lines[start]}\n{body}\n    ...\n"


def singleton(s: Session) -> None:
    """a Gpu not named gpu, refused by the API server"""
    (s.workdir / "my-gpu.yaml").write_text(MY_GPU, encoding="utf-8")
    shown = s.run(f"kubectl apply -f {s.workdir / 'my-gpu.yaml'}")
    s.write("singleton", shown.replace(str(s.workdir) + "/", ""))


def _patch_gpus(node: str, count: str) -> str:
    patch = json.dumps(
        {"status": {"allocatable": {"nvidia.com/gpu": count}}}, separators=(",", ":")
    )
    return f"kubectl patch node {node} --subresource=status --type=merge -p '{patch}'"


def _events(s: Session, reason: str) -> list[dict[str, Any]]:
    listed = s.cluster.list_objects("events", MODULE_NAMESPACE)
    return [e for e in listed if e.get("reason") == reason]


def broken_gpu(s: Session) -> None:
    """a GPU withdrawn as the device plugin withdraws one, then given back"""
    patched = s.run(_patch_gpus(BROKEN, "0"))
    wait_until(lambda: s.status().get("gpus") == "1/2", 60, "the Gpu counting 1/2 GPUs")
    wait_until(lambda: _events(s, "GpusUnhealthy"), 60, "the Event GpusUnhealthy")
    wait_until(lambda: 'health="unhealthy",pool="gpu-l4"} 1.0' in s.run(METRICS)
               or 'pool="gpu-l4",health="unhealthy"} 1.0' in s.run(METRICS),
               60, "the metric of the unhealthy GPU")  # fmt: skip
    s.write(
        "broken-gpu", patched, s.run("kubectl get gpu"),
        s.run("kubectl get gpu gpu -o jsonpath='{.status.unhealthyNodes}'"), "\n",
        s.run(f"kubectl events -n {MODULE_NAMESPACE} --for gpu/gpu"), s.run(METRICS),
    )  # fmt: skip
    back = s.run(_patch_gpus(BROKEN, "1"))
    wait_until(lambda: _events(s, "GpusHealthy"), 60, "the Event GpusHealthy")
    wait_until(lambda: s.status().get("gpus") == "2/2", 60, "the Gpu counting 2/2 GPUs")
    normal = s.run(f"kubectl events -n {MODULE_NAMESPACE} --for gpu/gpu --types=Normal")
    s.write("broken-gpu-back", back, normal)


def service_monitor(s: Session) -> None:
    """serviceMonitor: true without the Prometheus operator's CRDs"""
    patch = '{"spec":{"components":{"serviceMonitor":true}}}'
    shown = s.run(f"kubectl patch gpu gpu --type=merge -p '{patch}'")
    wanted = (gpu(s.cluster) or {})["metadata"]["generation"]
    wait_until(lambda: _released(s, wanted), 120, "the release upgraded for serviceMonitor")
    wait_until(lambda: gpu_ready(s.cluster), 120, "the Gpu Ready again")
    s.write(
        "service-monitor", shown, s.run("kubectl get gpu"),
        s.run(f"kubectl get hr gpu-operator -n {MODULE_NAMESPACE} "
              "-o jsonpath='{.spec.values.dcgmExporter.serviceMonitor}'"), "\n",
        s.run("kubectl get servicemonitors -A"),
    )  # fmt: skip
    s.cluster.kubectl("patch", "gpu", "gpu", "--type=merge",
                      "-p", '{"spec":{"components":{"serviceMonitor":false}}}')  # fmt: skip
    wait_until(lambda: gpu_ready(s.cluster), 120, "the Gpu Ready after serviceMonitor: false")


def _released(s: Session, generation: int) -> bool:
    obj = gpu(s.cluster)
    release = condition(obj, "ReleaseReady") or {}
    return release.get("status") == "True" and release.get("observedGeneration") == generation


TOLERATIONS = {"spec": {"values": {"daemonsets": {"tolerations": [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
]}}}}  # fmt: skip
UPGRADE_LABEL = "nvidia.com/gpu-driver-upgrade-state"


def values_rollout(s: Session) -> None:
    """a spec.values toleration: the driver replaced node by node, with a cordon"""
    patch = json.dumps(TOLERATIONS, separators=(",", ":"))
    shown = s.run(f"kubectl patch gpu gpu --type=merge -p '{patch}'")
    wait_until(lambda: _cordoned_upgrade(s), 180, "a node cordoned for its new driver")
    s.write("values-rollout", shown, s.run("kubectl get gpu -o wide"),
            s.run(f"kubectl get nodes -L {UPGRADE_LABEL}"))  # fmt: skip
    wait_until(lambda: gpu_ready(s.cluster), 900, "the Gpu Ready after the driver rollout")


def _cordoned_upgrade(s: Session) -> bool:
    driver = condition(gpu(s.cluster), "DriverReady") or {}
    rolling = driver.get("reason") == "DriverUpgrading" and "replaces the driver" in str(
        driver.get("message", ""))  # fmt: skip
    nodes = s.cluster.list_objects("nodes")
    return rolling and any(
        (n.get("spec") or {}).get("unschedulable")
        and UPGRADE_LABEL in (n["metadata"].get("labels") or {})
        for n in nodes
    )


def gpu_pod(s: Session) -> None:
    """the user guide's cuda-vectoradd pod on kwok: scheduled, Running, never Succeeded"""
    (s.workdir / "cuda-vectoradd.yaml").write_text(CUDA_POD, encoding="utf-8")
    applied = s.run(f"kubectl apply -f {s.workdir / 'cuda-vectoradd.yaml'}")
    wait_until(lambda: _phase(s, "cuda-vectoradd") == "Running", 60, "cuda-vectoradd Running")
    shown = s.run("kubectl get pod cuda-vectoradd -o wide")
    s.write("cuda-vectoradd", applied.replace(str(s.workdir) + "/", ""), shown)


def _phase(s: Session, name: str) -> str | None:
    pod = s.cluster.get_object("pod", name, "default")
    return ((pod or {}).get("status") or {}).get("phase")


def deletion(s: Session) -> None:
    """the Gpu deleted while cuda-vectoradd uses a GPU; then the pod goes, and the Gpu"""
    deleted = s.run("kubectl delete gpu gpu --wait=false")
    wait_until(lambda: (condition(gpu(s.cluster), "WorkloadsProtected") or {}).get("reason")
               == "GpuWorkloadsRunning", 60, "the deletion waiting for the GPU pod")  # fmt: skip
    wait_until(lambda: [e for e in _events(s, "Deleting") if "waits for" in e.get("message", "")],
               60, "the Event of the wait")  # fmt: skip
    warnings = s.run(f"kubectl events -n {MODULE_NAMESPACE} --for gpu/gpu --types=Warning")
    s.write("deletion-waits", deleted, s.run("kubectl get gpu -o wide"), warnings)
    gone = s.run("kubectl delete pod cuda-vectoradd")
    wait_until(lambda: gpu(s.cluster) is None and helm_release(s.cluster) is None, 300,
               "the Gpu and its HelmRelease gone")  # fmt: skip
    s.write("deletion-done", gone, s.run("kubectl get gpu"))


STEPS: tuple[Callable[[Session], None], ...] = (
    ready, singleton, broken_gpu, service_monitor, values_rollout, gpu_pod, deletion,
)  # fmt: skip


def _said(step: Callable[[Session], None]) -> str:
    return (step.__doc__ or step.__name__).splitlines()[0]


def capture_into(
    out: Path, progress: cli.ProgressPrinter, workdir: Path | None = None, timeout: float = 300.0
) -> None:
    """Start the demo (in `workdir`, else a temp dir whose logs stay), run every step into
    `out`, stop the demo whatever happened."""
    out.mkdir(parents=True, exist_ok=True)
    stack = new_stack(progress, workdir)
    try:
        flux = start_stack(stack, progress)
        wait_ready(stack, flux, progress, timeout)
        session = Session(stack.cluster, stack.metrics_url, out, stack.cluster.workdir)
        for step in STEPS:
            progress(f"capturing: {_said(step)}")
            step(session)
    except Exception:
        log_tails(stack)
        raise
    finally:
        stack.stop()


def capture(out: Path = CAPTURED) -> int:
    """`make docs-capture`: the captures into `out`, the offline ones, and the marked blocks of
    the docs written anew. The exit code of cli.run."""
    progress = cli.ProgressPrinter()

    def start() -> None:
        capture_into(out, progress)
        write_offline()
        changed = [d.name for d in docs() if write_blocks(d)]
        progress(f"captured into {out}; docs rewritten: {', '.join(changed) or 'none'}")

    return cli.run(start, lambda: None, None)
