"""The module's own Flux: the bundle (flux.yaml next to this file, rendered from flux/ by
hack/flux-bundle.sh), its images, its hash and its sharding label. Pure.

A `FluxBundle` reads and parses the file the first time it is needed (a cluster without Flux,
or with the module's own), never when the module is imported: a manager on a cluster with a
Flux of its own never reads it. Its owner keeps it: the extension's configuration, which the
Loop builds once (`OwnFluxConfig`); the tools make one per run.
"""

from __future__ import annotations

import hashlib
import importlib.resources
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import yaml
from cachetools import LRUCache, cachedmethod

from kyma_gpu.api.resources import HELM_RELEASE, HELM_REPOSITORY, OCI_REPOSITORY, FluxKind
from kyma_gpu.plan.provision import BUNDLE_HASH, FluxApi

SHARD_LABEL = "sharding.fluxcd.io/key"
SHARD = "kyma-gpu"
"""The module's own Flux reconciles only objects with this sharding label (and value)."""
MARKER_CRD = HELM_RELEASE.crd_name
"""Applied last: its bundle hash says the whole bundle is in place."""

_SOURCE = "source.toolkit.fluxcd.io"
FLUX_CRD_KINDS = (
    HELM_RELEASE,
    FluxKind(_SOURCE, "v1", "HelmChart", "helmcharts"),
    HELM_REPOSITORY,
    OCI_REPOSITORY,
    FluxKind(_SOURCE, "v1", "GitRepository", "gitrepositories"),
    FluxKind(_SOURCE, "v1", "Bucket", "buckets"),
    FluxKind(_SOURCE, "v1", "ExternalArtifact", "externalartifacts"),
)
"""Every kind of the CRDs of the module's own Flux: what may still use them."""

CONTROLLERS = ("source-controller", "helm-controller")
IMAGE_ENV = MappingProxyType(
    {
        "source-controller": "KYMA_GPU_FLUX_SOURCE_CONTROLLER_IMAGE",
        "helm-controller": "KYMA_GPU_FLUX_HELM_CONTROLLER_IMAGE",
    }
)
"""The manager Deployment's environment names the images of the bundle's controllers
(config/manager/deployment.yaml): modulectl takes images from there into the module's OCM
component, and Kyma's image localisation rewrites them there, for air-gapped clusters."""


MIRROR_LABEL = "gpu.kyma-project.io/flux-images"
MIRROR_VALUE = "mirror"
"""On a bundle Deployment whose image is not the bundle's own (Kyma's image localisation, or a
mirror in the manager's environment): the admission policy kyma-gpu-manager-mirrors then holds
the image to a registry mirror an administrator lists (kyma_gpu_tools/manager_policy.py)."""


@dataclass(frozen=True, slots=True)
class FluxImages:
    """Images for the bundle's controllers, by controller; a controller not named keeps the
    image the bundle was rendered with (flux/kustomization.yaml)."""

    images: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FluxImages:
        return cls(tuple((c, env[name]) for c, name in IMAGE_ENV.items() if env.get(name)))


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader where PyYAML has it (a tenth of the pure one's 0.2 s for the bundle)."""


def _frozen(node: Any) -> Any:
    if isinstance(node, dict):
        return MappingProxyType({k: _frozen(v) for k, v in node.items()})
    return tuple(_frozen(v) for v in node) if isinstance(node, list) else node


def _thawed(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _thawed(v) for k, v in node.items()}
    return [_thawed(v) for v in node] if isinstance(node, tuple) else node


def _controller(image: str) -> str | None:
    """ghcr.io/fluxcd/helm-controller:v1.6.4 (or a mirror of it) -> helm-controller."""
    name = image.rsplit("@", 1)[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return name if name in CONTROLLERS else None


def _set_images(objects: Sequence[dict[str, Any]], images: FluxImages) -> None:
    wanted = dict(images.images)
    for obj in objects:
        if obj["kind"] != "Deployment":
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            controller = _controller(container["image"])
            if controller in wanted and wanted[controller] != container["image"]:
                container["image"] = wanted[controller]
                obj["metadata"].setdefault("labels", {})[MIRROR_LABEL] = MIRROR_VALUE


@dataclass(frozen=True, slots=True)
class _Read:
    """The bundle as read: its objects (frozen, the marker CRD last) and its hash."""

    objects: tuple[Mapping[str, Any], ...]
    digest: str


class FluxBundle:
    """The rendered flux/ base (hack/flux-bundle.sh, flux.yaml) with the given controller
    images, read and parsed when first needed and then kept (cachetools)."""

    def __init__(self, images: FluxImages = FluxImages()) -> None:
        self.images = images
        self._read: LRUCache[Any, _Read] = LRUCache(maxsize=1)

    @cachedmethod(attrgetter("_read"))
    def _parsed(self) -> _Read:
        text = importlib.resources.files(__package__).joinpath("flux.yaml").read_text()
        objects = (_frozen(obj) for obj in yaml.load_all(text, Loader=_LOADER) if obj)
        last = sorted(objects, key=lambda obj: bool(obj["metadata"]["name"] == MARKER_CRD))
        images = self.images.images
        digest = hashlib.sha256((text + (repr(images) if images else "")).encode()).hexdigest()
        return _Read(tuple(last), digest[:16])

    @property
    def hash(self) -> str:
        """The bundle's hash with these images (of the text and the images): on every
        object."""
        return self._parsed().digest

    def objects(self) -> tuple[Mapping[str, Any], ...]:
        """Its objects with the images, the hash on every object and the marker CRD last: a
        fresh copy for each caller."""
        objects: list[dict[str, Any]] = [_thawed(obj) for obj in self._parsed().objects]
        _set_images(objects, self.images)
        digest = self.hash
        for obj in objects:
            obj["metadata"].setdefault("annotations", {})[BUNDLE_HASH] = digest
        return tuple(objects)

    def current(self, api: FluxApi) -> bool:
        """The module's own Flux carries this bundle (the marker CRD's hash)."""
        marker = api.crds.get(MARKER_CRD)
        return marker is not None and marker.bundle_hash == self.hash

    def crds(self) -> tuple[str, ...]:
        return tuple(o["metadata"]["name"] for o in self._parsed().objects
                     if o["kind"] == "CustomResourceDefinition")  # fmt: skip

    def workloads(self) -> tuple[Mapping[str, Any], ...]:
        """Everything but its CRDs: what removing the module's Flux deletes first."""
        return tuple(o for o in self.objects() if o["kind"] != "CustomResourceDefinition")
