"""A Node becomes a compact, immutable NodeFacts record.

Only what the plan needs is kept: a few strings and ints per Node, never the body.
Heartbeats change nothing here, so equal facts mean "nothing to do". The extensions may keep
facts of their own of each Node (`NodeFold`): the core keeps them with the node
(`ObservedNode.extras`) and reads none.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, overload

from kyma_gpu.facts.machines import MachineType, MachineTypeRegistry

# Node labels this module reads. Documented in docs/user-guide.md.
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_INSTANCE_TYPE_BETA = "beta.kubernetes.io/instance-type"
LABEL_POOL = "worker.gardener.cloud/pool"
LABEL_NFD_NVIDIA_PCI = "feature.node.kubernetes.io/pci-10de.present"
LABEL_NFD_OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
LABEL_NFD_KERNEL = "feature.node.kubernetes.io/kernel-version.full"
NFD_LABELS_NEEDED = (LABEL_NFD_OS_ID, LABEL_NFD_KERNEL)
"""What the NVIDIA operator reads to pick a driver image; NFD publishes them."""
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"
LABEL_GFD_PRODUCT = "nvidia.com/gpu.product"
LABEL_GFD_COUNT = "nvidia.com/gpu.count"
LABEL_GFD_REPLICAS = "nvidia.com/gpu.replicas"
"""GPU feature discovery: each GPU is advertised as this many (time-slicing or MPS sharing)."""
LABEL_OPT_IN = "gpu.kyma-project.io/gpu"
LABEL_MODEL = "gpu.kyma-project.io/gpu-model"
LABEL_COUNT = "gpu.kyma-project.io/gpu-count"
LABEL_PREINSTALLED = "gpu.kyma-project.io/driver-preinstalled"
LABEL_DEPLOY_DRIVER = "nvidia.com/gpu.deploy.driver"
"""The NVIDIA operator's own switch: "false" keeps its driver DaemonSets off the node."""
LABEL_DRIVER_UPGRADE = "nvidia.com/gpu-driver-upgrade-state"
"""Where the NVIDIA upgrade controller keeps each node's place in a driver rollout."""
LABEL_ARCH = "kubernetes.io/arch"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
"""The MIG layout of the node's GPUs: the MIG manager applies it; a node admin sets it too."""
MIG_DISABLED = "all-disabled"
"""The MIG manager's configuration without MIG (the chart's default)."""
LABEL_SHARING_PROFILE = "nvidia.com/device-plugin.config"
"""The sharing profile the device plugin's config manager picks for the node."""
GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource the NVIDIA device plugin advertises through the kubelet."""
GPU_RESOURCE_PREFIXES = (f"{GPU_RESOURCE}.", "nvidia.com/mig-")
"""Its other names: a shared GPU renamed (nvidia.com/gpu.shared), a MIG instance of the Mixed
strategy (nvidia.com/mig-1g.10gb). Any of them above zero is the kubelet reporting GPUs."""
RESOURCE_GPU = GPU_RESOURCE


class NodeError(ValueError):
    """A Node lacks what detection needs."""


class OsFamily(StrEnum):
    """Operating systems whose driver story differs."""

    GARDENLINUX = "gardenlinux"
    UBUNTU = "ubuntu"
    SL_MICRO = "sl-micro"
    SLES = "sles"
    RHEL = "rhel"
    FLATCAR = "flatcar"
    BOTTLEROCKET = "bottlerocket"
    TALOS = "talos"
    UNKNOWN = "unknown"


class DriverUpgradeState(StrEnum):
    """The NVIDIA upgrade controller's states (k8s-operator-libs), in the order a node passes
    them; OTHER is a value this module does not know (a newer controller)."""

    UPGRADE_REQUIRED = "upgrade-required"
    CORDON_REQUIRED = "cordon-required"
    WAIT_FOR_JOBS_REQUIRED = "wait-for-jobs-required"
    POD_DELETION_REQUIRED = "pod-deletion-required"
    DRAIN_REQUIRED = "drain-required"
    NODE_MAINTENANCE_REQUIRED = "node-maintenance-required"
    POST_MAINTENANCE_REQUIRED = "post-maintenance-required"
    POD_RESTART_REQUIRED = "pod-restart-required"
    VALIDATION_REQUIRED = "validation-required"
    UNCORDON_REQUIRED = "uncordon-required"
    DONE = "upgrade-done"
    FAILED = "upgrade-failed"
    OTHER = "other"


def parse_upgrade_state(value: str | None) -> DriverUpgradeState | None:
    """The label's value; none or empty (no rollout ever touched the node) -> None."""
    if not value:
        return None
    try:
        return DriverUpgradeState(value)
    except ValueError:
        return DriverUpgradeState.OTHER


# (family, pattern on status.nodeInfo.osImage with the version as group 1). First match wins.
_OS_IMAGES: tuple[tuple[OsFamily, re.Pattern[str]], ...] = (
    (OsFamily.GARDENLINUX, re.compile(r"^Garden Linux\s+([0-9][0-9.]*)", re.I)),
    (OsFamily.UBUNTU, re.compile(r"^Ubuntu\s+([0-9][0-9.]*)", re.I)),
    (OsFamily.SL_MICRO, re.compile(r"^SUSE Linux Micro\s+([0-9][0-9.]*)", re.I)),
    (OsFamily.SL_MICRO, re.compile(r"^SL[- ]Micro\s+([0-9][0-9.]*)", re.I)),
    (
        OsFamily.SLES,
        re.compile(r"^SUSE Linux Enterprise Server\s+([0-9][0-9.]*(?: SP[0-9]+)?)", re.I),
    ),
    (OsFamily.RHEL, re.compile(r"^Red Hat Enterprise Linux(?: CoreOS)?\s+([0-9][0-9.]*)", re.I)),
    (OsFamily.FLATCAR, re.compile(r"^Flatcar Container Linux.*?([0-9]+\.[0-9]+\.[0-9]+)", re.I)),
    (OsFamily.BOTTLEROCKET, re.compile(r"^Bottlerocket OS\s+([0-9][0-9.]*)", re.I)),
    (OsFamily.TALOS, re.compile(r"^Talos\s*\(?v?([0-9][0-9.]*)", re.I)),
)

_PROVIDERS = MappingProxyType(
    {
        "aws": "aws",
        "gce": "gcp",
        "azure": "azure",
        "openstack": "openstack",
        "vsphere": "vsphere",
        "alicloud": "alicloud",
        "kwok": "kwok",
    }
)


def parse_os_image(os_image: str) -> tuple[OsFamily, str | None]:
    """`Garden Linux 1592.4` -> (gardenlinux, "1592.4"); anything unknown -> (unknown, None)."""
    text = os_image.strip()
    for family, pattern in _OS_IMAGES:
        match = pattern.match(text)
        if match:
            return family, match.group(1).rstrip(".")
    return OsFamily.UNKNOWN, None


def parse_provider(provider_id: str | None) -> str:
    """`aws:///eu-central-1a/i-0abc` -> aws; `gce://...` -> gcp; none or odd -> unknown."""
    if not provider_id or "://" not in provider_id:
        return "unknown"
    scheme = provider_id.split("://", 1)[0].lower()
    return _PROVIDERS.get(scheme, scheme or "unknown")


def is_gpu_resource(name: str) -> bool:
    """nvidia.com/gpu, a renamed shared GPU (nvidia.com/gpu.shared) or a MIG instance of the
    Mixed strategy (nvidia.com/mig-1g.10gb)."""
    return name == RESOURCE_GPU or name.startswith(GPU_RESOURCE_PREFIXES)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the module knows about one Node. Immutable and small."""

    name: str
    provider: str
    machine_type: str | None
    gpu_model: str | None
    gpu_count: int | None
    os: OsFamily
    os_version: str | None
    os_image: str
    arch: str
    kernel: str | None
    pool: str | None
    evidence: tuple[str, ...]
    """Why the node counts as a GPU node: registry, nfd-pci, gpu-present, capacity, opt-in."""
    preinstalled_driver: bool
    opted_out: bool = False
    nfd_missing: bool = False
    """NFD has not (yet) published NFD_LABELS_NEEDED on this node."""
    driver_excluded: bool = False
    """Labelled nvidia.com/gpu.deploy.driver=false: no NVIDIA driver DaemonSet runs here."""
    machine: MachineType | None = None
    """The registry's entry of its machine type."""
    mig_config: str | None = None
    """Its MIG layout (LABEL_MIG_CONFIG), when it has one other than MIG_DISABLED."""
    sharing_profile: str | None = None
    """The sharing profile it picks (LABEL_SHARING_PROFILE); None: the default."""

    @property
    def is_gpu(self) -> bool:
        return bool(self.evidence) and not self.opted_out

    @property
    def mig_mode(self) -> bool:
        """Its GPUs are (to be) partitioned into MIG instances."""
        return self.mig_config is not None

    @property
    def machine_type_known(self) -> bool:
        return "registry" in self.evidence


@dataclass(frozen=True, slots=True)
class ObservedNode:
    """One Node as the manager keeps it: what planning reads (`facts`), and the per-node state
    only the status reads. A change of that state (the NVIDIA upgrade controller's label, what
    an extension keeps) leaves `facts` equal, so the plan stays the one made."""

    facts: NodeFacts
    driver_upgrade: DriverUpgradeState | None = None
    """The node's state in the NVIDIA upgrade controller's driver rollout (LABEL_DRIVER_UPGRADE)."""
    extras: tuple[Hashable, ...] = ()
    """What the extensions' Node folds keep of it (`NodeFold`), each finds its own by type; the
    core reads none of it. Empty (one shared tuple) on most nodes."""

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def is_gpu(self) -> bool:
        return self.facts.is_gpu


def as_int(value: Any) -> int | None:
    """A count of a Node body (a label's or a resource's value): a non-negative int, else
    None."""
    if value is None:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 19:
        return int(value)
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    """A nested part of a Node body: absent is empty, anything but a mapping is an error."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise NodeError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


FIELD_LIMIT = 256
"""nodeInfo strings are kept to this length: the API server does not bound them, and the facts
(and the findings that quote them) must stay small whatever a Node says."""


def bounded(value: Any) -> str:
    """A string of a Node body, cut to FIELD_LIMIT."""
    text = str(value or "")
    return text if len(text) <= FIELD_LIMIT else text[: FIELD_LIMIT - 3] + "..."


_DRIVER_IN_IMAGE = (OsFamily.FLATCAR, OsFamily.BOTTLEROCKET, OsFamily.TALOS)
"""Immutable OSes that ship the NVIDIA driver in the image: none is installed on them."""


@dataclass(frozen=True, slots=True)
class NodeParts:
    """The parts of a Node body that detection (and an extension's `NodeFold`) reads, each
    checked to be a mapping."""

    name: str
    labels: dict[str, str]
    spec: Mapping[str, Any]
    info: Mapping[str, Any]
    capacity: Mapping[str, Any]
    allocatable: Mapping[str, Any]
    status: Mapping[str, Any]
    annotations: Mapping[str, Any]


def _parts(node: Mapping[str, Any]) -> NodeParts:
    """Raises NodeError when the body is not a Node or lacks metadata.name."""
    if not isinstance(node, Mapping):
        raise NodeError(f"expected a Node object, got {type(node).__name__}")
    kind = node.get("kind")
    if kind not in (None, "Node"):
        raise NodeError(f"expected kind Node, got kind {kind!r}")
    meta = node.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise NodeError("a Node without metadata.name")
    where = f"Node {name}"
    labels = {
        str(k): str(v)
        for k, v in _mapping(meta.get("labels"), f"{where}: metadata.labels").items()
        if v is not None
    }
    spec = _mapping(node.get("spec"), f"{where}: spec")
    status = _mapping(node.get("status"), f"{where}: status")
    info = _mapping(status.get("nodeInfo"), f"{where}: status.nodeInfo")
    capacity = _mapping(status.get("capacity"), f"{where}: status.capacity")
    allocatable = _mapping(status.get("allocatable"), f"{where}: status.allocatable")
    annotations = _mapping(meta.get("annotations"), f"{where}: metadata.annotations")
    return NodeParts(name, labels, spec, info, capacity, allocatable, status, annotations)


EVIDENCE_KINDS = ("registry", "nfd-pci", "gpu-present", "capacity", "opt-in")
"""Why a node counts as a GPU node, in the order NodeFacts.evidence lists them."""
_EVIDENCE_SETS = tuple(
    tuple(kind for bit, kind in enumerate(EVIDENCE_KINDS) if mask >> bit & 1)
    for mask in range(1 << len(EVIDENCE_KINDS))
)
"""Every combination of EVIDENCE_KINDS, by bit mask: the GPU nodes share these tuples instead
of holding one each."""


def _evidence(
    labels: Mapping[str, str], registered: bool, capacity_gpus: int | None
) -> tuple[str, ...]:
    """Why the node counts as a GPU node, in a fixed order."""
    found = (
        registered,
        labels.get(LABEL_NFD_NVIDIA_PCI) == "true",
        labels.get(LABEL_GPU_PRESENT) == "true",
        bool(capacity_gpus),
        labels.get(LABEL_OPT_IN) == "true",
    )
    return _EVIDENCE_SETS[sum(1 << bit for bit, said in enumerate(found) if said)]


def _arch(info: Mapping[str, Any], labels: Mapping[str, str], known: MachineType | None) -> str:
    """The kubelet's word, else the node label, else the registry's."""
    found = info.get("architecture") or labels.get(LABEL_ARCH) or (known and known.arch)
    return bounded(found) or "unknown"


def labelled(labels: Mapping[str, str], key: str, ignored: str = "") -> str | None:
    """A label's value, cut to FIELD_LIMIT; None when it is missing, empty or `ignored`."""
    value = labels.get(key)
    return bounded(value) if value and value != ignored else None


@overload
def _shared(text: str) -> str: ...
@overload
def _shared(text: str | None) -> str | None: ...
def _shared(text: str | None) -> str | None:
    """One string object for a value that thousands of Nodes repeat (machine type, OS image,
    kernel, pool): the JSON parser makes a new one per Node. Shared, a Node's facts take about
    half the memory (docs/performance.md, memory per Node). Interned strings are freed when no
    Node refers to them any more."""
    return sys.intern(text) if type(text) is str else text


NodeFold = Callable[[NodeParts, NodeFacts], tuple[Hashable, ...]]
"""An extension's share of the Node fold (extensions/base.py `Extension.node_fold`): what it
keeps of a Node body beyond the NodeFacts, as compact, immutable facts of its own types; `()`
on a node where it has nothing to keep (most nodes). It runs for every Node event, in the
informer's thread, so it reads a few keys of the body and nothing else."""


def node_facts(node: Mapping[str, Any], registry: MachineTypeRegistry) -> NodeFacts:
    """What planning reads of one Node body (as the API or `kubectl get node -o yaml` gives
    it). Raises NodeError when the body is not a Node or lacks metadata.name."""
    return observe_node(node, registry).facts


def observe_node(
    node: Mapping[str, Any], registry: MachineTypeRegistry, folds: Sequence[NodeFold] = ()
) -> ObservedNode:
    """Compact facts of one Node body, its per-node state, and what the extensions' `folds`
    keep of it.

    Raises NodeError when the body is not a Node or lacks metadata.name.
    """
    parts = _parts(node)
    labels, info = parts.labels, parts.info
    os_image = bounded(info.get("osImage"))
    family, version = parse_os_image(os_image)
    provider_id = parts.spec.get("providerID")
    provider = bounded(parse_provider(provider_id if isinstance(provider_id, str) else None))
    machine_type = labels.get(LABEL_INSTANCE_TYPE) or labels.get(LABEL_INSTANCE_TYPE_BETA)
    known = registry.lookup(provider, machine_type)
    capacity_gpus = as_int(parts.capacity.get(RESOURCE_GPU))
    known_model, known_count = (known.gpu, known.count) if known is not None else (None, None)
    model = labels.get(LABEL_MODEL) or known_model or labels.get(LABEL_GFD_PRODUCT)
    count = (
        as_int(labels.get(LABEL_COUNT))
        or known_count
        or capacity_gpus
        or as_int(labels.get(LABEL_GFD_COUNT))
    )
    excluded = labels.get(LABEL_DEPLOY_DRIVER) == "false"
    preinstalled = (
        labels.get(LABEL_PREINSTALLED) == "true" or excluded or family in _DRIVER_IN_IMAGE
    )
    facts = NodeFacts(
        name=parts.name,
        provider=_shared(provider),
        machine_type=_shared(machine_type),
        gpu_model=_shared(model),
        gpu_count=count,
        os=family,
        os_version=_shared(version),
        os_image=_shared(os_image),
        arch=_shared(_arch(info, labels, known)),
        kernel=_shared(bounded(info.get("kernelVersion")) or None),
        pool=_shared(labels.get(LABEL_POOL)),
        evidence=_evidence(labels, known is not None, capacity_gpus),
        preinstalled_driver=preinstalled,
        opted_out=labels.get(LABEL_OPT_IN) == "false",
        nfd_missing=not all(labels.get(key) for key in NFD_LABELS_NEEDED),
        driver_excluded=excluded,
        machine=known,
        mig_config=labelled(labels, LABEL_MIG_CONFIG, MIG_DISABLED),
        sharing_profile=labelled(labels, LABEL_SHARING_PROFILE),
    )
    extras: tuple[Hashable, ...] = ()
    for fold in folds:
        extras += fold(parts, facts)
    return ObservedNode(facts, parse_upgrade_state(labels.get(LABEL_DRIVER_UPGRADE)), extras)
