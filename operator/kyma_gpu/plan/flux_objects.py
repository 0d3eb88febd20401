"""The Flux objects: a chart source (HelmRepository, or OCIRepository for oci://) and a
HelmRelease that follows Flux's recommended settings (docs/operations.md, Flux).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kyma_gpu.api.chart_sources import NVIDIA_REPOSITORY
from kyma_gpu.api.models import API_GROUP, API_VERSION, KIND, SINGLETON_NAME
from kyma_gpu.api.resources import HELM_RELEASE, HELM_REPOSITORY, OCI_REPOSITORY, module_labels
from kyma_gpu.rules.catalog import Defaults

HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
SPEC_HASH = "gpu.kyma-project.io/spec-hash"
"""Annotation with a hash of what the module last applied: a field removed from the plan
changes the hash, so the object is applied again and server-side apply drops the field."""

LABELS = MappingProxyType(module_labels("gpu-operator", managed_by="kyma-gpu"))
CHART_SOURCE_LABEL = "gpu.kyma-project.io/chart-source"
CHART_SOURCE_VALUE = "administrator"
"""On the source and HelmRelease of a chart source other than NVIDIA's public repository: the
admission policy kyma-gpu-flux-sources (kyma_gpu_tools/flux_policy.py) selects them by it."""

# Fields of release objects that something other than Helm legitimately changes; drift detection
# must not fight over them. Each entry says who writes the field.
DRIFT_IGNORE: tuple[Mapping[str, Any], ...] = (
    MappingProxyType({
        # Deployment replicas may be scaled by hand during maintenance (e.g. the operator to 0
        # while nodes are drained); Flux must not scale it back in the middle.
        "paths": ("/spec/replicas",),
        "target": MappingProxyType({"kind": "Deployment"}),
    }),
    MappingProxyType({
        # Annotations on the ClusterPolicy are written by the GPU operator and by people;
        # they are not Helm's. Not verified against the NVIDIA controller (it cannot run in
        # the tests here): revisit on a real GPU cluster.
        "paths": ("/metadata/annotations",),
        "target": MappingProxyType({"group": "nvidia.com", "kind": "ClusterPolicy"}),
    }),
)  # fmt: skip


# The NVIDIA operator's custom resources report Ready only once every GPU node runs the stack.
# Helm's wait (kstatus, which reads a Ready condition) would hold each install and upgrade until
# then: through a node-by-node driver rollout (spec.driver.upgradePolicy, an hour on a big pool)
# and past the release timeout, failing and retrying a release that went fine. Helm waits for
# the chart's own Deployments and DaemonSets; the Gpu status follows these resources.
HEALTH_CHECKS: tuple[Mapping[str, str], ...] = (
    MappingProxyType({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "current": "true"}),
    MappingProxyType(
        {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "current": "true"}
    ),
    MappingProxyType(
        {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "current": "true"}
    ),
)


@dataclass(frozen=True, slots=True)
class Owner:
    """The Gpu that owns the Flux objects (cluster-scoped, so namespaced owners are fine)."""

    uid: str
    name: str = SINGLETON_NAME

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True, slots=True)
class FluxSettings:
    """Names and Flux knobs, from values-rules/defaults.yaml."""

    namespace: str
    target_namespace: str
    release_name: str
    interval: str
    source_interval: str
    timeout: str
    retry_interval: str
    uninstall_timeout: str
    service_account_name: str

    @classmethod
    def from_defaults(cls, defaults: Defaults) -> FluxSettings:
        """From the typed defaults.yaml (rules/data_models.py FluxDefaults), field by field."""
        knobs = defaults.flux_settings
        return cls(
            namespace=defaults.module_namespace,
            target_namespace=defaults.target_namespace,
            release_name=defaults.release_name,
            interval=knobs.interval,
            source_interval=knobs.source_interval,
            timeout=knobs.timeout,
            retry_interval=knobs.retry_interval,
            uninstall_timeout=knobs.uninstall_timeout,
            service_account_name=knobs.service_account_name,
        )


def _metadata(name: str, settings: FluxSettings, owner: Owner | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": settings.namespace, "labels": dict(LABELS)}
    if owner is not None:
        meta["ownerReferences"] = [owner.reference()]
    return meta


@dataclass(frozen=True, slots=True)
class ChartSource:
    """Where the chart comes from: a Helm repository, or an OCI one (oci://)."""

    repository: str
    name: str
    version: str
    insecure: bool
    secret_ref: str | None
    digest: str | None = None
    """OCI: the manifest digest the allowed source pins for this version."""

    @property
    def oci(self) -> bool:
        return self.repository.startswith("oci://")

    @property
    def administrators(self) -> bool:
        """Anything but NVIDIA's public repository as it is: then the admission policy
        kyma-gpu-flux-sources holds the objects to the administrator's ConfigMap."""
        nvidia = self.repository.rstrip("/") == NVIDIA_REPOSITORY
        return not nvidia or self.insecure or self.secret_ref is not None


def flux_objects(
    settings: FluxSettings,
    *,
    chart_repository: str,
    chart_name: str,
    chart_version: str,
    insecure: bool,
    secret_ref: str | None,
    values: Mapping[str, Any],
    owner: Owner | None,
    digest: str | None = None,
    post_renderers: Sequence[Mapping[str, Any]] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(source, HelmRelease), in the order they must be applied. post_renderers: the chart
    rules the module narrows for this version (plan/narrowing.py)."""
    chart = ChartSource(chart_repository, chart_name, chart_version, insecure, secret_ref, digest)
    source = _source(chart, settings, owner)
    spec = {**_chart_ref(chart, settings), **_release_spec(settings, values)}
    if post_renderers:
        spec["postRenderers"] = copy.deepcopy([dict(p) for p in post_renderers])
    release: dict[str, Any] = {
        "apiVersion": HELM_RELEASE.api_version,
        "kind": HELM_RELEASE.kind,
        "metadata": _metadata(settings.release_name, settings, owner),
        "spec": spec,
    }
    if chart.administrators:
        for obj in (source, release):
            obj["metadata"]["labels"][CHART_SOURCE_LABEL] = CHART_SOURCE_VALUE
    return _with_hash(source), _with_hash(release)


def _source(chart: ChartSource, settings: FluxSettings, owner: Owner | None) -> dict[str, Any]:
    """The OCIRepository or HelmRepository the release reads its chart from."""
    kind = OCI_REPOSITORY if chart.oci else HELM_REPOSITORY
    spec: dict[str, Any] = {"interval": settings.source_interval}
    if chart.oci:
        spec["url"] = f"{chart.repository.rstrip('/')}/{chart.name}"
        # A digest takes precedence over the tag in Flux: a moved tag is not installed.
        spec["ref"] = {"tag": chart.version, **({"digest": chart.digest} if chart.digest else {})}
        spec["layerSelector"] = {"mediaType": HELM_CHART_LAYER, "operation": "copy"}
        if chart.insecure:
            spec["insecure"] = True
    else:
        spec["url"] = chart.repository
    if chart.secret_ref:
        spec["secretRef"] = {"name": chart.secret_ref}
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": _metadata(settings.release_name, settings, owner),
        "spec": spec,
    }


def _chart_ref(chart: ChartSource, settings: FluxSettings) -> dict[str, Any]:
    """How the HelmRelease names its chart: a chartRef to the OCIRepository, or a chart
    template over the HelmRepository."""
    name, namespace = settings.release_name, settings.namespace
    if chart.oci:
        return {"chartRef": {"kind": OCI_REPOSITORY.kind, "name": name, "namespace": namespace}}
    return {
        "chart": {
            "spec": {
                "chart": chart.name,
                "version": chart.version,
                "sourceRef": {"kind": HELM_REPOSITORY.kind, "name": name, "namespace": namespace},
                "interval": settings.source_interval,
            }
        }
    }


def _release_spec(settings: FluxSettings, values: Mapping[str, Any]) -> dict[str, Any]:
    """The HelmRelease's settings after its chart: names, timeouts, remediation, values."""
    retry = {"name": "RetryOnFailure", "retryInterval": settings.retry_interval}
    return {
        "interval": settings.interval,
        "releaseName": settings.release_name,
        "serviceAccountName": settings.service_account_name,
        "targetNamespace": settings.target_namespace,
        "storageNamespace": settings.target_namespace,
        "timeout": settings.timeout,
        "install": {
            # The module manifest owns the target namespace (config/namespace/), and the
            # release's ServiceAccount may only read it.
            "createNamespace": False,
            # Flux skips CRD upgrades by default; stale GPU operator CRDs prune fields.
            "crds": "CreateReplace",
            "strategy": retry,
        },
        "upgrade": {
            "crds": "CreateReplace",
            "cleanupOnFail": True,
            "strategy": retry,
        },
        "uninstall": {
            "keepHistory": False,
            "deletionPropagation": "foreground",
            "timeout": settings.uninstall_timeout,
        },
        "driftDetection": {
            "mode": "enabled",
            "ignore": [
                {"paths": list(r["paths"]), "target": dict(r["target"])} for r in DRIFT_IGNORE
            ],
        },
        "healthCheckExprs": [dict(h) for h in HEALTH_CHECKS],
        "values": copy.deepcopy(dict(values)),
    }


def spec_hash(obj: Mapping[str, Any]) -> str:
    """Hash of the labels, owners and spec the module applies (not of the hash itself)."""
    meta = obj["metadata"]
    payload = {
        "labels": meta.get("labels"),
        "ownerReferences": meta.get("ownerReferences"),
        "spec": obj.get("spec"),
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["annotations"] = {SPEC_HASH: spec_hash(obj)}
    return obj
