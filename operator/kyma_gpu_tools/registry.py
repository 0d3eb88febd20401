"""Does a registry hold an image? The OCI distribution API, without pulling: one HEAD request
for the manifest per image (an anonymous bearer token where the registry asks for one).

Only https is spoken (http with --insecure), to the registry and to the token realm its
challenge names: a realm of another scheme (file://, ftp://, data:, a relative URL) is refused
before anything is read or sent, and so is a redirect to one; the realm may be on another host
(Docker Hub's is auth.docker.io), which gets the challenge's service and scope and nothing
else. An Authorization header never follows a redirect to another host.

The one place where `kyma-gpu images --check` and a release's digests (`manifest_digest`,
hack/module.py) talk to a registry; the reference parsing is
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
from http.client import HTTPMessage
from typing import IO

from kyma_gpu.facts.echo import NAME_LIMIT, cut

ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
TIMEOUT = 20.0
DIGEST = r"sha256:[0-9a-f]{64}"
TOKEN_BODY_LIMIT = 64 * 1024
"""Bytes of a token realm's answer read at most: a token is a few kB."""


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


@dataclass(frozen=True, slots=True)
class Answer:
    """What the registry said of one reference."""

    presence: Presence
    why: str = ""
    """Why it is not present ("" when it is)."""
    digest: str | None = None
    """The manifest's digest (Docker-Content-Digest) when present."""


def presence(reference: str, insecure: bool = False) -> tuple[Presence, str]:
    """Whether the registry of `reference` holds it, and a word on why not."""
    answer = ask(reference, insecure)
    return answer.presence, answer.why


def manifest_digest(reference: str, insecure: bool = False) -> tuple[str | None, str]:
    """The digest of the manifest (or image index) `reference` names, and why there is none:
    what a release pins an operand image by."""
    answer = ask(reference, insecure)
    if answer.presence is not Presence.PRESENT:
        return None, answer.why
    if answer.digest is None:
        return None, "the registry named no Docker-Content-Digest for it"
    return answer.digest, ""


def ask(reference: str, insecure: bool = False) -> Answer:
    """One HEAD request for the manifest (with an anonymous token where one is asked for)."""
    ref = parse_reference(reference)
    if ref is None:
        return Answer(Presence.UNKNOWN, "a placeholder: check each value of it")
    scheme = "http" if insecure else "https"
    url = f"{scheme}://{ref.host}/v2/{ref.name}/manifests/{ref.tag}"
    try:
        return _head(url, None, insecure)
    except urllib.error.HTTPError as err:
        if err.code == 401:
            return _with_token(url, err.headers.get("WWW-Authenticate", ""), insecure)
        return _answer(err.code)
    except (OSError, ValueError) as err:
        return Answer(Presence.UNREACHABLE, _said(err))


def _schemes(insecure: bool) -> tuple[str, ...]:
    return ("https", "http") if insecure else ("https",)


def refused_scheme(url: str, insecure: bool, what: str = "names a token realm") -> str:
    """Why `url` (a token realm, or where a redirect points) is not followed; "" when it is:
    https, or http with --insecure."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme in _schemes(insecure):
        return ""
    named = f"scheme {scheme}:" if scheme else "no scheme (a relative URL)"
    wanted = "https or http (--insecure)" if insecure else "https (http only with --insecure)"
    return (
        f"the registry {what} with {named} {cut(url, NAME_LIMIT)!r}; only {wanted} is "
        "followed, so nothing was read or sent there"
    )


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to an allowed scheme, and drops Authorization on another host."""

    def __init__(self, insecure: bool) -> None:
        self.insecure = insecure

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
        headers: HTTPMessage, newurl: str,
    ) -> urllib.request.Request | None:  # fmt: skip
        why = refused_scheme(newurl, self.insecure, "redirects")
        if why:
            raise urllib.error.URLError(why)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != req.host:
            new.remove_header("Authorization")
        return new


def _opener(insecure: bool) -> urllib.request.OpenerDirector:
    """http(s) only: no file, ftp or data handler, whatever a URL or a redirect names."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(), urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(), urllib.request.HTTPDefaultErrorHandler(),
        _Redirects(insecure), urllib.request.HTTPErrorProcessor(),
    ):  # fmt: skip
        opener.add_handler(handler)
    return opener


def _head(url: str, token: str | None, insecure: bool) -> Answer:
    request = urllib.request.Request(url, method="HEAD", headers={"Accept": ACCEPT})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    with _opener(insecure).open(request, timeout=TIMEOUT) as response:
        digest = response.headers.get("Docker-Content-Digest")
        found = _answer(int(response.status))
        valid = isinstance(digest, str) and re.fullmatch(DIGEST, digest) is not None
        return Answer(found.presence, found.why, digest if valid else None)


def _said(err: Exception) -> str:
    """An error's words, without urllib's `<urlopen error ...>` around them."""
    return str(err.reason) if isinstance(err, urllib.error.URLError) else str(err)


def _answer(code: int) -> Answer:
    if code == 200:
        return Answer(Presence.PRESENT)
    if code == 404:
        return Answer(Presence.MISSING, "the registry has no such manifest")
    return Answer(Presence.UNREACHABLE, f"the registry answered HTTP {code}")


def _with_token(url: str, challenge: str, insecure: bool) -> Answer:
    """An anonymous token from the realm the registry names (Docker's token protocol), over
    https (http with --insecure) only: refused_scheme."""
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if not challenge.lower().startswith("bearer") or "realm" not in fields:
        return Answer(Presence.UNREACHABLE, "the registry wants credentials (not supported yet)")
    realm = fields["realm"]
    why = refused_scheme(realm, insecure)
    if why:
        return Answer(Presence.UNREACHABLE, why)
    query = urllib.parse.urlencode({k: v for k, v in fields.items() if k != "realm"})
    joiner = "&" if urllib.parse.urlsplit(realm).query else "?"
    try:
        with _opener(insecure).open(f"{realm}{joiner}{query}", timeout=TIMEOUT) as answer:
            body = json.loads(answer.read(TOKEN_BODY_LIMIT))
        if not isinstance(body, dict):
            return Answer(Presence.UNREACHABLE, "the token realm answered no JSON object")
        token = body.get("token") or body.get("access_token")
        return _head(url, str(token), insecure)
    except urllib.error.HTTPError as err:
        return _answer(err.code) if err.code != 401 else Answer(Presence.UNREACHABLE, "denied")
    except (OSError, ValueError) as err:
        return Answer(Presence.UNREACHABLE, _said(err))
