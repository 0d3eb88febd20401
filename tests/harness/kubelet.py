"""A kubelet for real containers: runs the pods of one label selector with podman.

kwok plays the kubelet for every other pod; the pods this one runs are excluded from
kwok's stages (LocalCluster(real_pods=...)), so exactly one kubelet answers for each pod.
Used for the GPU manager's own pods, which Kyma Lifecycle Manager creates from the
module's manifest and which must run from the module's image for real.

What it does for each pod bound to a node (whichever node: every pod runs on this host):

- pulls the image from its registry (podman; a plain-http registry on 127.0.0.1 is
  pulled without TLS), by the pod's imagePullPolicy;
- mounts what the pod's volumeMounts name: projected volumes (the ServiceAccount admission
  plugin adds one at /var/run/secrets/kubernetes.io/serviceaccount: a bound token from the
  TokenRequest API, refreshed at 80 % of its life, ca.crt from the kube-root-ca.crt ConfigMap,
  the namespace from the downward API), emptyDirs (medium Memory as tmpfs); any other volume
  fails the pod (CreateContainerConfigError), loudly;
- sets the container's environment as a kubelet does: values, fieldRef (metadata.name,
  metadata.namespace, metadata.uid, spec.nodeName, spec.serviceAccountName, status.podIP,
  status.hostIP), KUBERNETES_SERVICE_HOST/PORT (the API server, reached from the container
  at 10.0.2.2, the host's loopback under slirp4netns);
- applies the security context (runAsUser/Group, runAsNonRoot, readOnlyRootFilesystem,
  allowPrivilegeEscalation, capabilities, privileged, seccomp) and the resource limits
  (cgroup memory and CPU quota);
- gives each pod an IP of its own on the loopback (127.0.100.N) and publishes every
  containerPort there, so probes and tests reach podIP:containerPort as in a cluster;
- runs the startup, liveness and readiness probes (httpGet, tcpSocket, exec) with their
  timings and thresholds, restarts a container that exits or fails liveness (restartPolicy,
  crash-loop back-off), and writes the pod status: phase, conditions, containerStatuses;
- on deletion stops the container within the grace period and deletes the pod object.

One container per pod (the manager's shape); a pod with init containers or several
containers fails with a clear message. Container logs go to ``<log dir>/pod-<name>.log``, so a
failed test's report shows them. What it did: ``<log dir>/kubelet.log``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .procs import CLAIMS, tail

if TYPE_CHECKING:
    from .cluster import LocalCluster

HOST_FROM_CONTAINER = "10.0.2.2"
"""The host's loopback as a slirp4netns container with allow_host_loopback sees it."""
POD_NET = "127.0.100."
TOKEN_SECONDS = 3607
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0
PODMAN_ENV = {"STORAGE_DRIVER": os.environ.get("STORAGE_DRIVER", "vfs")}
PODMAN = ("podman", "--runtime", "runc")
ULIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")
"""The sandbox cannot raise the hard limits; without these runc fails on setrlimit."""


class PodFailedError(RuntimeError):
    """The pod cannot be run as specified (its status says why, too)."""


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def podman(*args: str, check: bool = True, timeout: float = 300.0) -> str:
    result = subprocess.run(
        [*PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, **PODMAN_ENV},
    )  # fmt: skip
    if check and result.returncode != 0:
        raise PodFailedError(f"podman {' '.join(args[:2])} failed: {result.stderr.strip()}")
    return result.stdout.strip()


@dataclass
class Probe:
    """One probe of the container spec and its counters."""

    spec: dict[str, Any]
    next_at: float
    successes: int = 0
    failures: int = 0

    @property
    def period(self) -> float:
        return float(self.spec.get("periodSeconds", 10))

    @property
    def timeout(self) -> float:
        return float(self.spec.get("timeoutSeconds", 1))

    @property
    def failure_threshold(self) -> int:
        return int(self.spec.get("failureThreshold", 3))

    @property
    def success_threshold(self) -> int:
        return int(self.spec.get("successThreshold", 1))


@dataclass
class RunningPod:
    """What this kubelet keeps of a pod it runs."""

    uid: str
    name: str
    namespace: str
    ip: str
    workdir: Path
    container: str = ""
    """The podman container ID of the current attempt."""
    attempt: int = 0
    restarts: int = 0
    started_at: str = ""
    started: bool = False
    ready: bool = False
    waiting: tuple[str, str] | None = None
    """(reason, message) while no container runs."""
    last_exit: dict[str, Any] | None = None
    restart_at: float = 0.0
    token_refresh_at: float = 0.0
    probes: dict[str, Probe] = field(default_factory=dict)
    image_id: str = ""
    status_sent: str = ""


class PodmanKubelet:
    """Runs the pods of ``namespace`` matching ``selector`` (a label selector) with podman."""

    def __init__(self, cluster: LocalCluster, namespace: str, selector: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.selector = selector
        self.workdir = cluster.workdir / "kubelet"
        self.log = cluster.log_dir / "kubelet.log"
        self.pods: dict[str, RunningPod] = {}
        self.errors: list[str] = []
        self._seen: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ips = 0

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> PodmanKubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for target, name in ((self._watch, "kubelet-watch"), (self._sync_loop, "kubelet-sync")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self._note(f"started for pods in {self.namespace} with {self.selector}")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(30)
        for pod in list(self.pods.values()):
            self._remove_container(pod)
        self._note("stopped")

    def check_alive(self) -> None:
        if self.errors:
            raise AssertionError(f"the podman kubelet failed: {self.errors[-3:]}")

    def _note(self, message: str) -> None:
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    # -- the API -------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = ctype or "application/json"
        request = urllib.request.Request(
            f"{self.cluster.server}{path}", data=data, method=method, headers=headers
        )
        context = self.cluster.admin_tls()
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return json.loads(answer.read() or b"null")

    def _watch(self) -> None:
        """The selector's pods: a LIST, then a WATCH from its resourceVersion; relist on errors."""
        base = f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={self.selector}"
        while not self._stop.is_set():
            try:
                listed = self._request("GET", base)
                with self._lock:
                    self._seen = {p["metadata"]["uid"]: p for p in listed["items"]}
                self._wake.set()
                self._follow(base, listed["metadata"]["resourceVersion"])
            except (OSError, urllib.error.URLError, ValueError) as error:
                if not self._stop.is_set():
                    self._note(f"watch: {error!r}; listing again in 1 s")
                    self._stop.wait(1)

    def _follow(self, base: str, version: str) -> None:
        url = f"{self.cluster.server}{base}&watch=1&resourceVersion={version}&timeoutSeconds=60"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(
            request, context=self.cluster.admin_tls(), timeout=90
        ) as stream:
            for line in stream:
                if self._stop.is_set():
                    return
                event = json.loads(line)
                pod = event["object"]
                if event["type"] == "ERROR":
                    return
                with self._lock:
                    if event["type"] == "DELETED":
                        self._seen.pop(pod["metadata"]["uid"], None)
                    else:
                        self._seen[pod["metadata"]["uid"]] = pod
                self._wake.set()

    # -- the sync loop -------------------------------------------------------

    def _sync_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.5)
            self._wake.clear()
            with self._lock:
                seen = dict(self._seen)
            for pod in seen.values():
                self._safely(self._sync, pod)
            for uid in [u for u in self.pods if u not in seen]:
                self._safely(self._forget, self.pods[uid])

    def _safely(self, step: Any, pod: Any) -> None:
        try:
            step(pod)
        except Exception as error:  # the loop must go on; the error is reported
            name = pod.name if isinstance(pod, RunningPod) else pod["metadata"]["name"]
            self.errors.append(f"{name}: {error!r}")
            self._note(f"{name}: {error!r}")

    def _sync(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        if not spec.get("nodeName"):
            return  # not scheduled yet
        running = self.pods.get(meta["uid"])
        if meta.get("deletionTimestamp"):
            self._terminate(pod, running)
            return
        if running is None:
            running = self._admit(pod)
            if running is None:
                return
        self._run(pod, running)
        self._send_status(pod, running)

    def _forget(self, running: RunningPod) -> None:
        self._remove_container(running)
        shutil.rmtree(running.workdir, ignore_errors=True)
        del self.pods[running.uid]
        self._note(f"{running.name}: gone from the API; container removed")

    # -- admitting a pod -----------------------------------------------------

    def _admit(self, pod: dict[str, Any]) -> RunningPod | None:
        meta = pod["metadata"]
        containers = pod["spec"]["containers"]
        if len(containers) != 1 or pod["spec"].get("initContainers"):
            message = "this kubelet runs pods of exactly one container and no init containers"
            self._fail(pod, "UnsupportedPod", message)
            return None
        running = RunningPod(
            uid=meta["uid"], name=meta["name"], namespace=meta["namespace"],
            ip=self._pod_ip(), workdir=self.workdir / meta["uid"],
        )  # fmt: skip
        running.workdir.mkdir(parents=True, exist_ok=True)
        self.pods[running.uid] = running
        self._note(f"{running.name}: admitted on {pod['spec']['nodeName']} as {running.ip}")
        return running

    def _pod_ip(self) -> str:
        """A loopback address of its own for each pod, claimed across harness processes."""
        while True:
            self._ips += 1
            if self._ips > 250:
                raise PodFailedError("no pod IP left in 127.0.100.0/24")
            if CLAIMS.claim_key(f"pod-ip-{POD_NET}{self._ips}"):
                return f"{POD_NET}{self._ips}"

    def _fail(self, pod: dict[str, Any], reason: str, message: str) -> None:
        status = {"phase": "Failed", "reason": reason, "message": message}
        self._patch_status(pod["metadata"]["name"], status)
        self.errors.append(f"{pod['metadata']['name']}: {reason}: {message}")
        self._note(f"{pod['metadata']['name']}: {reason}: {message}")

    # -- running the container -----------------------------------------------

    def _run(self, pod: dict[str, Any], running: RunningPod) -> None:
        self._refresh_projected(pod, running)
        if running.container:
            state = self._container_state(running)
            if state.get("Running"):
                self._probe_all(pod, running)
                return
            self._exited(pod, running, state)
        if time.monotonic() >= running.restart_at:
            self._start_container(pod, running)

    def _start_container(self, pod: dict[str, Any], running: RunningPod) -> None:
        container = pod["spec"]["containers"][0]
        reason = "ErrImagePull"
        try:
            self._pull(container, running)
            reason = "CreateContainerConfigError"
            argv = self._run_argv(pod, running)
        except PodFailedError as error:
            running.waiting = (reason, str(error))
            running.restart_at = time.monotonic() + max(BACKOFF_START, self._backoff(running))
            self._note(f"{running.name}: {reason}: {error}")
            return
        running.attempt += 1
        running.container = podman(*argv)
        running.started_at, running.waiting = now(), None
        running.started = running.ready = False
        running.probes = self._probes(container)
        self._note(f"{running.name}: started container {running.container[:12]} "
                   f"(attempt {running.attempt})")  # fmt: skip

    def _pull(self, container: Mapping[str, Any], running: RunningPod) -> None:
        image = container["image"]
        policy = container.get("imagePullPolicy", "IfNotPresent")
        present = subprocess.run(
            [*PODMAN, "image", "exists", image], env={**os.environ, **PODMAN_ENV}, check=False
        ).returncode == 0  # fmt: skip
        if policy == "Never" and not present:
            raise PodFailedError(f"image {image} is not present and imagePullPolicy is Never")
        if policy == "Always" or not present:
            host = image.split("/", 1)[0]
            tls = ["--tls-verify=false"] if host.startswith(("127.0.0.1:", "localhost:")) else []
            podman("pull", "--quiet", *tls, image)
            self._note(f"{running.name}: pulled {image}")
        running.image_id = podman("image", "inspect", image, "--format", "{{.Id}}")

    def _run_argv(self, pod: dict[str, Any], running: RunningPod) -> list[str]:
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        log = self.cluster.log_dir / f"pod-{running.name}.log"
        argv = [
            "run", "--detach", "--pull=never", *ULIMITS,
            "--name", f"k8s_{container['name']}_{running.name}_{running.attempt + 1}",
            "--hostname", running.name,
            "--network", "slirp4netns:allow_host_loopback=true",
            "--log-driver", "k8s-file", "--log-opt", f"path={log}",
            "--stop-timeout", str(spec.get("terminationGracePeriodSeconds", 30)),
        ]  # fmt: skip
        for port in container.get("ports") or []:
            number = port["containerPort"]
            argv += [
                "--publish",
                f"{running.ip}:{number}:{number}/{port.get('protocol', 'TCP').lower()}",
            ]
        argv += self._security_args(spec, container)
        argv += self._resource_args(container)
        argv += self._volume_args(pod, running)
        for name, value in self._env(pod, running).items():
            argv += ["--env", f"{name}={value}"]
        command = container.get("command")
        if command:
            argv += ["--entrypoint", json.dumps(command)]
        return [*argv, container["image"], *(container.get("args") or [])]

    def _security_args(self, spec: Mapping[str, Any], container: Mapping[str, Any]) -> list[str]:
        pod_ctx, ctx = spec.get("securityContext") or {}, container.get("securityContext") or {}

        def pick(key: str) -> Any:
            return ctx.get(key, pod_ctx.get(key))

        user, group = pick("runAsUser"), pick("runAsGroup")
        if pick("runAsNonRoot") and user in (None, 0):
            # a kubelet reads the image's USER when runAsUser is unset; this one demands it
            raise PodFailedError("runAsNonRoot needs a numeric non-zero runAsUser here")
        args: list[str] = []
        if user is not None:
            args += ["--user", f"{user}:{group if group is not None else user}"]
        if pod_ctx.get("fsGroup") is not None:
            args += ["--group-add", str(pod_ctx["fsGroup"])]
        if ctx.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        if ctx.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        if ctx.get("privileged"):
            args.append("--privileged")
        capabilities = ctx.get("capabilities") or {}
        args += [a for cap in capabilities.get("drop") or [] for a in ("--cap-drop", cap)]
        args += [a for cap in capabilities.get("add") or [] for a in ("--cap-add", cap)]
        seccomp = (pick("seccompProfile") or {}).get("type", "RuntimeDefault")
        if seccomp == "Unconfined":
            args += ["--security-opt", "seccomp=unconfined"]
        elif seccomp != "RuntimeDefault":
            raise PodFailedError(f"seccompProfile {seccomp} is not supported here")
        return args

    @staticmethod
    def _resource_args(container: Mapping[str, Any]) -> list[str]:
        limits = (container.get("resources") or {}).get("limits") or {}
        args = []
        if "memory" in limits:
            args += ["--memory", str(quantity_bytes(limits["memory"]))]
        if "cpu" in limits:
            args += ["--cpus", f"{quantity_cpus(limits['cpu']):.3f}"]
        return args

    def _volume_args(self, pod: dict[str, Any], running: RunningPod) -> list[str]:
        """What the pod's volumeMounts name: emptyDirs, and projected volumes (the
        ServiceAccount admission plugin adds one with the token, the CA and the namespace)."""
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        args: list[str] = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is not None and "emptyDir" in volume:
                args += self._empty_dir(volume["emptyDir"], mount, running, spec)
            elif volume is not None and "projected" in volume:
                host = running.workdir / "projected" / mount["name"]
                args += ["--volume", f"{host}:{mount['mountPath']}:ro"]
            else:
                raise PodFailedError(
                    f"volume {mount['name']}: only emptyDir and projected are supported here"
                )
        return args

    @staticmethod
    def _empty_dir(
        source: Mapping[str, Any], mount: Mapping[str, Any], running: RunningPod,
        spec: Mapping[str, Any],
    ) -> list[str]:  # fmt: skip
        owner = (spec.get("securityContext") or {}).get("fsGroup")
        if source.get("medium") == "Memory":
            size = quantity_bytes(source.get("sizeLimit", "64Mi"))
            options = f"rw,size={size},mode=1777"
            return ["--tmpfs", f"{mount['mountPath']}:{options}"]
        host = running.workdir / "volumes" / mount["name"]
        host.mkdir(parents=True, exist_ok=True)
        if owner is not None:
            os.chown(host, -1, int(owner))
        host.chmod(0o2777)
        return ["--volume", f"{host}:{mount['mountPath']}"]

    @staticmethod
    def _fields(pod: dict[str, Any], running: RunningPod) -> dict[str, str]:
        """The fieldRef paths a kubelet resolves for env and downwardAPI volumes."""
        return {
            "metadata.name": running.name, "metadata.namespace": running.namespace,
            "metadata.uid": running.uid, "spec.nodeName": pod["spec"]["nodeName"],
            "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": running.ip, "status.hostIP": "127.0.0.1",
        }  # fmt: skip

    def _env(self, pod: dict[str, Any], running: RunningPod) -> dict[str, str]:
        container = pod["spec"]["containers"][0]
        fields = self._fields(pod, running)
        env = {
            "KUBERNETES_SERVICE_HOST": HOST_FROM_CONTAINER,
            "KUBERNETES_SERVICE_PORT": str(self.cluster.api_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.cluster.api_port),
        }
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
                continue
            ref = (item.get("valueFrom") or {}).get("fieldRef")
            if ref is None or ref.get("fieldPath") not in fields:
                raise PodFailedError(f"env {item['name']}: only values and fieldRefs of "
                                     f"{sorted(fields)} are supported here")  # fmt: skip
            env[item["name"]] = fields[ref["fieldPath"]]
        return env

    def _refresh_projected(self, pod: dict[str, Any], running: RunningPod) -> None:
        """Write every projected volume's files (again at 80 % of a token's life), as the
        kubelet's atomic writer does: serviceAccountToken from the TokenRequest API, bound to
        the pod; configMap items; downwardAPI fieldRefs."""
        if time.monotonic() < running.token_refresh_at:
            return
        owner = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        lifetimes = [float(TOKEN_SECONDS)]
        for volume in pod["spec"].get("volumes") or []:
            if "projected" not in volume:
                continue
            files: dict[str, str] = {}
            for source in volume["projected"].get("sources") or []:
                files.update(self._projected_files(pod, running, source, lifetimes))
            directory = running.workdir / "projected" / volume["name"]
            write_atomically(directory, files, owner)
        running.token_refresh_at = time.monotonic() + 0.8 * min(lifetimes)

    def _projected_files(
        self, pod: dict[str, Any], running: RunningPod, source: Mapping[str, Any],
        lifetimes: list[float],
    ) -> dict[str, str]:  # fmt: skip
        if "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            seconds = int(token.get("expirationSeconds", TOKEN_SECONDS))
            lifetimes.append(float(seconds))
            return {token["path"]: self._token(pod, running, seconds, token.get("audience"))}
        if "configMap" in source:
            ref = source["configMap"]
            found = self._request(
                "GET", f"/api/v1/namespaces/{running.namespace}/configmaps/{ref['name']}"
            )
            data = found.get("data") or {}
            items = ref.get("items") or [{"key": k, "path": k} for k in data]
            return {item["path"]: data[item["key"]] for item in items}
        if "downwardAPI" in source:
            fields = self._fields(pod, running)
            return {item["path"]: fields[item["fieldRef"]["fieldPath"]]
                    for item in source["downwardAPI"].get("items") or []}  # fmt: skip
        raise PodFailedError(f"projected source {sorted(source)} is not supported here")

    def _token(
        self, pod: dict[str, Any], running: RunningPod, seconds: int, audience: str | None
    ) -> str:
        account = pod["spec"].get("serviceAccountName", "default")
        spec: dict[str, Any] = {
            "expirationSeconds": seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": running.name,
                               "uid": running.uid},
        }  # fmt: skip
        if audience:
            spec["audiences"] = [audience]
        answer = self._request(
            "POST", f"/api/v1/namespaces/{running.namespace}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )  # fmt: skip
        return str(answer["status"]["token"])

    # -- state, probes, restarts ---------------------------------------------

    @staticmethod
    def _container_state(running: RunningPod) -> dict[str, Any]:
        out = podman("inspect", running.container, "--format", "{{json .State}}", check=False)
        try:
            state: dict[str, Any] = json.loads(out)
        except ValueError:
            return {"Running": False, "ExitCode": -1, "Error": f"not found: {out}"}
        return state

    def _exited(self, pod: dict[str, Any], running: RunningPod, state: Mapping[str, Any]) -> None:
        code = int(state.get("ExitCode", -1))
        running.last_exit = {
            "exitCode": code, "reason": "Completed" if code == 0 else "Error",
            "startedAt": running.started_at, "finishedAt": now(),
            "containerID": f"podman://{running.container}",
        }  # fmt: skip
        self._note(f"{running.name}: container exited with {code}; last lines:\n"
                   f"{tail(self.cluster.log_dir / f'pod-{running.name}.log', 15)}")  # fmt: skip
        self._remove_container(running)
        running.started = running.ready = False
        if pod["spec"].get("restartPolicy", "Always") == "Never":
            running.restart_at = float("inf")
            return
        running.restarts += 1
        running.waiting = ("CrashLoopBackOff", f"back-off restarting the container (exit {code})")
        running.restart_at = time.monotonic() + self._backoff(running)

    @staticmethod
    def _backoff(running: RunningPod) -> float:
        return float(min(BACKOFF_MAX, BACKOFF_START * 2.0 ** max(0, running.restarts - 1)))

    def _probes(self, container: Mapping[str, Any]) -> dict[str, Probe]:
        start = time.monotonic()
        return {
            kind: Probe(container[key], start + float(container[key].get("initialDelaySeconds", 0)))
            for kind, key in (("startup", "startupProbe"), ("liveness", "livenessProbe"),
                              ("readiness", "readinessProbe"))
            if key in container
        }  # fmt: skip

    def _probe_all(self, pod: dict[str, Any], running: RunningPod) -> None:
        container = pod["spec"]["containers"][0]
        startup = running.probes.get("startup")
        if not running.started and startup is None:
            running.started = True
        for kind in ("startup", "liveness", "readiness"):
            probe = running.probes.get(kind)
            if probe is None or time.monotonic() < probe.next_at:
                continue
            if kind != "startup" and not running.started:
                continue
            if kind == "startup" and running.started:
                continue
            probe.next_at = time.monotonic() + probe.period
            if self._check(probe, container, running):
                probe.successes, probe.failures = probe.successes + 1, 0
            else:
                probe.successes, probe.failures = 0, probe.failures + 1
            self._after_probe(kind, probe, running)

    def _after_probe(self, kind: str, probe: Probe, running: RunningPod) -> None:
        if kind == "startup" and probe.successes >= probe.success_threshold:
            running.started = True
        elif kind == "readiness":
            if probe.successes >= probe.success_threshold:
                running.ready = True
            elif probe.failures >= probe.failure_threshold:
                running.ready = False
        if kind in ("startup", "liveness") and probe.failures >= probe.failure_threshold:
            self._note(f"{running.name}: {kind} probe failed {probe.failures} times: restarting")
            podman("stop", "--time", "5", running.container, check=False)

    def _check(self, probe: Probe, container: Mapping[str, Any], running: RunningPod) -> bool:
        spec = probe.spec
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
        if "httpGet" in spec:
            get = spec["httpGet"]
            port = ports.get(get["port"], get["port"])
            scheme = get.get("scheme", "HTTP").lower()
            url = f"{scheme}://{get.get('host', running.ip)}:{port}{get.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=probe.timeout) as answer:
                    return 200 <= int(answer.status) < 400
            except (OSError, urllib.error.URLError, ValueError):
                return False
        if "tcpSocket" in spec:
            port = ports.get(spec["tcpSocket"]["port"], spec["tcpSocket"]["port"])
            with (
                contextlib.suppress(OSError),
                socket.create_connection((running.ip, int(port)), timeout=probe.timeout),
            ):
                return True
            return False
        if "exec" in spec:
            result = subprocess.run(
                [*PODMAN, "exec", running.container, *spec["exec"]["command"]],
                capture_output=True, timeout=probe.timeout + 5, check=False,
                env={**os.environ, **PODMAN_ENV},
            )  # fmt: skip
            return result.returncode == 0
        raise PodFailedError(f"unsupported probe {sorted(spec)}")

    # -- deletion ------------------------------------------------------------

    def _terminate(self, pod: dict[str, Any], running: RunningPod | None) -> None:
        meta = pod["metadata"]
        if running is not None and running.container:
            grace = int(meta.get("deletionGracePeriodSeconds") or 30)
            podman("stop", "--time", str(grace), running.container, check=False, timeout=grace + 30)
            self._note(f"{running.name}: stopped for deletion (grace {grace}s)")
            self._remove_container(running)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]}}  # fmt: skip
        with contextlib.suppress(urllib.error.HTTPError):
            self._request(
                "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body
            )
        if running is not None:
            shutil.rmtree(running.workdir, ignore_errors=True)
            self.pods.pop(running.uid, None)

    @staticmethod
    def _remove_container(running: RunningPod) -> None:
        if running.container:
            podman("rm", "--force", "--time", "5", running.container, check=False)
            running.container = ""

    # -- status ----------------------------------------------------------------

    def _send_status(self, pod: dict[str, Any], running: RunningPod) -> None:
        status = self.status(pod, running)
        digest = json.dumps(status, sort_keys=True)
        if digest == running.status_sent:
            return  # never write when nothing changed
        self._patch_status(running.name, status)
        running.status_sent = digest

    def status(self, pod: dict[str, Any], running: RunningPod) -> dict[str, Any]:
        """The pod status as a kubelet reports it (transition times kept where unchanged)."""
        container = pod["spec"]["containers"][0]
        old = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
        ready = running.ready and bool(running.container)

        def condition(kind: str, value: bool) -> dict[str, Any]:
            text = "True" if value else "False"
            previous = old.get(kind) or {}
            since = previous.get("lastTransitionTime") if previous.get("status") == text else None
            return {"type": kind, "status": text, "lastTransitionTime": since or now()}

        conditions = [
            condition("PodReadyToStartContainers", True), condition("Initialized", True),
            condition("ContainersReady", ready), condition("Ready", ready),
        ]  # fmt: skip
        if "PodScheduled" in old:
            conditions.insert(0, old["PodScheduled"])
        state: dict[str, Any]
        if running.container:
            state = {"running": {"startedAt": running.started_at}}
        else:
            reason, message = running.waiting or ("ContainerCreating", "")
            state = {"waiting": {"reason": reason, "message": message}}
        status = {"name": container["name"], "image": container["image"],
                  "imageID": running.image_id, "ready": ready, "started": running.started,
                  "restartCount": running.restarts, "state": state}  # fmt: skip
        if running.container:
            status["containerID"] = f"podman://{running.container}"
        if running.last_exit is not None:
            status["lastState"] = {"terminated": running.last_exit}
        start = (pod.get("status") or {}).get("startTime") or now()
        return {"phase": "Running" if running.attempt else "Pending", "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}], "podIP": running.ip,
                "podIPs": [{"ip": running.ip}], "startTime": start,
                "conditions": conditions, "containerStatuses": [status]}  # fmt: skip

    def _patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        self._request(
            "PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{name}/status",
            {"status": status}, "application/merge-patch+json",
        )  # fmt: skip

    # -- for tests ---------------------------------------------------------------

    def container_pid(self, pod_name: str) -> int | None:
        """The host PID of a running pod's container process (to read its RSS)."""
        for running in self.pods.values():
            if running.name == pod_name and running.container:
                out = podman("inspect", running.container, "--format", "{{.State.Pid}}")
                return int(out) if out.isdigit() and int(out) > 0 else None
        return None

    def pod_ip(self, pod_name: str) -> str | None:
        return next((p.ip for p in self.pods.values() if p.name == pod_name), None)


def quantity_bytes(value: str | int) -> int:
    """A Kubernetes memory quantity (512Mi, 1G, 128974848) in bytes."""
    text = str(value)
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
             "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}  # fmt: skip
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text))


def quantity_cpus(value: str | int | float) -> float:
    """A Kubernetes CPU quantity (500m, 2, 0.5) in CPUs."""
    text = str(value)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def ready_pods(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of the pods whose Ready condition is True."""
    return [
        p["metadata"]["name"]
        for p in pods
        if any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (p.get("status") or {}).get("conditions") or [])
    ]  # fmt: skip


def write_atomically(directory: Path, files: Mapping[str, str], group: int | None) -> None:
    """A volume's files, each replaced in one rename (readers never see half a token);
    group-readable by the pod's fsGroup when it has one, as the kubelet does."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.new")
        staged.write_text(content, encoding="utf-8")
        if group is not None:
            os.chown(staged, -1, group)
        staged.chmod(0o640 if group is not None else 0o644)
        staged.replace(target)
