"""`make demo`: the newcomer's first command.

Starts the local cluster (real kube-apiserver, controllers, kwok nodes: two AWS g6.xlarge
Garden Linux GPU nodes and one CPU node), Flux source- and helm-controller with a local Helm
repository serving ../shared/charts, the operator, and applies the sample Gpu pointed at that
repository. Shows progress until the status settles, prints what `flux get helmreleases` would
show and the commands to look around, then waits for Ctrl-C and stops everything.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import yaml

from .binaries import MissingBinaryError
from .cluster import LocalCluster
from .flux import FluxStack
from .module import (
    MODULE_NAMESPACE,
    ROOT,
    OperatorProcess,
    condition,
    gpu,
    helm_release,
    install_crds,
)
from .nodes import DEMO_FLEET

SAMPLE = ROOT / "config" / "samples" / "gpu.yaml"


class Progress:
    def __init__(self) -> None:
        self.began = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[{time.monotonic() - self.began:6.1f}s] {message}", flush=True)


def flux_get_helmreleases(hr: dict[str, Any] | None) -> str:
    """What `flux get helmreleases -n kyma-system` prints for our release."""
    rows = [("NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE")]
    if hr is not None:
        status = hr.get("status") or {}
        history = status.get("history") or []
        revision = (
            history[0].get("chartVersion") if history else status.get("lastAttemptedRevision", "")
        )
        ready = condition(hr, "Ready") or {}
        rows.append((
            hr["metadata"]["name"], str(revision or ""),
            str(bool(hr.get("spec", {}).get("suspend", False))),
            str(ready.get("status", "Unknown")), str(ready.get("message", "")),
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4]
        for row in rows
    )


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


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_demo(exit_when_ready: bool = False, timeout: float = 300.0) -> int:
    progress = Progress()
    cluster = LocalCluster(node_files=[DEMO_FLEET], progress=progress)
    flux: FluxStack | None = None
    operator: OperatorProcess | None = None
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        progress("starting the local cluster (etcd, kube-apiserver, controllers, kwok nodes)")
        cluster.start()
        progress("starting Flux source-controller and helm-controller, and the Helm repository")
        flux = FluxStack(cluster, progress=progress).start()
        progress("installing the Gpu CRD and starting the operator (kyma-gpu run)")
        install_crds(cluster)
        operator = OperatorProcess(cluster).start()
        sample = yaml.safe_load(SAMPLE.read_text())
        sample["spec"] = {"source": {"chartRepository": flux.helm_repo_url, "insecure": True}}
        progress(
            f"applying the sample Gpu (config/samples/gpu.yaml, chart from {flux.helm_repo_url})"
        )
        cluster.apply(sample)

        last, deadline = "", time.monotonic() + timeout
        operands: set[str] = set()
        while time.monotonic() < deadline:
            obj = gpu(cluster)
            line = _status_line(obj)
            if line != last:
                progress(line)
                last = line
            operands = _show_new_operands(cluster, operands, flux, progress)
            if ((obj or {}).get("status") or {}).get("state") == "Ready":
                break
            if operator is not None and not operator.alive():
                raise RuntimeError(f"the operator exited:\n{operator.log()}")
            flux.check_alive()
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the Gpu did not become Ready within {timeout:.0f}s: {last}")

        print()
        print("$ flux get helmreleases -n kyma-system")
        print(flux_get_helmreleases(helm_release(cluster)))
        print()
        print("$ kubectl get gpu")
        print(cluster.kubectl("get", "gpu").stdout.rstrip())
        print()
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        print("Look around (in another terminal, with that KUBECONFIG):")
        for command in (
            "get gpu", "describe gpu gpu", f"get helmrelease,helmrepository -n {MODULE_NAMESPACE}",
            f"get helmrelease gpu-operator -n {MODULE_NAMESPACE} -o yaml",
            "get daemonsets,pods -n gpu-operator", "get clusterpolicy",
            "get nodes -L node.kubernetes.io/instance-type",
        ):  # fmt: skip
            print(f"  tools/bin/kubectl {command}")
        print(f"Logs (operator, Flux, control plane): {cluster.log_dir}")
        if exit_when_ready:
            return 0
        print("Ctrl-C stops everything.", flush=True)
        while True:
            cluster.check_alive()
            if operator is not None and not operator.alive():
                raise RuntimeError(f"the operator exited:\n{operator.log()}")
            time.sleep(2)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    except MissingBinaryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        print(f"error: {error}", file=sys.stderr)
        if cluster.log_dir.exists():
            print(cluster.log_tails(20), file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if operator is not None:
            operator.stop()
        if flux is not None:
            flux.stop()
        cluster.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("stopped.", flush=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.harness demo")
    parser.add_argument("--exit-when-ready", action="store_true",
                        help="stop once the Gpu is Ready (for tests)")  # fmt: skip
    args = parser.parse_args(argv)
    return run_demo(exit_when_ready=args.exit_when_ready)


if __name__ == "__main__":
    sys.exit(main())
