"""Flux source-controller and helm-controller on a LocalCluster, plus a Helm repo.

``FluxStack(cluster).start()``:

1. serves the chart tarballs of ``../shared/charts`` as a local Helm
   repository (helm_repo.LocalHelmRepository, a thread of this process);
2. installs the Flux CRDs of the pinned controller versions (tools/versions.env)
   from flux/crds/ (hack/flux-crds.sh copies them from the controllers' Go
   modules; `make check` holds them to the pins) and waits until they are
   Established; all source CRDs go in before helm-controller starts;
3. starts source-controller (artifact storage in the workdir, served on
   127.0.0.1:<port>) and helm-controller as local processes that reach the
   API server through KUBECONFIG, each with its own metrics and health port
   (every port from procs.free_port(), never one twice), and waits for their
   readiness endpoints and the artifact server. A controller that exits or
   logs a fatal setup error (FLUX_FATAL_PATTERNS) fails the start at once,
   with its log tail.

4. starts the NVIDIA operator harness (nvidia.NvidiaOperator): while the chart
   is installed, the real NVIDIA GPU Operator controller runs as a process and
   the Nodes get the labels the chart's NFD would publish.

helm-controller >= 1.5 uses Helm 4 with kstatus waiting: a HelmRelease is
Ready only once its Deployments, DaemonSets, Jobs ... are really ready, which
kwok, the scheduler and the controller manager of the LocalCluster provide.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from .binaries import FLUX_BINARIES, MissingBinaryError, require
from .chart_sources import allow_chart_sources, local_source
from .cluster import LocalCluster
from .helm_repo import LocalHelmRepository
from .nvidia import NvidiaOperator
from .procs import ManagedProcess, free_port, http_ok, stop_all
from .provided_flux import ProvidedFluxRunner

SOURCE_CRDS = (
    "buckets",
    "externalartifacts",
    "gitrepositories",
    "helmcharts",
    "helmrepositories",
    "ocirepositories",
)
HELM_CRDS = ("helmreleases",)

COMMON_FLAGS = ("--log-encoding=console", "--enable-leader-election=false")
FLUX_FATAL_PATTERNS = (
    "\tERROR\tsetup\t",
    '"level":"error".*"logger":"setup"',
    "^panic: ",
)
"""Log lines after which a Flux controller is dead or about to exit (see ManagedProcess).

In source-controller's and helm-controller's main.go every error of the
``setup`` logger is followed by ``os.Exit(1)``: "unable to start manager",
"unable to create controller", "artifact server error" (the storage server
could not bind), "problem running manager" (the manager's metrics or health
server could not bind: "bind: address already in use"). The first pattern
is that line with ``--log-encoding=console`` (as started here), the second
the same in JSON.
"""

SOURCE_GROUP, SOURCE_VERSION = "source.toolkit.fluxcd.io", "v1"
HELM_GROUP, HELM_VERSION = "helm.toolkit.fluxcd.io", "v2"


FLUX_CRDS_DIR = Path(__file__).resolve().parents[2] / "flux" / "crds"
"""The Flux CRDs the module installs, copied from the pinned controllers' Go modules by
hack/flux-crds.sh; `make check` fails if they differ from the versions in tools/versions.env."""


def flux_crd_files() -> list[Path]:
    """The CRD files of the pinned source-controller and helm-controller (sources first).

    Read from flux/crds/, so the harness needs no Go at run time (`make demo` on cached
    binaries runs without it)."""
    files = [FLUX_CRDS_DIR / f"{SOURCE_GROUP}_{name}.yaml" for name in SOURCE_CRDS]
    files += [FLUX_CRDS_DIR / f"{HELM_GROUP}_{name}.yaml" for name in HELM_CRDS]
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        raise MissingBinaryError(f"Flux CRD files missing: {', '.join(missing)}")
    return files


class FluxStack:
    """source-controller + helm-controller for ``cluster``, and a local Helm repository."""

    def __init__(
        self,
        cluster: LocalCluster,
        *,
        charts_dir: Path | None = None,
        progress: Callable[[str], None] | None = None,
        start_timeout: float = 120.0,
        provided: bool = False,
        trust_cluster_ca: bool = False,
    ) -> None:
        self.cluster = cluster
        self.trust_cluster_ca = trust_cluster_ca
        """The controllers trust the cluster's CA (SSL_CERT_FILE) and nothing else: for a
        registry on 127.0.0.1 with the cluster's serving certificate, as the nodes of a
        sovereign cloud trust its registry."""
        self.provided = ProvidedFluxRunner(cluster, FLUX_FATAL_PATTERNS) if provided else None
        """provided=True: no Flux CRDs and no controllers of the harness's own; the GPU manager
        installs its Flux, and the runner runs the controllers of its Deployments."""
        self.progress = progress or cluster.progress
        self.start_timeout = start_timeout
        self.helm_repo = LocalHelmRepository(charts_dir, log_path=cluster.log_dir / "helm-repo.log")
        self.processes: dict[str, ManagedProcess] = {}
        self.probes: dict[str, Callable[[], bool]] = {}
        self.timings: dict[str, float] = {}
        self.storage_dir = cluster.workdir / "flux" / "source-storage"
        self.storage_url = ""
        """source-controller's artifact server, http://127.0.0.1:<port>."""
        self.nvidia = NvidiaOperator(cluster)
        """The real NVIDIA controller, run while Flux has the chart installed."""
        self._started = False

    @property
    def helm_repo_url(self) -> str:
        return self.helm_repo.url

    def __enter__(self) -> FluxStack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> FluxStack:
        if self._started:
            return self
        self._started = True
        began = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.progress("Flux start failed; stopping what was started")
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - began
        self.progress(f"Flux ready in {self.timings['total']:.1f}s")
        return self

    def _start(self) -> None:
        bins = require(*FLUX_BINARIES)
        self.helm_repo.start()
        self.progress(f"Helm repository at {self.helm_repo.url} serving {self.helm_repo.charts()}")
        self.allow_chart_sources()
        if self.provided is not None:
            self.progress("no Flux of the harness's own: the GPU manager installs its Flux")
            self.provided.start()
            self.nvidia.start()
            return

        began = time.monotonic()
        self.progress("installing Flux CRDs")
        self.install_crds()
        self.timings["crds"] = time.monotonic() - began

        self.storage_dir.mkdir(parents=True, exist_ok=True)
        source, source_ready = self._source_controller(bins["source-controller"])
        helm, helm_ready = self._helm_controller(bins["helm-controller"])
        self.progress("starting source-controller, helm-controller")
        source.start()
        helm.start()
        for process, probe in ((source, source_ready), (helm, helm_ready)):
            self.probes[process.name] = probe
            took = process.wait_healthy(probe, timeout=self.start_timeout, what="ready")
            self.timings[process.name] = took
        self.nvidia.start()

    def allow_chart_sources(self, *more: Mapping[str, Any]) -> None:
        """The local Helm repository (and `more`) as allowed chart sources, written the way an
        administrator does (tests/harness/chart_sources.py); again with no `more` to go back."""
        allow_chart_sources(self.cluster, local_source(self.helm_repo.url), *more)

    def _source_controller(self, binary: Path) -> tuple[ManagedProcess, Callable[[], bool]]:
        """The source-controller process (not started) and its readiness probe.

        Its /readyz does not cover the artifact server, which starts only after
        the manager does: the probe also waits for that server to answer.
        """
        storage, metrics, health = free_port(), free_port(), free_port()
        self.storage_url = f"http://127.0.0.1:{storage}"
        process = self._process(
            "source-controller",
            [
                str(binary),
                *COMMON_FLAGS,
                f"--metrics-addr=127.0.0.1:{metrics}",
                f"--health-addr=127.0.0.1:{health}",
                f"--storage-path={self.storage_dir}",
                f"--storage-addr=127.0.0.1:{storage}",
                f"--storage-adv-addr=127.0.0.1:{storage}",
            ],
        )

        def ready() -> bool:
            return http_ok(f"http://127.0.0.1:{health}/readyz") and http_ok(f"{self.storage_url}/")

        return process, ready

    def _helm_controller(self, binary: Path) -> tuple[ManagedProcess, Callable[[], bool]]:
        """The helm-controller process (not started) and its readiness probe."""
        metrics, health = free_port(), free_port()
        process = self._process(
            "helm-controller",
            [
                str(binary),
                *COMMON_FLAGS,
                f"--metrics-addr=127.0.0.1:{metrics}",
                f"--health-addr=127.0.0.1:{health}",
            ],
        )
        return process, lambda: http_ok(f"http://127.0.0.1:{health}/readyz")

    def _process(self, name: str, argv: Sequence[str]) -> ManagedProcess:
        env = {"KUBECONFIG": str(self.cluster.kubeconfig)}
        if self.trust_cluster_ca:
            env["SSL_CERT_FILE"] = str(self.cluster.pki.ca_cert)
        process = ManagedProcess(
            name,
            argv,
            self.cluster.log_dir / f"{name}.log",
            env=env,
            cwd=self.cluster.workdir,
            fatal_patterns=FLUX_FATAL_PATTERNS,
        )
        self.processes[name] = process
        self.cluster.register(process)
        return process

    def install_crds(self, timeout: float = 60.0) -> None:
        """Server-side apply the Flux CRDs and wait until they are Established."""
        files = flux_crd_files()
        args = ["apply", "--server-side", "--force-conflicts", "--field-manager=kyma-gpu-harness"]
        for path in files:
            args += ["-f", str(path)]
        self.cluster.kubectl(*args)
        names = [".".join(reversed(path.stem.split("_", 1))) for path in files]
        self.cluster.wait_crds_established(*names, timeout=timeout)

    def stop(self) -> None:
        self.nvidia.stop()
        if self.provided is not None:
            self.provided.stop()
        stop_all(list(reversed(self.processes.values())))
        self.helm_repo.stop()

    def stop_controller(self, name: str) -> None:
        """Stop one Flux controller (an outage); `start_controller` brings it back."""
        self.processes[name].stop()

    def start_controller(self, name: str) -> None:
        process = self.processes[name]
        process.restart()
        process.wait_healthy(self.probes[name], timeout=self.start_timeout, what="ready")

    def check_alive(self) -> None:
        """Raise ProcessFailedError if a controller exited or logged a fatal error, and
        AssertionError if the NVIDIA controller ever crashed."""
        for process in self.processes.values():
            process.check_alive()
        if self.provided is not None:
            self.provided.check_alive()
        self.nvidia.check_alive()

    def rss_kib(self) -> dict[str, int]:
        result: dict[str, int] = {}
        for name, process in self.processes.items():
            rss = process.rss_kib()
            if rss is not None:
                result[name] = rss
        return result

    # -- objects -----------------------------------------------------------

    def helm_repository(self, name: str, namespace: str, interval: str = "10m") -> dict[str, Any]:
        """A HelmRepository pointing at the local Helm repository."""
        return {
            "apiVersion": f"{SOURCE_GROUP}/{SOURCE_VERSION}",
            "kind": "HelmRepository",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"url": self.helm_repo.url, "interval": interval},
        }


def helm_release(
    name: str,
    namespace: str,
    chart: str,
    version: str,
    repository: str,
    *,
    values: Mapping[str, Any] | None = None,
    interval: str = "10m",
    timeout: str = "5m",
) -> dict[str, Any]:
    """A minimal HelmRelease of ``chart`` ``version`` from HelmRepository ``repository``."""
    spec: dict[str, Any] = {
        "interval": interval,
        "timeout": timeout,
        "chart": {
            "spec": {
                "chart": chart,
                "version": version,
                "sourceRef": {"kind": "HelmRepository", "name": repository},
            }
        },
        "install": {"crds": "CreateReplace"},
        "upgrade": {"crds": "CreateReplace"},
    }
    if values:
        spec["values"] = dict(values)
    return {
        "apiVersion": f"{HELM_GROUP}/{HELM_VERSION}",
        "kind": "HelmRelease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def ready_condition(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Ready condition of a Flux object, if it is current (observedGeneration)."""
    status = obj.get("status") or {}
    generation = obj.get("metadata", {}).get("generation")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            observed = condition.get("observedGeneration", status.get("observedGeneration"))
            if generation is not None and observed is not None and observed != generation:
                return None
            return dict(condition)
    return None


def wait_flux_ready(
    api_client: Any,
    plural: str,
    namespace: str,
    name: str,
    *,
    timeout: float = 300.0,
    alive: Sequence[ManagedProcess] = (),
) -> dict[str, Any]:
    """Wait until a Flux object (``helmreleases``, ``helmrepositories``, ...) is Ready=True.

    Returns the object. On timeout the error shows the last Ready condition.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    group, version = (
        (HELM_GROUP, HELM_VERSION) if plural == "helmreleases" else (SOURCE_GROUP, SOURCE_VERSION)
    )
    custom = client.CustomObjectsApi(api_client)
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while True:
        for process in alive:
            process.check_alive()
        try:
            obj = cast(
                "dict[str, Any]",
                custom.get_namespaced_custom_object(group, version, namespace, plural, name),
            )
        except ApiException as error:
            if error.status != 404:
                raise
        else:
            last = ready_condition(obj)
            if last is not None and last.get("status") == "True":
                return obj
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{plural} {namespace}/{name} not Ready after {timeout:.0f}s; "
                f"last Ready condition: {last}"
            )
        time.sleep(1.0)
