"""The harness's real node leaves this host as it found it, even when its test run dies.

A real node (tests/harness/realnode.py) changes the host: a bridge, iptables rules, cgroups, the
kubelet's sysctls, and containerd's shims and pods outlive the kubelet. `python -m tests.harness
up --real-node` starts one with a pod on it and is killed with SIGKILL, as a test run that dies
would be: no teardown runs. What it left must be there (else this test proves nothing) and must
be gone after the sweep the next real node, or `python -m tests.harness clean-host`, runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import host
from tests.harness.module import ROOT, wait_until
from tests.harness.realnode import ROLE_LABEL, SANDBOX_IMAGE

pytestmark = pytest.mark.integration

READY = re.compile(r"^real node: (?P<name>\S+) \(slot (?P<slot>\d+)\)", re.M)
KUBECONFIG = re.compile(r"^export KUBECONFIG=(?P<path>\S+)", re.M)


def _left_behind(slot: host.Slot) -> dict[str, object]:
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    return {
        "bridge": Path(f"/sys/class/net/{slot.bridge}").exists(),
        "rules": [line for line in rules.splitlines() if slot.tag in line],
        "cgroups": [str(h / slot.tag) for h in host.CGROUP_FS.iterdir() if (h / slot.tag).exists()],
        "processes": sorted(host.slot_pids(slot)),
    }


@pytest.fixture
def dead_run(tmp_path: Path) -> Iterator[tuple[host.Slot, str]]:
    """A harness with a real node and a running pod, killed with SIGKILL."""
    out = tmp_path / "up.log"
    with out.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.harness", "up", "--real-node", "--nodes",
             "--workdir", str(tmp_path / "cluster")],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        ready = wait_until(lambda: READY.search(out.read_text()) or process.poll(), 120,
                           "the real node up")  # fmt: skip
        assert isinstance(ready, re.Match), out.read_text()[-3000:]
        kubeconfig = KUBECONFIG.search(out.read_text())
        assert kubeconfig is not None
        _run_pod(Path(kubeconfig["path"]))
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        yield host.Slot(int(ready["slot"])), ready["name"]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def _run_pod(kubeconfig: Path) -> None:
    kubectl = [str(ROOT / "tools" / "bin" / "kubectl"), f"--kubeconfig={kubeconfig}"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "left", "namespace": "default", "labels": {ROLE_LABEL: "true"}},
           "spec": {"containers": [{"name": "c", "image": SANDBOX_IMAGE,
                                    "imagePullPolicy": "Never"}]}}  # fmt: skip
    subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(pod), text=True, check=True,
                   capture_output=True)  # fmt: skip

    def running() -> bool:
        got = subprocess.run([*kubectl, "get", "pod", "left", "-o", "jsonpath={.status.phase}"],
                             capture_output=True, text=True, check=False)  # fmt: skip
        return got.stdout == "Running"

    wait_until(running, 60, "the pod Running on the real node")


def test_a_killed_run_leaves_nothing_after_the_sweep(dead_run: tuple[host.Slot, str]) -> None:
    slot, _ = dead_run
    left = _left_behind(slot)
    print(f"left behind by the killed run: {left}")
    for what in ("bridge", "rules", "cgroups", "processes"):  # else nothing is tested here
        assert left[what], f"a killed run leaves its {what}: {left}"
    swept = host.sweep_all()
    assert slot.index in swept
    assert _left_behind(slot) == {"bridge": False, "rules": [], "cgroups": [], "processes": []}
    if not host.any_slot_held():  # else another worker's node still needs them
        assert not (host.STATE_DIR / "sysctls.json").exists(), "the sysctls were put back"
