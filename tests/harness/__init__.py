"""Local cluster test harness: a real Kubernetes control plane from tools/bin.

What runs (all local processes on 127.0.0.1, binaries from ``make tools``):
etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
(``cluster.LocalCluster``); optionally Flux source-controller and
helm-controller plus a Helm repository serving ``../shared/charts``
(``flux.FluxStack``). Fake nodes come from ``kubectl get nodes -o yaml``
style files (``nodes``; demo fleet in ``fleets/demo.yaml``).

Entry points:

- pytest: fixtures from ``tests.harness.pytest_plugin`` (``local_cluster``,
  ``flux_stack``, ``fleet``, ``demo_fleet``, ``namespace``, ``k8s_client``);
- shell: ``python -m tests.harness up [--flux] [--nodes FILE ...] [--workdir DIR]``;
- Python: ``with LocalCluster(node_files=[DEMO_FLEET]) as cluster: ...``.

Importing this package does not import the kubernetes client.
"""

from .binaries import MissingBinaryError
from .cluster import LocalCluster
from .flux import FluxStack, helm_release, wait_flux_ready
from .helm_repo import LocalHelmRepository
from .nodes import DEMO_FLEET, KWOK_SELECTOR

__all__ = [
    "DEMO_FLEET",
    "KWOK_SELECTOR",
    "FluxStack",
    "LocalCluster",
    "LocalHelmRepository",
    "MissingBinaryError",
    "helm_release",
    "wait_flux_ready",
]
