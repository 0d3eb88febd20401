"""The adapter's generic calls (issue 50, point 4): a patch of a given content type, of an
object or its status; the first page of a LIST; the API paths of the kinds the module writes,
the Flux kinds from their one definition, every other kind by the API machinery's guess."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kyma_gpu.adapter import KubeAdapter, ListQuery, ObjectRef, Patch, _path, plural
from kyma_gpu.api.resources import FIELD_MANAGER

Sent = tuple[str, str, dict[str, Any]]


def _adapter() -> tuple[KubeAdapter, list[Sent]]:
    adapter = KubeAdapter(api=None)  # type: ignore[arg-type]
    sent: list[Sent] = []

    def answer(*args: Any, **kwargs: Any) -> dict[str, Any]:
        sent.append((args[1], args[2], kwargs))
        return {"kind": "Answer"}

    adapter._json = answer  # type: ignore[method-assign]
    return adapter, sent


@pytest.mark.parametrize(
    ("api_version", "kind", "plural_"),
    [
        # what the module's own Flux's bundle held (the adapter's table until issue 50)
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions"),
        ("v1", "ServiceAccount", "serviceaccounts"),
        ("v1", "Service", "services"),
        ("apps/v1", "Deployment", "deployments"),
        ("rbac.authorization.k8s.io/v1", "Role", "roles"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
        # node marks' writes, and the Flux kinds
        ("v1", "Node", "nodes"),
        ("helm.toolkit.fluxcd.io/v2", "HelmRelease", "helmreleases"),
        ("source.toolkit.fluxcd.io/v1", "HelmRepository", "helmrepositories"),
        ("source.toolkit.fluxcd.io/v1", "OCIRepository", "ocirepositories"),
    ],
)
def test_every_kind_the_module_writes_has_its_path(api_version: str, kind: str,
                                                   plural_: str) -> None:  # fmt: skip
    assert plural(kind) == plural_
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    assert _path(ObjectRef(api_version, kind, "", "x")) == f"{base}/{plural_}/x"
    assert _path(ObjectRef(api_version, kind, "ns", "x")) == f"{base}/namespaces/ns/{plural_}/x"


def test_a_patch_names_its_content_type_subresource_and_field_manager() -> None:
    adapter, sent = _adapter()
    node = ObjectRef("v1", "Node", "", "gpu-1")
    body = {"status": {"conditions": [{"type": "X", "status": "True"}]}}
    asyncio.run(adapter.patch(node, body, Patch.STRATEGIC, "status", "mark Node gpu-1"))
    release = ObjectRef("helm.toolkit.fluxcd.io/v2", "HelmRelease", "kyma-system", "gpu-operator")
    asyncio.run(adapter.patch(release, [{"op": "remove", "path": "/spec/suspend"}]))
    [(method, path, node_call), (_, release_path, release_call)] = sent
    assert (method, path) == ("PATCH", "/api/v1/nodes/gpu-1/status")
    assert node_call["content_type"] == "application/strategic-merge-patch+json"
    assert node_call["body"] == body
    assert (
        release_path
        == "/apis/helm.toolkit.fluxcd.io/v2/namespaces/kyma-system/helmreleases/gpu-operator"
    )
    assert release_call["content_type"] == "application/json-patch+json"
    assert release_call["body"] == [{"op": "remove", "path": "/spec/suspend"}]
    assert node_call["query"] == release_call["query"] == (("fieldManager", FIELD_MANAGER),)
    assert adapter.writes == {"mark": 1, "patch": 1}  # `what` names the request


def test_a_list_reads_one_page_in_a_thread() -> None:
    adapter, _ = _adapter()
    pages: list[tuple[ListQuery, int]] = []

    def page(query: ListQuery, limit: int, token: str | None = None) -> dict[str, Any]:
        pages.append((query, limit))
        return {"items": [{"metadata": {"name": "a"}}]}

    adapter.list_page = page  # type: ignore[method-assign]
    query = ListQuery("/apis/source.toolkit.fluxcd.io/v1/helmcharts", metadata_only=True)
    assert asyncio.run(adapter.read_list(query, 5)) == {"items": [{"metadata": {"name": "a"}}]}
    assert pages == [(query, 5)]
    assert not adapter.writes
