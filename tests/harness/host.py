"""What a real node changes on this host, and how every change is undone.

A real kubelet and containerd (realnode.py) change the host: a bridge for the pods, iptables
rules (ours, the kubelet's KUBE-* chains), sysctls the kubelet and the bridge plugin set
(``SYSCTLS``), and cgroups. Their files stay in a private mount namespace (realnode.py), so
mounts never reach the host. Everything else is tracked here so that it is undone even when a
test run dies without cleaning up:

- A node runs in a *slot* (``claim_slot``): an exclusive ``flock`` on
  ``<STATE_DIR>/slot-<n>.lock``, held until the claiming process ends, however it ends. Each
  slot has its own bridge, pod subnet, cgroup root and iptables comment, so parallel test
  workers never collide. Claiming a slot first sweeps what a dead owner left in it: its
  processes (by cgroup), its bridge, its rules, its cgroups.
- The sysctls and the kubelet's KUBE-* chains are shared by every node of the host. The first
  node saves the sysctls' values (``<STATE_DIR>/sysctls.json``); whoever releases the last
  slot, or finds no slot held when it claims one, restores them and removes the chains.

``python -m tests.harness clean-host`` runs the same sweep by hand.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STATE_DIR = Path(os.environ.get("KYMA_GPU_NODE_STATE") or "/run/kyma-gpu-real-nodes")
SLOTS = 16
CGROUP_FS = Path("/sys/fs/cgroup")
SYSCTLS = (
    "vm.overcommit_memory",
    "kernel.panic",
    "kernel.panic_on_oops",
    "net.ipv4.ip_forward",
)
"""What the kubelet (the first three, at start) and the CNI bridge plugin (forwarding, for the
pods' gateway) set on the host."""
KUBELET_CHAIN = re.compile(r"^KUBE-")
MOUNT_POINTS = ("/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/run/containerd")
"""Paths of the kubelet and containerd that cannot be configured (the device-plugin socket's
directory above all): each node's mount namespace has an empty tmpfs there (realnode.py).
Those the host lacks are made while a node runs."""


class HostError(RuntimeError):
    """A host change failed, or no real node can run here."""


@dataclass(frozen=True)
class Slot:
    """One real node's share of the host."""

    index: int

    @property
    def tag(self) -> str:
        """The comment on this slot's iptables rules and the name of its cgroup root."""
        return f"kyma-gpu-node-{self.index}"

    @property
    def bridge(self) -> str:
        return f"kgpu{self.index}"

    @property
    def subnet(self) -> str:
        return f"10.250.{self.index}.0/24"

    @property
    def gateway(self) -> str:
        """The bridge's address on the host: the pods' gateway and the Node's InternalIP."""
        return f"10.250.{self.index}.1"

    @property
    def cgroup_root(self) -> str:
        return f"/{self.tag}"

    @property
    def run_dir(self) -> Path:
        """Where containerd's sockets go: a unix socket's path has at most 104 bytes, more than
        a pytest temp dir leaves."""
        return STATE_DIR / self.tag


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if check and result.returncode != 0:
        raise HostError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


# -- slots -------------------------------------------------------------------------------


class SlotClaim:
    """This process's hold on a slot: the open, flocked lock file."""

    def __init__(self, slot: Slot, fd: int) -> None:
        self.slot = slot
        self._fd: int | None = fd

    def release(self) -> None:
        """Undo this slot's changes, drop the lock, and restore the shared state if no other
        slot is held."""
        if self._fd is None:
            return
        sweep_slot(self.slot)
        os.close(self._fd)
        self._fd = None
        with _shared_lock():
            if not any_slot_held():
                restore_shared()


def _lock_path(index: int) -> Path:
    return STATE_DIR / f"slot-{index}.lock"


def _try_lock(index: int) -> int | None:
    """The slot's lock file, flocked by this call (an open fd), or None if someone holds it."""
    fd = os.open(_lock_path(index), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def claim_slot() -> SlotClaim:
    """The first free slot, swept of what a dead owner left; saves the shared state first."""
    if os.geteuid() != 0:
        raise HostError("a real node runs as root (containerd, iptables, cgroups, mounts)")
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    for index in range(SLOTS):
        fd = _try_lock(index)
        if fd is None:
            continue
        claim = SlotClaim(Slot(index), fd)
        with _shared_lock():
            if not any_slot_held(but=index):
                restore_shared()  # a dead run's leftovers, before saving the true values
            save_shared()
        sweep_slot(claim.slot)
        return claim
    raise HostError(f"all {SLOTS} real-node slots of this host are held")


def any_slot_held(but: int | None = None) -> bool:
    """True if a slot other than ``but`` is held, by another process or by this one (a second
    flock on another open file description of the same file is refused too)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    for index in range(SLOTS):
        if index == but:
            continue
        fd = _try_lock(index)
        if fd is None:
            return True
        os.close(fd)
    return False


@contextlib.contextmanager
def _shared_lock() -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(STATE_DIR / "shared.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- the shared state: sysctls and the kubelet's chains ---------------------------------


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def save_shared() -> None:
    """Record the sysctls once, before any node changes them; make the missing mount points."""
    saved = STATE_DIR / "sysctls.json"
    if not saved.exists():
        values = {name: _sysctl_path(name).read_text().strip() for name in SYSCTLS}
        saved.write_text(json.dumps(values, indent=1), encoding="utf-8")
    made = STATE_DIR / "mount-points.json"
    if not made.exists():
        missing = [path for path in MOUNT_POINTS if not Path(path).exists()]
        made.write_text(json.dumps(missing), encoding="utf-8")
        for path in missing:
            Path(path).mkdir(parents=True)


def restore_shared() -> None:
    """Put the saved sysctls back, remove the mount points that were made and the kubelet's
    KUBE-* chains."""
    saved = STATE_DIR / "sysctls.json"
    if saved.exists():
        for name, value in json.loads(saved.read_text(encoding="utf-8")).items():
            _sysctl_path(name).write_text(f"{value}\n")
        saved.unlink()
    made = STATE_DIR / "mount-points.json"
    if made.exists():
        for path in json.loads(made.read_text(encoding="utf-8")):
            with contextlib.suppress(OSError):
                Path(path).rmdir()
        made.unlink()
    for tool in ("iptables", "ip6tables"):
        remove_chains(tool, KUBELET_CHAIN)


@dataclass(frozen=True)
class Rule:
    """One rule of an ``iptables-save`` dump: its table and its spec after ``-A``."""

    table: str
    spec: str

    @property
    def target(self) -> str:
        found = re.search(r"(?:^|\s)-j (\S+)", self.spec)
        return found.group(1) if found else ""

    def delete_args(self) -> list[str]:
        return ["-t", self.table, "-D", *shlex.split(self.spec)]


def parse_save(dump: str) -> tuple[list[Rule], list[tuple[str, str]]]:
    """The rules and the (table, chain) pairs of an ``iptables-save`` dump."""
    rules: list[Rule] = []
    chains: list[tuple[str, str]] = []
    table = ""
    for line in dump.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":"):
            chains.append((table, line[1:].split()[0]))
        elif line.startswith("-A "):
            rules.append(Rule(table, line[3:]))
    return rules, chains


def tagged(rules: list[Rule], tag: str) -> list[Rule]:
    """The rules whose comment is exactly ``tag`` (kyma-gpu-node-1 is not kyma-gpu-node-10)."""
    ours = re.compile(rf'--comment "?{re.escape(tag)}"?(\s|$)')
    return [rule for rule in rules if ours.search(rule.spec)]


def remove_chains(tool: str, names: re.Pattern[str]) -> None:
    """Every jump to a chain matching ``names``, then those chains, in every table."""
    rules, chains = parse_save(run(f"{tool}-save", check=False).stdout)
    for rule in rules:
        if names.match(rule.target):
            run(tool, *rule.delete_args(), check=False)
    ours = [(table, chain) for table, chain in chains if names.match(chain)]
    for table, chain in ours:
        run(tool, "-t", table, "-F", chain, check=False)
    for table, chain in ours:
        run(tool, "-t", table, "-X", chain, check=False)


# -- one slot's own changes --------------------------------------------------------------


def sweep_slot(slot: Slot) -> None:
    """Undo what a node in ``slot`` changed: kill its processes (its cgroups' members and
    its containerd's shims), delete its rules, its bridge and its cgroups."""
    kill_slot_processes(slot)
    _delete_tagged_rules("iptables", slot.tag)
    if Path(f"/sys/class/net/{slot.bridge}").exists():
        run("ip", "link", "delete", slot.bridge, check=False)
    _remove_cgroups(slot)
    shutil.rmtree(slot.run_dir, ignore_errors=True)


def _delete_tagged_rules(tool: str, tag: str) -> None:
    rules, _ = parse_save(run(f"{tool}-save", check=False).stdout)
    for rule in tagged(rules, tag):
        run(tool, *rule.delete_args(), check=False)


def slot_pids(slot: Slot) -> set[int]:
    """Every process of the slot: the members of its cgroups (pods, containers) and the
    processes whose command line names its directory (containerd, its shims, the kubelet)."""
    pids: set[int] = set()
    for procs in (CGROUP_FS / "pids" / slot.tag).rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            pids |= {int(p) for p in procs.read_text().split()}
    marker = f"/{slot.tag}/".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker in (proc / "cmdline").read_bytes():
                pids.add(int(proc.name))
    pids.discard(os.getpid())
    return pids


def kill_slot_processes(slot: Slot, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (pids := slot_pids(slot)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _remove_cgroups(slot: Slot) -> None:
    for hierarchy in CGROUP_FS.iterdir():
        root = hierarchy / slot.tag
        if not root.is_dir():
            continue
        for directory in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir():
                with contextlib.suppress(OSError):
                    directory.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


def make_cgroup_root(slot: Slot) -> None:
    """The kubelet's --cgroup-root must exist in every hierarchy."""
    for hierarchy in CGROUP_FS.iterdir():
        if hierarchy.is_dir() and not hierarchy.is_symlink():
            (hierarchy / slot.tag).mkdir(exist_ok=True)
    cpuset = CGROUP_FS / "cpuset"
    for name in ("cpuset.cpus", "cpuset.mems"):  # a new v1 cpuset starts empty: no task fits
        if (cpuset / name).exists() and not (cpuset / slot.tag / name).read_text().strip():
            (cpuset / slot.tag / name).write_text((cpuset / name).read_text())


def sweep_all() -> list[int]:
    """Sweep every slot no live process holds; restore the shared state if none is held.
    Returns the slots swept."""
    swept = []
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    for index in range(SLOTS):
        fd = _try_lock(index)
        if fd is None:
            continue
        try:
            sweep_slot(Slot(index))
            swept.append(index)
        finally:
            os.close(fd)
    with _shared_lock():
        if not any_slot_held():
            restore_shared()
    return swept
