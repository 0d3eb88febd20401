"""Where the Go-built test binaries live, and a clear error when one is missing.

tools/build.sh builds etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl, the kubelet, kwok, nfd-master and nfd-worker, the pause binary,
source-controller, helm-controller, helm, the flux CLI and the rest (tools/versions.env)
into a user-level cache and links them into ``<repo>/tools/bin``. The
harness only ever runs binaries from there, never whatever happens to be on
PATH, so the versions in tools/versions.env are the versions under test.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The project's root: tests/harness/binaries.py -> tests/harness -> tests -> root."""

TOOLS_BIN = REPO_ROOT / "tools" / "bin"
VERSIONS_FILE = REPO_ROOT / "tools" / "versions.env"
SHARED_DIR = REPO_ROOT.parent / "shared"
"""Material shared by every checkout (charts, reference data), read-only in CI."""

CLUSTER_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)
FLUX_BINARIES = ("source-controller", "helm-controller")
FLUX_CLI = "flux"
"""The real flux CLI (FLUX_CLI_VERSION, built from tools/flux): ``make demo`` and
tests/e2e/test_flux_cli.py run ``flux get ...`` with it against the local cluster."""


class MissingBinaryError(RuntimeError):
    """A binary the harness needs is not in tools/bin (or a host tool is not on PATH)."""


def tools_bin_dir() -> Path:
    """The directory holding the test binaries; KYMA_GPU_TOOLS_BIN overrides it."""
    override = os.environ.get("KYMA_GPU_TOOLS_BIN")
    return Path(override) if override else TOOLS_BIN


def binary(name: str) -> Path:
    """Absolute path of the test binary ``name`` from tools/bin.

    Raises MissingBinaryError naming the binary and how to build it.
    """
    path = tools_bin_dir() / name
    if not path.exists():
        raise MissingBinaryError(
            f"test binary {name!r} not found at {path}: "
            "run `make tools` (tools/build.sh) to build it"
        )
    if not os.access(path, os.X_OK):
        raise MissingBinaryError(
            f"test binary {name!r} at {path} is not executable: "
            "run `make tools` (tools/build.sh) to rebuild it"
        )
    return path


def require(*names: str) -> dict[str, Path]:
    """Paths of several binaries; the error lists every missing one at once."""
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in names:
        try:
            found[name] = binary(name)
        except MissingBinaryError:
            missing.append(name)
    if missing:
        raise MissingBinaryError(
            f"test binaries missing from {tools_bin_dir()}: {', '.join(missing)}; "
            "run `make tools` (tools/build.sh) to build them"
        )
    return found


def host_tool(name: str) -> Path:
    """A tool expected on the host PATH (openssl, go), with a clear error if absent."""
    found = shutil.which(name)
    if found is None:
        raise MissingBinaryError(f"{name!r} is not on PATH; the local cluster harness needs it")
    return Path(found)


def tool_versions() -> dict[str, str]:
    """The pinned versions from tools/versions.env (KEY=VALUE lines, # comments)."""
    versions: dict[str, str] = {}
    for raw in VERSIONS_FILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        versions[key.strip()] = value.strip().strip('"').strip("'")
    return versions
