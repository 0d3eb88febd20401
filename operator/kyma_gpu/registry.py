"""Does a registry hold an image? The OCI distribution API, without pulling: one HEAD request
for the manifest per image (an anonymous bearer token where the registry asks for one).

The one place where `kyma-gpu images --check` talks to a registry; the reference parsing is
pure and unit-tested, the requests run against the real registry in
tests/integration/test_image_check.py.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from enum import StrEnum

ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
TIMEOUT = 20.0


class Presence(StrEnum):
    PRESENT = "present"
    MISSING = "missing"
    UNKNOWN = "unknown"
    """A placeholder reference (<kernel>): nothing to ask for."""
    UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True)
class Reference:
    host: str
    name: str
    tag: str
    """A tag or a digest (sha256:...)."""


def parse_reference(reference: str) -> Reference | None:
    """host[:port]/name[:tag|@digest] -> its parts; None for a placeholder or a reference
    without a registry host (the module names every image with its host)."""
    if "<" in reference:
        return None
    name, sep, digest = reference.partition("@")
    tag = digest if sep else "latest"
    if re.search(r":[^/]+$", name):  # name:tag, or name:tag@digest (the digest counts)
        name, named = name.rsplit(":", 1)
        tag = tag if sep else named
    host, _, path = name.partition("/")
    if not path or not ("." in host or ":" in host or host == "localhost"):
        return None
    return Reference(host, path, tag)


def presence(reference: str, insecure: bool = False) -> tuple[Presence, str]:
    """Whether the registry of `reference` holds it, and a word on why not."""
    ref = parse_reference(reference)
    if ref is None:
        return Presence.UNKNOWN, "a placeholder: check each value of it"
    scheme = "http" if insecure else "https"
    url = f"{scheme}://{ref.host}/v2/{ref.name}/manifests/{ref.tag}"
    try:
        return _head(url, None)
    except urllib.error.HTTPError as err:
        if err.code == 401:
            return _with_token(url, err.headers.get("WWW-Authenticate", ""))
        return _answer(err.code)
    except (OSError, ValueError) as err:
        return Presence.UNREACHABLE, str(err)


def _head(url: str, token: str | None) -> tuple[Presence, str]:
    request = urllib.request.Request(url, method="HEAD", headers={"Accept": ACCEPT})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        return _answer(int(response.status))


def _answer(code: int) -> tuple[Presence, str]:
    if code == 200:
        return Presence.PRESENT, ""
    if code == 404:
        return Presence.MISSING, "the registry has no such manifest"
    return Presence.UNREACHABLE, f"the registry answered HTTP {code}"


def _with_token(url: str, challenge: str) -> tuple[Presence, str]:
    """An anonymous token from the realm the registry names (Docker's token protocol)."""
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if not challenge.lower().startswith("bearer") or "realm" not in fields:
        return Presence.UNREACHABLE, "the registry wants credentials (not supported yet)"
    query = urllib.parse.urlencode({k: v for k, v in fields.items() if k != "realm"})
    try:
        with urllib.request.urlopen(f"{fields['realm']}?{query}", timeout=TIMEOUT) as answer:
            body = json.load(answer)
        token = body.get("token") or body.get("access_token")
        return _head(url, str(token))
    except urllib.error.HTTPError as err:
        return _answer(err.code) if err.code != 401 else (Presence.UNREACHABLE, "denied")
    except (OSError, ValueError) as err:
        return Presence.UNREACHABLE, str(err)
