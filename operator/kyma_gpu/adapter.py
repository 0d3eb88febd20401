"""The only module that writes to the Kubernetes API (kopf's own watching aside).

Every write is server-side apply with one field manager, or a delete. Calls run in a thread
so that the kopf event loop never blocks. Each write is counted, so that tests and the
benchmark can show that nothing is written when nothing changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kyma_gpu import __version__
from kyma_gpu.api.models import API_GROUP, API_VERSION, KIND, PLURAL

FIELD_MANAGER = "kyma-gpu"
USER_AGENT = f"kyma-gpu/{__version__}"
_APPLY = "application/apply-patch+yaml"

log = logging.getLogger(__name__)

# apiVersion/kind -> plural, for the namespaced Flux objects the plan renders.
_PLURALS = {
    ("helm.toolkit.fluxcd.io/v2", "HelmRelease"): "helmreleases",
    ("source.toolkit.fluxcd.io/v1", "HelmRepository"): "helmrepositories",
    ("source.toolkit.fluxcd.io/v1", "OCIRepository"): "ocirepositories",
}


class AdapterError(Exception):
    """A write failed in a way a retry will not fix (invalid object, forbidden)."""


class Conflict(Exception):
    """The API says try again (conflict, throttling, server error)."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass
class KubeAdapter:
    """Writes Flux objects and Gpu status."""

    api: client.ApiClient
    writes: Counter[str] = field(default_factory=Counter)

    @classmethod
    def connect(cls) -> KubeAdapter:
        """In-cluster config, else $KUBECONFIG / ~/.kube/config."""
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        api = client.ApiClient()
        api.user_agent = USER_AGENT
        return cls(api=api)

    @property
    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    async def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side apply of a namespaced Flux object."""
        ref = ObjectRef.of(obj)
        plural = _PLURALS[(ref.api_version, ref.kind)]
        group, version = ref.api_version.split("/")
        await self._call(
            f"apply {ref}",
            self._custom.patch_namespaced_custom_object,
            group,
            version,
            ref.namespace,
            plural,
            ref.name,
            dict(obj),
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=_APPLY,
        )

    async def delete(self, ref: ObjectRef) -> bool:
        """Delete; True when it was there."""
        plural = _PLURALS[(ref.api_version, ref.kind)]
        group, version = ref.api_version.split("/")
        try:
            await self._call(
                f"delete {ref}",
                self._custom.delete_namespaced_custom_object,
                group,
                version,
                ref.namespace,
                plural,
                ref.name,
            )
        except AdapterError as err:
            if "404" in str(err):
                return False
            raise
        return True

    async def apply_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Server-side apply of Gpu.status (the whole status is ours)."""
        body = {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "metadata": {"name": name},
            "status": dict(status),
        }
        await self._call(
            f"apply status of Gpu {name}",
            self._custom.patch_cluster_custom_object_status,
            API_GROUP,
            API_VERSION,
            PLURAL,
            name,
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=_APPLY,
        )

    async def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        self.writes[what.split(" ", 1)[0]] += 1
        try:
            return await asyncio.to_thread(func, *args, **kwargs)
        except ApiException as err:
            detail = f"{what}: {err.status} {err.reason}: {_message(err)}"
            if err.status == 404 and what.startswith("apply ") and "status" not in what:
                detail += (
                    " (is Flux installed? The module needs helm.toolkit.fluxcd.io/v2 and"
                    " source.toolkit.fluxcd.io/v1; see flux/README.md)"
                )
            if err.status in (409, 429) or (err.status or 0) >= 500:
                raise Conflict(detail) from err
            raise AdapterError(detail) from err


def _message(err: ApiException) -> str:
    import json

    try:
        body = json.loads(err.body or "{}")
    except ValueError:
        return str(err.body or "")[:300]
    return str(body.get("message", ""))[:500]
