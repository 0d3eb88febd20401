"""Kyma dashboard (Busola) on a local cluster, and Debian's Chromium to look at it.

tools/dashboard.sh builds the real dashboard from ../shared/vendor/busola into the tools cache
(`make tools`; tools/bin/dashboard links to it). `Dashboard` runs it the way Busola's image
does (`Dashboard.for_cluster` for a test's cluster, `python -m tests.harness dashboard` for
`make dashboard`): its backend (`node backend-production.js`, IS_DOCKER=true) serves the
frontend and forwards the frontend's API calls to the server the kubeconfig names, with the
kubeconfig's credentials: the dashboard has no rights of its own, it reads and writes as that
user. It runs from a folder of its own (under the cluster's workdir): the build's files linked,
and what a run adds, a kubeconfig the frontend loads (`?kubeconfigID=`, Busola's KUBECONFIG_ID
feature) and the backend's config.yaml. That one switch matters: the API server listens on
127.0.0.1, and Busola's backend refuses private addresses unless ALLOW_PRIVATE_IPS is on. Its
log is logs/dashboard.log; the cluster stops it and shows its log tail in a failure report.

`Browser(log_path, profile)` is Debian's `chromium` (make host installs it), driven through
Playwright's Python package with the flags this machine needs, in a new, empty profile; what
the page logs to its console, its errors and the requests that failed go to `log_path`
(logs/browser.log), which a failure report shows too.

A dashboard or a browser that is not there is a MissingBinaryError that says why, with the
tail of the dashboard's build log when a build failed: never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import yaml

from .binaries import REPO_ROOT, MissingBinaryError, tools_bin_dir
from .cluster import LocalCluster
from .procs import ManagedProcess, free_port, tail

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, ConsoleMessage, Page, Playwright, Request

CHROMIUM = Path(os.environ.get("KYMA_GPU_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip
"""What headless Chromium needs on this machine (without the last four it waits on connections
the sandbox refuses)."""
EXTENSION = REPO_ROOT / "config" / "ui-extension"
"""The Gpu's extension, as config/default ships it (kustomize)."""
KUBECONFIG_NAME = "kyma-gpu-local.yaml"
BACKEND_CONFIG = {"config": {"features": {"ALLOW_PRIVATE_IPS": {"isEnabled": True}}}}
FRONTEND_CONFIG: dict[str, Any] = {"config": {"features": {}}}
"""core-ui/config/config.yaml: Busola's defaults stand (its image has an empty one too)."""
START_SECONDS = 60.0


def dashboard_build() -> Path:
    """The built dashboard (tools/bin/dashboard), or MissingBinaryError with the reason and,
    when a build failed, the tail of its log."""
    link = tools_bin_dir() / "dashboard"
    app = link / "app"
    if (app / "backend-production.js").is_file() and (link / "bin" / "node").is_file():
        return link.resolve()
    message = f"Kyma dashboard is not built ({link}): run `make tools` (tools/dashboard.sh)"
    log = _build_log()
    if log is not None and log.is_file():
        message += f"; the last lines of its build log {log}:\n{tail(log, 40)}"
    raise MissingBinaryError(message)


def _build_log() -> Path | None:
    """The log tools/dashboard.sh writes for the current sources, if it can say where."""
    try:
        script = REPO_ROOT / "tools" / "dashboard.sh"
        printed = subprocess.run(["bash", str(script), "--print"], capture_output=True,
                                 text=True, check=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(printed.stdout.strip() + ".log")


def chromium() -> Path:
    if not CHROMIUM.is_file():
        raise MissingBinaryError(
            f"{CHROMIUM} is not there: `make host` installs Debian's chromium (apt-get)"
        )
    return CHROMIUM


class Dashboard:
    """Busola's backend and frontend for one kubeconfig, as its image runs them, from
    ``folder``, logging to ``log_path``. ``for_cluster`` puts both in a LocalCluster's workdir
    and registers the process with it (stopped with it, its log in a failure's report)."""

    def __init__(self, kubeconfig: Path, folder: Path, log_path: Path, port: int = 0) -> None:
        self.kubeconfig = kubeconfig
        self.folder = folder
        self.log_path = log_path
        self.port = port
        self.build = dashboard_build()
        self.cluster: LocalCluster | None = None
        self.process: ManagedProcess | None = None

    @classmethod
    def for_cluster(cls, cluster: LocalCluster, kubeconfig: Path | None = None) -> Dashboard:
        dashboard = cls(kubeconfig or cluster.kubeconfig, cluster.workdir / "dashboard",
                        cluster.log_dir / "dashboard.log")  # fmt: skip
        dashboard.cluster = cluster
        return dashboard

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def login_url(self) -> str:
        """Opens the cluster of the kubeconfig (Busola's `?kubeconfigID=`)."""
        return f"{self.url}/?kubeconfigID={KUBECONFIG_NAME}"

    def cluster_url(self, path: str) -> str:
        """A view of the cluster: Busola names it by the kubeconfig's context."""
        context = yaml.safe_load(self.kubeconfig.read_text())["current-context"]
        return f"{self.url}/cluster/{context}/{path}"

    def start(self) -> Dashboard:
        app = self._lay_out()
        self.port = self.port or free_port()
        env = {"IS_DOCKER": "true", "NODE_ENV": "production", "PORT": str(self.port),
               "ADDRESS": "127.0.0.1"}  # fmt: skip
        self.process = ManagedProcess(
            "dashboard", [str(self.build / "bin" / "node"), "backend-production.js"],
            self.log_path, env=env, cwd=app,
        )  # fmt: skip
        self.process.start()
        if self.cluster is not None:
            self.cluster.register(self.process)
        self.process.wait_healthy(self._serves, START_SECONDS, "serving the dashboard")
        return self

    def _lay_out(self) -> Path:
        """The run's folder: the build's files linked, its own kubeconfig and configs. The
        backend's own file is copied: node resolves a linked main module to where it lies,
        and it serves core-ui/ from next to itself."""
        app, build = self.folder / "app", self.build / "app"
        shutil.rmtree(self.folder, ignore_errors=True)
        (app / "core-ui").mkdir(parents=True)
        for name in ("node_modules", "settings", "environments", "certs.pem"):
            (app / name).symlink_to(build / name)
        shutil.copy2(build / "backend-production.js", app / "backend-production.js")
        for entry in (build / "core-ui").iterdir():
            if entry.name not in ("kubeconfig", "config"):
                (app / "core-ui" / entry.name).symlink_to(entry)
        _write(app / "config" / "config.yaml", BACKEND_CONFIG)
        _write(app / "core-ui" / "config" / "config.yaml", FRONTEND_CONFIG)
        (app / "core-ui" / "kubeconfig").mkdir()
        shutil.copy2(self.kubeconfig, app / "core-ui" / "kubeconfig" / KUBECONFIG_NAME)
        return app

    def _serves(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/", timeout=2) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> Dashboard:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _write(path: Path, content: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(content), encoding="utf-8")


class Browser:
    """Debian's Chromium, headless, in a new profile, one page; its console to ``log_path``."""

    def __init__(self, log_path: Path, profile: Path, size: tuple[int, int] = (1600, 1000)) -> None:
        self.log_path = log_path
        self.profile = profile
        self.size = size
        self._playwright: Playwright | None = None
        self._context: BrowserContext | None = None
        self.page: Page

    def start(self) -> Browser:
        from playwright.sync_api import sync_playwright

        executable = chromium()
        shutil.rmtree(self.profile, ignore_errors=True)
        self.profile.mkdir(parents=True)
        self._playwright = sync_playwright().start()
        width, height = self.size
        self._context = self._playwright.chromium.launch_persistent_context(
            str(self.profile), executable_path=str(executable), headless=True,
            args=list(CHROMIUM_FLAGS), viewport={"width": width, "height": height},
        )  # fmt: skip
        self.page = self._context.pages[0] if self._context.pages else self._context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", self._page_error)
        self.page.on("requestfailed", self._failed)
        return self

    def _console(self, message: ConsoleMessage) -> None:
        self._log(f"console {message.type}: {message.text}")

    def _page_error(self, error: Exception) -> None:
        self._log(f"page error: {error}")

    def _failed(self, request: Request) -> None:
        self._log(f"request failed: {request.method} {request.url}: {request.failure}")

    def _log(self, line: str) -> None:
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(line.replace("\n", " | ")[:2000] + "\n")

    def stop(self) -> None:
        if self._context is not None:
            self._context.close()
        if self._playwright is not None:
            self._playwright.stop()

    def __enter__(self) -> Browser:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
