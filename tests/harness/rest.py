"""Reading objects from the local API server without a kubectl process per read.

Tests poll objects several times a second; each ``kubectl get`` costs about 0.1 s of CPU to
start, which on two cores shared by parallel test workers adds up to most of a core. This
reads over HTTPS with the admin certificate instead, resolving a resource name the way kubectl
does (plural, singular, short name or kind, optionally ``.group`` or ``.version.group``, from
the API's discovery, refreshed when a name is not known yet: a CRD just installed), and
returns what ``kubectl get -o json`` prints (list items with their apiVersion and kind). A type
the API does not serve reads as "no such object" (None, []), so a wait for an object of a CRD
that is still being installed just goes on waiting.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


class UnknownResourceError(RuntimeError):
    """The API serves no resource of that name (as kubectl's "the server doesn't have a
    resource type")."""


@dataclass(frozen=True)
class Resource:
    group_version: str
    """v1 or apps/v1"""
    plural: str
    kind: str
    namespaced: bool

    @property
    def base(self) -> str:
        """The group version's path, whose GET lists the resources it serves."""
        return "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"

    def path(self, namespace: str | None, name: str | None = None) -> str:
        base = self.base
        where = f"/namespaces/{namespace}" if namespace is not None and self.namespaced else ""
        return f"{base}{where}/{self.plural}" + (f"/{name}" if name is not None else "")


class RestReader:
    def __init__(self, server: str, context: ssl.SSLContext) -> None:
        self.server = server
        self.context = context
        self._names: dict[str, Resource] = {}
        self._discovered = float("-inf")
        self._lock = threading.Lock()

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(self.server + path, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, context=self.context, timeout=30) as answer:
            return json.loads(answer.read())

    def _versions(self) -> list[tuple[str, str]]:
        """(group/version, group): the core group first, then the groups in discovery order,
        each group's preferred version first, as kubectl prefers them for a bare name."""
        versions = [("v1", "")]
        for group in self._get("/apis")["groups"]:
            preferred = group["preferredVersion"]["groupVersion"]
            ordered = sorted(group["versions"], key=lambda v: v["groupVersion"] != preferred)
            versions += [(v["groupVersion"], group["name"]) for v in ordered]
        return versions

    def _discover(self) -> dict[str, Resource]:
        names: dict[str, Resource] = {}
        for group_version, group in self._versions():
            path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
            try:
                listed = self._get(path)["resources"]
            except urllib.error.HTTPError:
                continue  # a group version going away mid-discovery
            version = group_version.rsplit("/", 1)[-1]
            for item in listed:
                if "/" in item["name"]:
                    continue  # subresources
                resource = Resource(group_version, item["name"], item["kind"], item["namespaced"])
                aliases = {item["name"], item.get("singularName") or "", item["kind"].lower(),
                           *item.get("shortNames", [])} - {""}  # fmt: skip
                for alias in aliases:
                    keys = [alias, f"{alias}.{version}"] if not group else [
                        alias, f"{alias}.{group}", f"{alias}.{version}.{group}"]  # fmt: skip
                    for key in keys:
                        names.setdefault(key, resource)  # the first (preferred) one wins
        return names

    def resolve(self, name: str) -> Resource:
        """The resource a name means; discovery again (at most once a second) for a name not
        known yet, e.g. the CRD of a chart that is being installed."""
        key = name.lower()
        with self._lock:
            if key not in self._names and time.monotonic() - self._discovered > 1.0:
                self._names = self._discover()
                self._discovered = time.monotonic()
            if key not in self._names:
                raise UnknownResourceError(f"the server has no resource type {name!r}")
            return self._names[key]

    def _served(self, found: Resource) -> bool:
        """Whether the server still serves the resource at the version discovery found: a CRD
        replaced by one without that version (an old Flux's v2beta1 by today's v2) is not."""
        try:
            listed = self._get(found.base)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return False
            raise
        return any(item["name"] == found.plural for item in listed.get("resources", []))

    def serves(self, group_version: str, plural: str) -> bool:
        """Whether discovery lists the resource at /apis/<group_version> (a CRD is Established
        a moment before its API appears there)."""
        try:
            listed = self._get(f"/apis/{group_version}")
        except urllib.error.HTTPError as error:
            if error.code in (404, 503):
                return False
            raise
        return any(item["name"] == plural for item in listed.get("resources", []))

    def _current(self, resource: str, found: Resource) -> Resource | None:
        """After a 404: the resource as the server serves it now, if discovery was stale."""
        if self._served(found):
            return None
        with self._lock:
            self._names = self._discover()
            self._discovered = time.monotonic()
        renewed = self._names.get(resource.lower())
        return renewed if renewed is not None and renewed != found else None

    def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None if it does not exist, its type included (a CRD not yet there)."""
        try:
            found: Resource | None = self.resolve(resource)
        except UnknownResourceError:
            return None
        for _ in range(2):  # once more if the type moved to another version meanwhile
            assert found is not None
            try:
                obj: dict[str, Any] = self._get(found.path(namespace or "default", name))
            except urllib.error.HTTPError as error:
                if error.code != 404:
                    raise
                found = self._current(resource, found)
                if found is None:
                    return None
                continue
            return obj
        return None

    def list(
        self, resource: str, namespace: str | None = None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects of a kind ([] when the API has no such kind, a CRD not yet there)."""
        try:
            found = self.resolve(resource)
        except UnknownResourceError:
            return []
        query = "?" + urllib.parse.urlencode({"labelSelector": selector}) if selector else ""
        try:
            listed = self._get(found.path(namespace) + query)
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise
            renewed = self._current(resource, found)  # a CRD deleted, or served at another version
            if renewed is None:
                return []
            found, listed = renewed, self._get(renewed.path(namespace) + query)
        items: list[dict[str, Any]] = listed.get("items", [])
        for item in items:
            item.setdefault("apiVersion", found.group_version)
            item.setdefault("kind", found.kind)
        return items
