"""`make demo`: the newcomer's first command.

Starts the local cluster (real kube-apiserver, controllers, kwok nodes: two AWS g6.xlarge
Garden Linux GPU nodes and one CPU node), Flux source- and helm-controller with a local Helm
repository serving ../shared/charts, the operator, and applies the sample Gpu pointed at that
repository. Shows progress until the status settles, prints what the real flux CLI
(tools/bin/flux) says about the source and the release (`flux get sources helm`, `flux get
helmreleases`), the Gpu, the manager's `/metrics` and the commands to look around, then waits
for Ctrl-C and stops everything. The logs stay after the stop (the rest of the demo's workdir
goes), and the last line says where.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import cli
from .binaries import CLUSTER_BINARIES, FLUX_BINARIES, FLUX_CLI, binary, require
from .cluster import LocalCluster, Progress
from .flux import FluxStack
from .module import (
    MODULE_NAMESPACE,
    ROOT,
    OperatorProcess,
    gpu,
    install_crds,
)
from .nodes import DEMO_FLEET
from .procs import free_port

SAMPLE = ROOT / "config" / "samples" / "gpu.yaml"


FLUX_GETS = (
    ("get", "sources", "helm", "-n", MODULE_NAMESPACE),
    ("get", "helmreleases", "-n", MODULE_NAMESPACE),
)
"""What the demo asks the real flux CLI once the Gpu is Ready."""


def flux_cli(cluster: LocalCluster, *args: str, timeout: float = 60.0) -> str:
    """Run the real flux CLI (tools/bin/flux) against ``cluster``; its stdout.

    Raises MissingBinaryError if it is not built, RuntimeError (with its stderr) if it fails.
    """
    flux = binary(FLUX_CLI)
    command = [str(flux), f"--kubeconfig={cluster.kubeconfig}", f"--timeout={timeout:.0f}s", *args]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout + 10, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"flux {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result.stdout


def flux_table(output: str) -> list[dict[str, str]]:
    """The rows of a `flux get ...` table, keyed by the upper-case column names.

    flux (pkg/printers.TablePrinter) ends every cell, the last one too, with a tab; cells are
    padded with spaces. An output without a header line (nothing found) gives no rows.
    """
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return []
    header = _flux_cells(lines[0])
    rows = []
    for line in lines[1:]:
        row = _flux_cells(line)
        if len(row) != len(header):
            raise ValueError(f"flux table row {line!r} does not match header {header}")
        rows.append(dict(zip(header, row, strict=True)))
    return rows


def _flux_cells(line: str) -> list[str]:
    cells = line.split("\t")
    if len(cells) > 1 and not cells[-1].strip():
        cells.pop()  # what follows the last cell's tab
    return [cell.strip() for cell in cells]


def _status_line(obj: dict[str, Any] | None) -> str:
    status = (obj or {}).get("status") or {}
    if not status:
        return "Gpu created; waiting for the operator's first status"
    return f"Gpu state {status.get('state', '-')}: {status.get('message', '')}"


def _show_new_operands(
    cluster: LocalCluster, shown: set[str], flux: FluxStack, progress: Progress
) -> set[str]:
    """Print each DaemonSet the real NVIDIA controller creates, once, with its image."""
    if flux.nvidia.version is None:
        return shown
    if not shown:
        progress(f"chart installed by Flux; the NVIDIA GPU Operator controller "
                 f"{flux.nvidia.version} runs (as the chart's ServiceAccount) and deploys "
                 "the operands")  # fmt: skip
        shown = {""}
    for ds in cluster.list_objects("daemonsets", "gpu-operator"):
        name = ds["metadata"]["name"]
        if name not in shown and "node-feature-discovery" not in name:
            image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
            progress(f"  DaemonSet {name}: {image}")
            shown = shown | {name}
    return shown


@dataclass
class DemoStack:
    """What the demo started, so that whatever started is stopped again."""

    cluster: LocalCluster
    metrics_port: int
    flux: FluxStack | None = None
    operator: OperatorProcess | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def check_operator(self) -> None:
        if self.operator is not None and not self.operator.alive():
            raise RuntimeError(f"the operator exited:\n{self.operator.log()}")

    def stop(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        if self.flux is not None:
            self.flux.stop()
        self.cluster.stop()
        keep_logs_only(self.cluster.workdir)
        print(f"The logs stay in {self.cluster.log_dir} (remove {self.cluster.workdir} when "
              "done).", flush=True)  # fmt: skip


def keep_logs_only(workdir: Path) -> None:
    """Remove all of a stopped demo's workdir but its logs/ (etcd's data, the PKI, Flux's
    artifacts and the NVIDIA controller's files are of no use after the stop)."""
    for path in workdir.iterdir():
        if path.name == "logs":
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def start_stack(stack: DemoStack, progress: Progress) -> FluxStack:
    """Start the cluster, Flux and the operator, and apply the sample Gpu."""
    cluster = stack.cluster
    require(*CLUSTER_BINARIES, *FLUX_BINARIES, FLUX_CLI)  # all missing ones named at once
    progress("starting the local cluster (etcd, kube-apiserver, controllers, kwok nodes)")
    cluster.start()
    progress("starting Flux source-controller and helm-controller, and the Helm repository")
    flux = stack.flux = FluxStack(cluster, progress=progress).start()
    progress("installing the Gpu CRD and starting the operator (python -m kyma_gpu)")
    install_crds(cluster)
    metrics = ("--metrics-address", f"127.0.0.1:{stack.metrics_port}")
    stack.operator = OperatorProcess(cluster, args=("--standalone", *metrics)).start()
    sample = yaml.safe_load(SAMPLE.read_text())
    sample["spec"] = {"source": {"chartRepository": flux.helm_repo_url, "insecure": True}}
    progress(f"applying the sample Gpu (config/samples/gpu.yaml, chart from {flux.helm_repo_url})")
    cluster.apply(sample)
    return flux


def wait_ready(stack: DemoStack, flux: FluxStack, progress: Progress, timeout: float) -> None:
    """Show the Gpu's status and the operands as they come, until the Gpu is Ready."""
    last, deadline = "", time.monotonic() + timeout
    operands: set[str] = set()
    while time.monotonic() < deadline:
        obj = gpu(stack.cluster)
        line = _status_line(obj)
        if line != last:
            progress(line)
            last = line
        operands = _show_new_operands(stack.cluster, operands, flux, progress)
        if ((obj or {}).get("status") or {}).get("state") == "Ready":
            return
        stack.check_operator()
        flux.check_alive()
        time.sleep(0.5)
    raise RuntimeError(f"the Gpu did not become Ready within {timeout:.0f}s: {last}")


def gpu_metrics(url: str) -> str:
    """The manager's `kyma_gpu_gpus` lines of its /metrics (the GPUs per pool and health), or
    why there are none."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text: str = response.read().decode()
    except OSError as err:
        return f"(the manager's /metrics did not answer: {err})"
    return "\n".join(line for line in text.splitlines() if line.startswith("kyma_gpu_gpus{"))


def dashboard_lines(stack: DemoStack) -> list[str]:
    """How to open the Kyma dashboard on the demo cluster: the one place the demo's printout
    says it."""
    return [f"The Gpu in Kyma dashboard: make dashboard KUBECONFIG={stack.cluster.kubeconfig}"]


def _print_guide(stack: DemoStack) -> None:
    """What flux, kubectl and the manager's /metrics say now, and the commands to look around."""
    cluster = stack.cluster
    for args in FLUX_GETS:
        print()
        print(f"$ flux {' '.join(args)}")
        print(flux_cli(cluster, *args).rstrip())
    print()
    print("$ kubectl get gpu")
    print(cluster.kubectl("get", "gpu").stdout.rstrip())
    print()
    print(f"$ curl -s {stack.metrics_url} | grep '^kyma_gpu_gpus'")
    print(gpu_metrics(stack.metrics_url))
    print()
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    print("Look around (in another terminal, with that KUBECONFIG):")
    for command in (
        "get gpu", "describe gpu gpu", f"events -n {MODULE_NAMESPACE} --for gpu/gpu",
        f"get helmrelease,helmrepository -n {MODULE_NAMESPACE}",
        f"get helmrelease gpu-operator -n {MODULE_NAMESPACE} -o yaml",
        "get daemonsets,pods -n gpu-operator", "get clusterpolicy",
        "get nodes -L node.kubernetes.io/instance-type",
    ):  # fmt: skip
        print(f"  tools/bin/kubectl {command}")
    for args in FLUX_GETS:
        print(f"  tools/bin/flux {' '.join(args)}")
    print(f"The manager's metrics: curl -s {stack.metrics_url} | grep '^kyma_gpu_'")
    for line in dashboard_lines(stack):
        print(line)
    print("Break a GPU and watch the Gpu say so: docs/user-guide.md, \"Break a GPU on the demo "
          "cluster\".")  # fmt: skip
    print(f"Logs (operator, Flux, control plane): {cluster.log_dir} (they stay after the stop)")


def new_stack(progress: Progress, workdir: Path | None = None) -> DemoStack:
    """The demo's cluster (not started) in a workdir of its own (a new temp dir unless given),
    whose logs outlive it."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="kyma-gpu-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(workdir, node_files=[DEMO_FLEET], progress=progress)
    return DemoStack(cluster, metrics_port=free_port())


def log_tails(stack: DemoStack) -> None:
    if stack.cluster.log_dir.exists():
        print(stack.cluster.log_tails(20), file=sys.stderr)


def run_demo(exit_when_ready: bool = False, timeout: float = 300.0) -> int:
    progress = cli.ProgressPrinter()
    stack = new_stack(progress)

    def start() -> None:
        flux = start_stack(stack, progress)
        wait_ready(stack, flux, progress, timeout)
        _print_guide(stack)

    def watch() -> None:
        stack.cluster.check_alive()
        stack.check_operator()

    return cli.run(start, stack.stop, None if exit_when_ready else watch,
                   on_error=lambda: log_tails(stack))  # fmt: skip
