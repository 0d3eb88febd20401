"""Plays kubelet for the Flux the GPU manager installs on a cluster without one.

The manager applies its Flux bundle (operator/kyma_gpu/extensions/own_flux/flux.yaml): CRDs,
and in kyma-system two Deployments with their ServiceAccounts and Roles. kwok gives the
Deployments' pods a Running status but runs nothing; this runner does what a kubelet would: while a
Deployment ``gpu-flux-source-controller`` or ``gpu-flux-helm-controller`` exists, it runs the
real controller binary as a local process

- with the container's own arguments from the Deployment (so ``--watch-all-namespaces=false``
  and ``--watch-label-selector`` are what the test exercises), local ports and storage instead
  of the in-cluster ones, and console logs;
- as the Deployment's ServiceAccount (a TokenRequest token in a kubeconfig of its own), so
  the real API server enforces the Roles of the bundle: a right missing there fails the test;
- with RUNTIME_NAMESPACE as the pod's downward API would set it, and without leader
  election (controller-runtime finds no Lease namespace outside a pod; the bundle's Lease
  rights are the one part of its Roles this does not exercise);

and stops it when the Deployment goes (the manager removes its Flux with the module).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .binaries import require
from .cluster import LocalCluster
from .procs import ManagedProcess, free_port, http_ok

NAMESPACE = "kyma-system"
CONTROLLERS = {
    "gpu-flux-source-controller": "source-controller",
    "gpu-flux-helm-controller": "helm-controller",
}
"""Deployment name -> the binary it runs."""
DROPPED = (
    "--log-encoding", "--storage-path", "--storage-adv-addr", "--storage-addr",
    "--enable-leader-election",
)  # fmt: skip
"""Replaced by local values; leader election is off: out of a cluster controller-runtime
finds no namespace for its Lease (one replica each here, as in the bundle)."""
POLL_SECONDS = 1.0


class ProvidedFluxRunner:
    def __init__(self, cluster: LocalCluster, fatal_patterns: tuple[str, ...]) -> None:
        self.cluster = cluster
        self.fatal_patterns = fatal_patterns
        self.processes: dict[str, ManagedProcess] = {}
        self.started: list[str] = []
        """Deployment names, each time one was started (a test reads what ran)."""
        self.storage_url = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> ProvidedFluxRunner:
        require(*CONTROLLERS.values())
        self._thread = threading.Thread(target=self._run, name="provided-flux", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        # SIGTERM (and mark them stopped by the harness) before the thread ends: the
        # processes die with the thread that started them (PR_SET_PDEATHSIG), and a process
        # killed that way would look as if it had crashed to the next test on this cluster.
        with self._lock:
            for process in self.processes.values():
                process.terminate()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            for process in self.processes.values():
                process.stop()
            self.processes.clear()

    def running(self) -> list[str]:
        with self._lock:
            return sorted(name for name, p in self.processes.items() if p.running())

    def check_alive(self) -> None:
        with self._lock:
            for process in self.processes.values():
                process.check_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            for name in CONTROLLERS:
                try:
                    self._sync(name)
                except Exception as err:  # the next round tries again; the log says why
                    self.cluster.progress(f"provided Flux: {name}: {err}")
            self._stop.wait(POLL_SECONDS)

    def _sync(self, name: str) -> None:
        dep = self.cluster.get_object("deployment", name, NAMESPACE)
        wanted = dep is not None and not dep["metadata"].get("deletionTimestamp")
        with self._lock:
            process = self.processes.get(name)
            if wanted and process is None:
                assert dep is not None
                if not self._apis_served():
                    return  # the next round looks again
                self.processes[name] = self._launch(name, dep)
                self.started.append(name)
            elif not wanted and process is not None:
                self.cluster.progress(f"provided Flux: Deployment {name} gone; stopping it")
                process.stop()
                del self.processes[name]

    def _apis_served(self) -> bool:
        """Whether the API server serves every API of the bundle's CRDs yet. The manager applies
        the CRDs and the Deployments in one pass; a kubelet starts the container seconds later
        (schedule, image pull) and restarts it if it exits, while this runner starts it at
        once and takes an exit for a crash. A controller started in the moment between the
        apply and the API's appearance in discovery exits ("no matches for
        helm.toolkit.fluxcd.io/v2"), so the runner waits for discovery as a pod's start would.
        The bundle is the own Flux's: imported here, so that the harness loads without it."""
        from kyma_gpu.extensions.own_flux.bundle import FluxBundle

        for crd in FluxBundle().objects():
            if crd["kind"] != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            served = [v["name"] for v in spec["versions"] if v.get("served")]
            plural = spec["names"]["plural"]
            if not all(self.cluster.rest.serves(f"{spec['group']}/{v}", plural) for v in served):
                return False
        return True

    def _launch(self, name: str, dep: Mapping[str, Any]) -> ManagedProcess:
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]
        args = [a for a in container.get("args") or [] if not a.startswith(DROPPED)]
        metrics, health = free_port(), free_port()
        args += ["--log-encoding=console", "--enable-leader-election=false",
                 f"--metrics-addr=127.0.0.1:{metrics}",
                 f"--health-addr=127.0.0.1:{health}"]  # fmt: skip
        if CONTROLLERS[name] == "source-controller":
            args += self._storage_args()
        binary = require(CONTROLLERS[name])[CONTROLLERS[name]]
        env = {"KUBECONFIG": str(self._kubeconfig(pod["serviceAccountName"])),
               "RUNTIME_NAMESPACE": NAMESPACE}  # fmt: skip
        process = ManagedProcess(name, [str(binary), *args],
                                 self.cluster.log_dir / f"{name}.log", env=env,
                                 cwd=self.cluster.workdir,
                                 fatal_patterns=self.fatal_patterns)  # fmt: skip
        self.cluster.register(process)
        self.cluster.progress(f"provided Flux: Deployment {name} appeared; running it as "
                              f"ServiceAccount {pod['serviceAccountName']}")  # fmt: skip
        process.start()
        process.wait_healthy(lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
                             timeout=60, what="ready")  # fmt: skip
        return process

    def _storage_args(self) -> list[str]:
        storage = free_port()
        path = self.cluster.workdir / "provided-flux" / f"storage-{storage}"
        path.mkdir(parents=True, exist_ok=True)
        self.storage_url = f"http://127.0.0.1:{storage}"
        return [f"--storage-path={path}", f"--storage-addr=127.0.0.1:{storage}",
                f"--storage-adv-addr=127.0.0.1:{storage}"]  # fmt: skip

    def _kubeconfig(self, service_account: str) -> Path:
        token = self.cluster.kubectl("create", "token", service_account, "-n", NAMESPACE,
                                     "--duration=24h").stdout.strip()  # fmt: skip
        config = yaml.safe_load(self.cluster.kubeconfig.read_text())
        config["users"] = [{"name": service_account, "user": {"token": token}}]
        for context in config["contexts"]:
            context["context"]["user"] = service_account
        path = self.cluster.workdir / f"{service_account}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path
