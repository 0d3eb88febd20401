"""Compact, immutable records of what the operator observes: the Flux HelmRelease, the GPU
operand DaemonSets, the ClusterPolicy, the operand's pods that cannot pull. Parsed from API
bodies by pure functions, so that indexes keep a few fields instead of whole objects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kyma_gpu.api.conditions import FluxMirrored
from kyma_gpu.facts.echo import echoed_name, echoed_reason, echoed_text

RESOURCE_GPU = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class FluxCondition:
    type: str
    status: str
    reason: FluxMirrored
    """Flux's reason ("" when it gave none)."""
    message: str
    observed_generation: int | None


@dataclass(frozen=True, slots=True)
class FluxObjectFacts:
    """What status needs of a Flux object: the HelmRelease, or its chart source."""

    name: str
    namespace: str
    generation: int
    observed_generation: int | None
    conditions: tuple[FluxCondition, ...]
    installed_chart_version: str | None
    last_attempted_revision: str | None
    kind: str = "HelmRelease"

    def condition(self, type_: str) -> FluxCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def _name_or_none(value: Any) -> str | None:
    return echoed_name(value) if isinstance(value, str) else None


def flux_object_facts(body: Mapping[str, Any]) -> FluxObjectFacts:
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    history = status.get("history") or []
    installed = None
    if history and isinstance(history[0], Mapping) and history[0].get("status") == "deployed":
        installed = _name_or_none(history[0].get("chartVersion"))
    return FluxObjectFacts(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        generation=_int(meta.get("generation")) or 0,
        observed_generation=_int(status.get("observedGeneration")),
        conditions=tuple(
            FluxCondition(
                type=str(c.get("type", "")),
                status=str(c.get("status", "Unknown")),
                reason=FluxMirrored(echoed_reason(str(c.get("reason", "")))),
                message=echoed_text(str(c.get("message", ""))),
                observed_generation=_int(c.get("observedGeneration")),
            )
            for c in status.get("conditions") or []
            if isinstance(c, Mapping)
        ),
        installed_chart_version=installed,
        last_attempted_revision=_name_or_none(status.get("lastAttemptedRevision")),
        kind=str(body.get("kind", "HelmRelease")),
    )


@dataclass(frozen=True, slots=True)
class DaemonSetFacts:
    name: str
    generation: int
    observed_generation: int | None
    desired: int
    available: int
    unavailable: int
    updated: int
    strategy: str
    driver: bool = False
    """A driver DaemonSet: of the ClusterPolicy (nvidia-driver-daemonset[-<kernel>-<os>]) or
    of an NVIDIADriver (nvidia-gpu-driver-<os>-<hash>); both carry DRIVER_COMPONENT."""
    number_ready: int = 0
    """Nodes that run a ready pod of it (status.numberReady)."""
    version: str | None = None
    """Of a driver DaemonSet: the driver version in its driver container's image tag."""
    app: str = ""
    """Its `app` label: what the NVIDIA operator calls the operand."""
    config_maps: tuple[str, ...] = ()
    """Of a sharing consumer: the ConfigMaps its pod template mounts."""

    @property
    def device_plugin(self) -> bool:
        """What hands GPUs to pods (GPU_SERVERS)."""
        return self.app in GPU_SERVERS

    @property
    def sharing_consumer(self) -> bool:
        """It reads the device plugin's sharing configuration (SHARING_CONSUMERS)."""
        return self.app in SHARING_CONSUMERS

    @property
    def current(self) -> bool:
        """Its status speaks of its current template."""
        return self.observed_generation is not None and self.observed_generation >= self.generation

    @property
    def rolled_out(self) -> bool:
        """Every pod it wants runs its current template (OnDelete too)."""
        return self.current and self.updated >= self.desired

    @property
    def ready(self) -> bool:
        """Desired 0, or nothing unavailable and (RollingUpdate) current."""
        if self.desired == 0:
            return True
        if self.unavailable > 0 or self.available < self.desired:
            return False
        if self.strategy == "OnDelete":
            return True
        return (
            self.observed_generation is not None
            and self.observed_generation >= self.generation
            and self.updated == self.available == self.desired
        )


DRIVER_COMPONENT = ("app.kubernetes.io/component", "nvidia-driver")
"""The label the NVIDIA operator puts on every driver DaemonSet it renders."""
GPU_SERVERS = ("nvidia-device-plugin-daemonset", "nvidia-dra-driver-kubelet-plugin")
"""The `app` label of what hands GPUs to pods: the device plugin DaemonSet (ClusterPolicy), or
the DRA driver's kubelet plugin (GPUCluster)."""
SHARING_CONSUMERS = ("nvidia-device-plugin-daemonset", "nvidia-device-plugin-mps-control-daemon")
"""The `app` label of the DaemonSets that mount the device plugin's configuration: the device
plugin and the MPS control daemon (the NVIDIA operator updates them one after the other)."""
DRIVER_CONTAINER = "nvidia-driver-ctr"
_DRIVER_TAG = re.compile(r"^([0-9]{3}(?:\.[0-9]{1,8}){0,2})(?:-|$)")
"""<version>-<os> (driver container), <version>-<kernel>-<os> (precompiled), or a bare
version: the NVIDIA operator's tag schemes. Parts of at most 8 digits: the version is shown
in the Gpu's status, and a DaemonSet's image is anyone's text."""


def driver_image_version(image: str) -> str | None:
    """`.../driver:590-6.12.44-cloud-amd64-gardenlinux0` -> 590; `...:570.124.06-ubuntu22.04`
    -> 570.124.06; a digest or another tag -> None."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    if ":" not in name:
        return None
    match = _DRIVER_TAG.match(name.split(":", 1)[1])
    return match.group(1) if match else None


def _driver_version(spec: Mapping[str, Any]) -> str | None:
    pod = (spec.get("template") or {}).get("spec") or {}
    containers = [c for c in pod.get("containers") or [] if isinstance(c, Mapping)]
    chosen = next((c for c in containers if c.get("name") == DRIVER_CONTAINER), None)
    if chosen is None and containers:
        chosen = containers[0]
    image = (chosen or {}).get("image")
    return driver_image_version(image) if isinstance(image, str) else None


def _config_maps(spec: Mapping[str, Any]) -> tuple[str, ...]:
    pod = (spec.get("template") or {}).get("spec") or {}
    volumes = [v for v in pod.get("volumes") or [] if isinstance(v, Mapping)]
    names = ((v.get("configMap") or {}).get("name") for v in volumes)
    return tuple(sorted(n for n in names if isinstance(n, str)))


def daemonset_facts(body: Mapping[str, Any]) -> DaemonSetFacts:
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    labels = labels if isinstance(labels, Mapping) else {}
    key, value = DRIVER_COMPONENT
    driver = labels.get(key) == value
    app = str(labels.get("app", ""))
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    desired = _int(status.get("desiredNumberScheduled")) or 0
    available = _int(status.get("numberAvailable")) or 0
    unavailable = _int(status.get("numberUnavailable"))
    return DaemonSetFacts(
        name=echoed_name(str(meta.get("name", ""))),
        generation=_int(meta.get("generation")) or 0,
        observed_generation=_int(status.get("observedGeneration")),
        desired=desired,
        available=available,
        unavailable=unavailable if unavailable is not None else max(desired - available, 0),
        updated=_int(status.get("updatedNumberScheduled")) or 0,
        strategy=str((spec.get("updateStrategy") or {}).get("type", "RollingUpdate")),
        driver=driver,
        number_ready=_int(status.get("numberReady")) or 0,
        version=_driver_version(spec) if driver else None,
        app=app,
        config_maps=_config_maps(spec) if app in SHARING_CONSUMERS else (),
    )


@dataclass(frozen=True, slots=True)
class OperatorStateFacts:
    """The stack's custom resource: the ClusterPolicy cluster-policy, or (DRA) the GPUCluster
    gpu-cluster; both report a state and an Error condition the same way."""

    state: str | None
    """ready | notReady | ignored, or None before the operator reports."""
    message: str = ""
    device_plugin_config: str | None = None
    """The ClusterPolicy's spec.devicePlugin.config.name: the sharing ConfigMap it runs."""
    gpu_nodes_seen: bool = True
    """False when the state is ready without the NVIDIA operator having seen a GPU node: its
    Ready condition says NoGPUNodes or NFDLabelsMissing (a pass before node-feature-discovery
    labelled the nodes deploys nothing and calls that ready), or is not written yet (the
    operator writes the state first, the condition next)."""
    ready_reason: str = ""
    """The reason of the Ready condition while it is True (Reconciled, NoGPUNodes, ...)."""


NO_GPU_NODE_REASONS = frozenset({"NoGPUNodes", "NFDLabelsMissing"})
"""The NVIDIA operator's Ready reasons for a pass that found no GPU node to deploy to."""


def cluster_policy_facts(body: Mapping[str, Any]) -> OperatorStateFacts:
    status = body.get("status") or {}
    message, ready_reason = "", None
    for cond in status.get("conditions") or []:
        if not isinstance(cond, Mapping):
            continue
        if cond.get("type") == "Error" and cond.get("status") == "True":
            message = echoed_text(str(cond.get("message", "")))
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            ready_reason = echoed_reason(str(cond.get("reason", "")))
    state = echoed_reason(str(status["state"])) if status.get("state") else None
    seen = state != "ready" or ready_reason not in (None, *NO_GPU_NODE_REASONS)
    plugin = ((body.get("spec") or {}).get("devicePlugin") or {}).get("config") or {}
    config = plugin.get("name") if isinstance(plugin, Mapping) else None
    return OperatorStateFacts(state=state, message=message,
                              device_plugin_config=echoed_name(str(config)) if config else None,
                              gpu_nodes_seen=seen, ready_reason=ready_reason or "")  # fmt: skip


gpu_cluster_facts = cluster_policy_facts
"""A GPUCluster's status has the ClusterPolicy's shape (state, an Error condition)."""


PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
     "RegistryUnavailable"}
)  # fmt: skip
"""Waiting reasons of a container whose image the kubelet cannot pull."""


@dataclass(frozen=True, slots=True, order=True)
class PullFailure:
    """A pending pod of the GPU operator's namespace that cannot pull an image: what the
    status names (the images), not the pod's whole status."""

    pod: str
    node: str
    images: tuple[tuple[str, str], ...]
    """(image, waiting reason) of each container that cannot pull."""


def pull_failure(body: Mapping[str, Any]) -> PullFailure | None:
    """None for a pod whose containers are not waiting for an image they cannot pull."""
    status = body.get("status") or {}
    found = []
    for container in [*(status.get("initContainerStatuses") or ()),
                      *(status.get("containerStatuses") or ())]:  # fmt: skip
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_REASONS:
            found.append((echoed_name(str(container.get("image", ""))), str(waiting["reason"])))
    if not found:
        return None
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    return PullFailure(echoed_name(str(meta.get("name"))),
                       echoed_name(str(spec.get("nodeName") or "")), tuple(found))  # fmt: skip
