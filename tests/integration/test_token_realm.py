"""`kyma-gpu images --check` follows a registry's token realm over https only (http with
--insecure), against a real HTTP server on 127.0.0.1 (issue 43, point 5).

The server plays a registry whose manifests need a bearer token: a HEAD without the token gets
401 and the challenge a test sets. Before the fix the check opened any realm with urllib's
default handlers: `file://<path>#` (the `#` turns the query into a fragment) read a local file
and sent its token to the registry as `Authorization: Bearer ...`. The server records every
request, so a test sees what was sent. Needs no cluster.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kyma_gpu_tools.cli import main
from kyma_gpu_tools.registry import Presence, presence, refused_scheme

pytestmark = pytest.mark.integration

TOKEN = "good-token"
SECRET = "secret-token-from-a-local-file"


@dataclass
class Seen:
    """One request as the server got it."""

    method: str
    path: str
    host: str
    headers: dict[str, str]


@dataclass
class FakeRegistry:
    server: ThreadingHTTPServer
    challenge: str = ""
    seen: list[Seen] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def sent(self) -> str:
        """Everything the server received, as one text."""
        return "\n".join(f"{s.method} {s.path} {s.headers}" for s in self.seen)


class _Handler(BaseHTTPRequestHandler):
    registry: FakeRegistry

    def _record(self) -> None:
        headers = dict(self.headers.items())
        seen = Seen(self.command, self.path, self.headers.get("Host", ""), headers)
        self.registry.seen.append(seen)

    def do_HEAD(self) -> None:
        self._record()
        authorized = self.headers.get("Authorization") == f"Bearer {TOKEN}"
        if self.path.startswith("/v2/landed/"):
            self._answer(200)
        elif not authorized:
            self._answer(401, {"WWW-Authenticate": self.registry.challenge})
        elif self.path.startswith("/v2/moved/"):
            self._redirect(f"http://localhost:{self.registry.port}/v2/landed/manifests/v1")
        else:
            self._answer(200)

    def do_GET(self) -> None:
        self._record()
        if self.path.startswith("/token"):
            self._answer(200, body=json.dumps({"token": TOKEN}).encode())
        elif self.path.startswith("/v2/landed/"):  # urllib follows a HEAD's redirect with GET
            self._answer(200)
        elif self.path.startswith("/to-ftp"):
            self._redirect(f"ftp://127.0.0.1:{self.registry.port}/token")
        else:
            self._answer(404)

    def _redirect(self, where: str) -> None:
        self._answer(307, {"Location": where})

    def _answer(self, code: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def registry(server: ThreadingHTTPServer) -> FakeRegistry:
    fake = FakeRegistry(server)
    _Handler.registry = fake
    return fake


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token.json"
    path.write_text(json.dumps({"token": SECRET}))
    return path


def _data_realm() -> str:
    encoded = base64.b64encode(json.dumps({"token": SECRET}).encode()).decode()
    return f"data:application/json;base64,{encoded}#"


@pytest.mark.parametrize(
    ("realm", "scheme"),
    [
        pytest.param("file://{token_file}#", "scheme file:", id="file-token"),
        pytest.param("file:///etc/passwd", "scheme file:", id="file-passwd"),
        pytest.param(_data_realm(), "scheme data:", id="data"),
        pytest.param("ftp://127.0.0.1:{port}/token", "scheme ftp:", id="ftp"),
        pytest.param("/token", "no scheme (a relative URL)", id="relative"),
    ],
)
def test_a_realm_of_another_scheme_is_refused_and_nothing_is_sent(
    registry: FakeRegistry, token_file: Path, realm: str, scheme: str
) -> None:
    named = realm.format(token_file=token_file, port=registry.port)
    registry.challenge = f'Bearer realm="{named}",service="x",scope="repository:a/b:pull"'
    found, why = presence(f"{registry.host}/a/b:v1", insecure=True)
    assert SECRET not in registry.sent()
    assert [(s.method, s.path) for s in registry.seen] == [("HEAD", "/v2/a/b/manifests/v1")]
    assert "Authorization" not in registry.seen[0].headers
    assert found is Presence.UNREACHABLE, why
    assert f"the registry names a token realm with {scheme}" in why, why
    assert "nothing was read or sent there" in why, why


def test_the_check_names_the_refused_realm_for_every_image(
    registry: FakeRegistry, token_file: Path
) -> None:
    """`kyma-gpu images --mirror <the server> --check --insecure`: every image of the release
    meets the file realm; each row says so, and no request carries the file's token."""
    registry.challenge = f'Bearer realm="file://{token_file}#",service="x"'
    out = io.StringIO()
    code = main(["images", "--mirror", f"{registry.host}/m", "--check", "--insecure"],
                stdin=io.StringIO(), stdout=out, stderr=io.StringIO())  # fmt: skip
    *rows, total = out.getvalue().splitlines()
    checked = [row for row in rows if not row.startswith(f"{Presence.UNKNOWN}\t")]  # <kernel>
    assert code == 1, out.getvalue()
    assert len(checked) > 5, rows
    assert all("token realm with scheme file:" in row for row in checked), rows
    assert total == f"{len(rows)} images, {len(checked)} missing or unreachable"
    assert SECRET not in registry.sent()
    assert {s.method for s in registry.seen} == {"HEAD"}


@pytest.mark.parametrize("realm_host", ["127.0.0.1", "localhost"], ids=["same-host", "other-host"])
def test_an_http_realm_with_insecure_still_gives_the_token(
    registry: FakeRegistry, realm_host: str
) -> None:
    """As before: the realm gets the challenge's service and scope, the registry the token;
    a realm on another host (Docker Hub's auth.docker.io) works too."""
    realm = f"http://{realm_host}:{registry.port}/token"
    registry.challenge = f'Bearer realm="{realm}",service="x",scope="repository:a/b:pull"'
    found, why = presence(f"{registry.host}/a/b:v1", insecure=True)
    assert found is Presence.PRESENT, why
    token = next(s for s in registry.seen if s.path.startswith("/token"))
    assert token.path == "/token?service=x&scope=repository%3Aa%2Fb%3Apull", token
    assert "Authorization" not in token.headers
    assert registry.seen[-1].headers.get("Authorization") == f"Bearer {TOKEN}"


def test_a_redirect_to_another_scheme_is_refused(registry: FakeRegistry) -> None:
    registry.challenge = f'Bearer realm="http://{registry.host}/to-ftp",service="x"'
    found, why = presence(f"{registry.host}/a/b:v1", insecure=True)
    assert found is Presence.UNREACHABLE, why
    assert "the registry redirects with scheme ftp:" in why, why
    assert TOKEN not in registry.sent()


def test_the_token_does_not_follow_a_redirect_to_another_host(registry: FakeRegistry) -> None:
    registry.challenge = f'Bearer realm="http://{registry.host}/token",service="x"'
    found, why = presence(f"{registry.host}/moved/b:v1", insecure=True)
    assert found is Presence.PRESENT, why
    landed = next(s for s in registry.seen if s.path.startswith("/v2/landed/"))
    assert landed.host == f"localhost:{registry.port}", landed
    assert "Authorization" not in landed.headers, landed


@pytest.mark.parametrize(
    ("realm", "insecure", "followed"),
    [
        ("https://auth.docker.io/token", False, True),
        ("HTTPS://auth.docker.io/token", False, True),
        ("http://auth.example/token", False, False),
        ("http://auth.example/token", True, True),
        ("file:///etc/passwd", True, False),
        ("//auth.example/token", True, False),
    ],
)
def test_which_realms_are_followed(realm: str, insecure: bool, followed: bool) -> None:
    assert (refused_scheme(realm, insecure) == "") is followed
