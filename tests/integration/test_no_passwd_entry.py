"""The manager starts as containerd runs it: with no passwd entry for its user.

containerd, the runtime of every Gardener node, runs the image's `USER 65532:65532` as it is;
podman and Docker write a passwd entry for that uid into the container, containerd does not.
kopf's default identity asks for the login name (getpass.getuser()), which raises KeyError
for a uid without an entry, so the manager crash-looped on a real node. Here `python -m kyma_gpu`
runs in a mount namespace whose /etc/passwd and /etc/group are empty (the interpreter and the
checkout stay readable, which a switch to uid 65532 would not give: the Python of the test
machines lives under /root), with no login name in its environment and no POD_NAME, and must
serve its liveness endpoint and stop cleanly. tests/e2e/test_plain_install.py and
test_klm.py run the image itself under the real kubelet on containerd.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.binaries import host_tool
from tests.harness.cluster import LocalCluster
from tests.harness.module import ROOT, install_crds, wait_until
from tests.harness.procs import free_port, http_ok

pytestmark = pytest.mark.integration

LOGIN_VARIABLES = ("LOGNAME", "USER", "LNAME", "USERNAME", "POD_NAME", "POD_ID")
WITHOUT_ENTRIES = (
    'mount --bind "$0/passwd" /etc/passwd && mount --bind "$0/passwd" /etc/group'
    ' && mount --bind "$0/nsswitch.conf" /etc/nsswitch.conf && exec "$@"'
)
"""As in the image: no entry for the user, and only the files as the source of names (the
host's nss-systemd would make one up for root)."""


def _without_passwd(etc: Path, *argv: str) -> list[str]:
    """``argv`` in a private mount namespace where /etc/passwd and /etc/group are empty."""
    (etc / "passwd").write_text("")
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\n")
    unshare = [str(host_tool("unshare")), "--mount", "--propagation", "private"]
    return [*unshare, "sh", "-c", WITHOUT_ENTRIES, str(etc), *argv]


def test_the_manager_starts_without_a_passwd_entry(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in LOGIN_VARIABLES}
    lookup = "import getpass; getpass.getuser()"
    probe = subprocess.run(_without_passwd(etc, sys.executable, "-c", lookup), env=env,
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert "uid not found" in probe.stderr, f"the namespace hides no entry: {probe.stderr}"
    install_crds(local_cluster)
    port = free_port()
    env.update(HOME=str(tmp_path), KUBECONFIG=str(local_cluster.kubeconfig),
               PYTHONUNBUFFERED="1")  # fmt: skip
    log_path = local_cluster.log_dir / "operator-no-passwd.log"
    argv = [sys.executable, "-m", "kyma_gpu", "--standalone",
            "--liveness", f"http://127.0.0.1:{port}/healthz"]  # fmt: skip
    with log_path.open("ab") as log:
        process = subprocess.Popen(_without_passwd(etc, *argv), env=env, stdout=log,
                                   stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip
    try:

        def live() -> bool:
            if process.poll() is not None:
                raise AssertionError(
                    f"the manager exited ({process.returncode}):\n{log_path.read_text()[-3000:]}"
                )
            return http_ok(f"http://127.0.0.1:{port}/healthz")

        wait_until(live, 60, "the manager's liveness endpoint, without a passwd entry")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(20)
    assert process.returncode == 0, log_path.read_text()[-3000:]
    assert "getpwuid" not in log_path.read_text()
