"""`make demo-klm`: the module the way a Kyma admin gets it.

The same local cluster as `make demo`, but the module is not started by hand: it is released
into a local OCI registry with Kyma's tools (`hack/module.py release`: the image built with
buildah, `modulectl create`, the OCM component pushed with the ocm CLI), and the real Kyma
Lifecycle Manager installs it when the admin enables `gpu` in the Kyma resource. The manager
runs from that image on a real node (tests/harness/realnode.py: the real kubelet on
containerd), as on a Kyma cluster's Gardener nodes. Prints what an admin sees
(`kubectl get kyma`, `kubectl get gpu`, `flux get helmreleases`), then waits for Ctrl-C.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from . import cli
from .cluster import Progress
from .demo import flux_cli
from .klm import SKR_KYMA, SKR_NAMESPACE, Landscape
from .module import gpu, wait_until


def _ready(landscape: Landscape) -> bool:
    status = ((gpu(landscape.cluster) or {}).get("status")) or {}
    module = landscape.klm.module_status("gpu") or {}
    return status.get("state") == "Ready" and module.get("state") == "Ready"


def _show(landscape: Landscape) -> None:
    cluster = landscape.cluster
    for args in (
        ("get", "kyma", "-A"),
        ("get", "gpu"),
        ("get", "deployment,pods", "-n", SKR_NAMESPACE, "-l", "app.kubernetes.io/name=gpu-manager"),
    ):
        print(f"$ kubectl {' '.join(args)}")
        print(cluster.kubectl(*args).stdout)
    print(f"$ flux get helmreleases -n {SKR_NAMESPACE}")
    print(flux_cli(cluster, "get", "helmreleases", "-n", SKR_NAMESPACE))
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    print("Look around: tools/bin/kubectl get manifests -n kcp-system; "
          "tools/bin/kubectl describe kyma default -n kyma-system")  # fmt: skip
    print(
        f"Logs (KLM, kubelet, containerd, manager pods in pods/, Flux, control plane): "
        f"{cluster.log_dir}"
    )


def _enable(landscape: Landscape, progress: Progress) -> None:
    klm, cluster = landscape.klm, landscape.cluster
    wait_until(lambda: klm.kyma(SKR_NAMESPACE, SKR_KYMA), 120, "KLM's Kyma kyma-system/default")
    progress("$ kubectl patch kyma default -n kyma-system --type merge "
             """-p '{"spec":{"modules":[{"name":"gpu"}]}}'""")  # fmt: skip
    klm.enable("gpu")
    wait_until(lambda: gpu(cluster), 300, "KLM to install the module and create the default Gpu")
    progress("the default Gpu is there; pointing it at the local chart mirror (no internet here)")
    mirror = {"chartRepository": landscape.flux.helm_repo_url, "insecure": True}
    cluster.kubectl("patch", "gpu", "gpu", "--type=merge", "-p",
                    json.dumps({"spec": {"source": mirror}}))  # fmt: skip


def run_klm_demo(exit_when_ready: bool = False, timeout: float = 600.0) -> int:
    progress = cli.ProgressPrinter()
    workdir = Path(tempfile.mkdtemp(prefix="kyma-gpu-releases-"))
    landscape = Landscape(workdir, progress=progress)

    def start() -> None:
        landscape.start()
        _enable(landscape, progress)
        wait_until(lambda: _ready(landscape), timeout, "the Gpu and KLM's module state Ready")
        progress("Ready")
        _show(landscape)

    def watch() -> None:
        landscape.cluster.check_alive()  # the cluster is there once started

    return cli.run(start, landscape.stop, None if exit_when_ready else watch)
