"""Nightly end-to-end run on a real GPU cluster.

    KUBECONFIG=... python hack/nightly_e2e.py [--install] [--gpu FILE] [--timeout 1800]

Steps, each timed and printed:
  1. (--install) apply the module (`kubectl kustomize config/install`, CRDs first; the manager
     installs its own Flux at run time where the cluster has none);
  2. apply the Gpu (config/samples/gpu.yaml by default) and wait for state Ready;
  3. run the cuda-vectoradd smoke Job (one nvidia.com/gpu) and wait until it completes;
  4. check its log says "Test PASSED" (--expect-log '' skips this, e.g. without real GPUs);
  5. delete the Gpu, wait until it is gone, and check nothing of the release is left:
     no HelmRelease or chart source in kyma-system, no pods or DaemonSets in gpu-operator.
Exit code 0 when every step passed. Needs only kubectl (--kubectl, default: on PATH).
The tests run this script against the local cluster (tests/e2e/test_nightly.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SMOKE_NAMESPACE = "gpu-smoke"
SMOKE_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "cuda-vectoradd", "namespace": SMOKE_NAMESPACE},
    "spec": {
        "backoffLimit": 2,
        "template": {
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [
                    {
                        "name": "cuda-vectoradd",
                        "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                    }
                ],
            }
        },
    },
}


class Failed(Exception):
    pass


class Run:
    def __init__(self, kubectl: str, kubeconfig: str | None) -> None:
        self.base = [kubectl] + ([f"--kubeconfig={kubeconfig}"] if kubeconfig else [])
        self.began = time.monotonic()

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.began:7.1f}s] {message}", flush=True)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [*self.base, *args], input=input, capture_output=True, text=True, check=False
        )
        if check and result.returncode != 0:
            raise Failed(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def get(self, *args: str) -> dict[str, Any] | None:
        out = self.kubectl("get", *args, "-o", "json", "--ignore-not-found").strip()
        return json.loads(out) if out else None

    def wait(self, what: str, probe: Callable[[], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = probe()
            if value:
                return value
            time.sleep(2)
        raise Failed(f"timed out after {timeout:.0f}s waiting for {what}")


def _gpu_state(run: Run) -> str:
    obj = run.get("gpus.gpu.kyma-project.io", "gpu") or {}
    status = obj.get("status") or {}
    return f"{status.get('state', '-')}: {status.get('message', '')}"


def install(run: Run) -> None:
    rendered = run.kubectl("kustomize", str(ROOT / "config" / "install"))
    docs = [d for d in rendered.split("\n---\n") if d.strip()]
    crds = [d for d in docs if "kind: CustomResourceDefinition" in d]
    rest = [d for d in docs if d not in crds]
    run.kubectl("apply", "--server-side", "-f", "-", input="\n---\n".join(crds))
    run.kubectl("wait", "--for=condition=Established", "--all", "crd", "--timeout=120s")
    run.kubectl("apply", "--server-side", "-f", "-", input="\n---\n".join(rest))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG")
    parser.add_argument("--install", action="store_true", help="apply config/install first")
    parser.add_argument("--gpu", type=Path, default=ROOT / "config" / "samples" / "gpu.yaml")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per step, seconds")
    parser.add_argument("--expect-log", default="Test PASSED", help="'' to skip the log check")
    return parser.parse_args(argv)


def wait_ready(run: Run, timeout: float) -> None:
    run.wait("Gpu state Ready", lambda: _gpu_state(run).startswith("Ready"), timeout)


def smoke(run: Run, timeout: float) -> None:
    """Run the cuda-vectoradd Job and wait until it completes."""
    if run.get("namespace", SMOKE_NAMESPACE) is None:
        run.kubectl("create", "namespace", SMOKE_NAMESPACE)
    run.wait(
        "the default ServiceAccount",
        lambda: run.get("serviceaccount", "default", "-n", SMOKE_NAMESPACE),
        60,
    )
    run.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(SMOKE_JOB))
    run.wait(
        "cuda-vectoradd to complete",
        lambda: (
            (run.get("job", "cuda-vectoradd", "-n", SMOKE_NAMESPACE) or {})
            .get("status", {})
            .get("succeeded")
        ),
        timeout,
    )


def log_check(run: Run, expected: str) -> None:
    log = run.kubectl("logs", "job/cuda-vectoradd", "-n", SMOKE_NAMESPACE)
    if expected not in log:
        raise Failed(f"cuda-vectoradd log lacks {expected!r}:\n{log}")


def delete_gpu(run: Run, timeout: float) -> None:
    run.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    run.wait("the Gpu gone", lambda: run.get("gpus.gpu.kyma-project.io", "gpu") is None, timeout)


def leftovers(run: Run) -> list[str]:
    left = []
    for kind, namespace in (
        ("helmreleases.helm.toolkit.fluxcd.io", "kyma-system"),
        ("helmrepositories.source.toolkit.fluxcd.io", "kyma-system"),
        ("ocirepositories.source.toolkit.fluxcd.io", "kyma-system"),
        ("daemonsets", "gpu-operator"),
        ("deployments", "gpu-operator"),
        ("pods", "gpu-operator"),
    ):
        items = (run.get(kind, "-n", namespace) or {}).get("items") or []
        left += [f"{kind} {namespace}/{i['metadata']['name']}" for i in items]
    return left


def nothing_left(run: Run) -> None:
    # Garbage collection of operand pods trails the uninstall by a few seconds.
    deadline = time.monotonic() + 120
    while (left := leftovers(run)) and time.monotonic() < deadline:
        time.sleep(3)
    if left:
        raise Failed("left behind: " + ", ".join(left))


Step = tuple[str, Callable[[], object]]


def steps_of(run: Run, args: argparse.Namespace) -> list[Step]:
    """The steps to run, in order, as (name, action)."""
    steps: list[Step] = []
    if args.install:
        steps.append(("install the module and Flux", lambda: install(run)))
    steps += [
        ("apply the Gpu", lambda: run.kubectl("apply", "--server-side", "-f", str(args.gpu))),
        ("wait for Gpu Ready", lambda: wait_ready(run, args.timeout)),
        ("run the cuda-vectoradd smoke Job", lambda: smoke(run, args.timeout)),
    ]
    if args.expect_log:
        steps.append(("check the smoke log", lambda: log_check(run, args.expect_log)))
    delete_smoke = ("delete", "namespace", SMOKE_NAMESPACE, "--wait=true", "--timeout=300s")
    steps += [
        ("delete the smoke namespace", lambda: run.kubectl(*delete_smoke)),
        ("delete the Gpu and wait until Flux uninstalled", lambda: delete_gpu(run, args.timeout)),
        ("check nothing of the release is left", lambda: nothing_left(run)),
    ]
    return steps


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    run = Run(args.kubectl, args.kubeconfig)
    took: list[float] = []
    try:
        for name, action in steps_of(run, args):
            began = time.monotonic()
            run.say(f"{name} ...")
            action()
            took.append(time.monotonic() - began)
            run.say(f"{name}: ok ({took[-1]:.1f}s)")
    except Failed as err:
        run.say(f"FAILED: {err}")
        run.say(f"Gpu: {_gpu_state(run)}")
        return 1
    print(f"nightly e2e: all {len(took)} steps ok in {sum(took):.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
