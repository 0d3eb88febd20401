"""One observer process against a cluster that holds the fleet, measured from outside.

Per observer: start to ``ready`` (every Node indexed), CPU until then, peak and settled RSS,
CPU without heartbeats and at a heartbeat rate, optionally the RSS growth per Node added while
it runs, and its API writes over its whole life (audit log). CPU is utime + stime from /proc
(the process's own seconds, whatever else the machine runs); the machine's load average and
how busy its cores were stand next to the numbers that depend on it (wall times, the
heartbeat rate reached).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchmarks.kopf_fleet.report import parse
from benchmarks.scale.common import METADATA, ROOT, TIMEOUT, Metric, Obj, Rest
from benchmarks.scale.fleet import ScaleConfig, create_nodes
from benchmarks.scale.process import AuditTail, Heartbeats, LineTail, Operator
from tests.harness.cluster import LocalCluster

Progress = Callable[[str], None]
ADDED_LABEL = "harness.kyma-gpu.test/added"
"""On the Nodes added while an observer runs (removed before the next one starts)."""
MIB = 1048576


@dataclass(frozen=True)
class Observer:
    """An observer process: ``python -m <module> <args>``."""

    name: str
    module: str
    args: tuple[str, ...] = ()


OBSERVERS = {
    "informer": Observer("informer", "benchmarks.kopf_fleet.informer_observer"),
    "kopf": Observer("kopf", "benchmarks.kopf_fleet.kopf_observer", ("--chunk-size", "250")),
    "kopf-stream": Observer("kopf-stream", "benchmarks.kopf_fleet.kopf_observer", ("--streaming",)),
}


@dataclass
class FleetRun:
    """How one observer is measured."""

    nodes: int
    start_timeout: float = 900.0
    """Start to ready at most (s); then the start is a ``timeout`` and the rest is skipped."""
    step_timeout: float = 300.0
    settle_quiet: float = 10.0
    baseline_seconds: float = 30.0
    heartbeat_rate: float = 70.0
    heartbeat_seconds: float = 60.0
    add_nodes: int = 0
    """Nodes added while the observer runs, its RSS growth per Node measured (0: not done).
    Off by default: 1,000 Nodes added to 1,000 or 5,000 grew no observer's RSS at all (what
    the start's peak freed in pymalloc's arenas took them); the settled RSS between sizes is
    the measure (bench_kopf_fleet.py ``slopes``)."""
    added_octet: int = 181


class Machine:
    """How busy the machine's cores were between two moments (/proc/stat), and its load."""

    def __init__(self) -> None:
        self.mark = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)

    def busy_pct(self) -> float:
        """% of all cores busy since the mark (100 = every core); the mark moves to now."""
        (busy0, total0), (busy1, total1) = self.mark, self._read()
        self.mark = (busy1, total1)
        return round(100 * (busy1 - busy0) / max(total1 - total0, 1), 1)


def load1() -> float:
    return round(os.getloadavg()[0], 1)


class Child:
    """One observer process and what it reported (report.py)."""

    def __init__(self, cluster: LocalCluster, observer: Observer) -> None:
        entry = ("-m", observer.module, *observer.args)
        self.process = Operator(cluster, ROOT, name=f"observer-{observer.name}", entry=entry)
        self.tail = LineTail(self.process.log_path, from_end=True)
        self.reports: dict[str, dict[str, Any]] = {}
        self.nodes = 0

    def start(self) -> float:
        return self.process.start()

    def poll(self, check: bool = True) -> None:
        """Read its new reports; with ``check``, raise if it exited."""
        if check:
            self.process.check_alive()
        for line in self.tail.lines():
            report = parse(line)
            if report is None:
                continue
            self.reports.setdefault(report["event"], report)
            self.nodes = int(report.get("nodes", self.nodes))

    def last_error(self) -> str:
        """The last line of its log at level ERROR (kopf's format), shortened."""
        lines = self.process.log_path.read_text(errors="replace").splitlines()
        errors = [line for line in lines if "[ERROR" in line]
        return errors[-1][:300] if errors else ""

    def wait_nodes(self, wanted: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if self.nodes >= wanted:
                return True
            time.sleep(0.2)
        return False

    def cpu(self) -> float:
        return self.process.cpu_seconds()

    def rss(self) -> tuple[float, float]:
        return self.process.memory_mib()

    def stop(self) -> None:
        self.process.stop()


def wait_ready(child: Child, run: FleetRun, began: float, out: dict[str, Metric],
               details: dict[str, Any], progress: Progress) -> bool:  # fmt: skip
    """Start to the ``ready`` report, at most run.start_timeout or until the process exits; a
    trace of the start's progress every 30 s (Nodes indexed, CPU, RSS) into the details."""
    trace: list[list[float]] = []
    machine, last = Machine(), time.monotonic()
    seen = (0.0, 0.0, 0.0)  # CPU, RSS, peak RSS: /proc/<pid> is gone once it exited
    while "ready" not in child.reports and time.time() - began < run.start_timeout:
        child.poll(check=False)
        if not child.process.alive():
            break
        seen = (child.cpu(), *child.rss())
        if time.monotonic() - last >= 30:
            last = time.monotonic()
            row = [round(time.time() - began), child.nodes, round(seen[0], 1), round(seen[1])]
            trace.append(row)
            progress(
                f"starting: {row[0]}s, {row[1]} Nodes indexed, CPU {row[2]}s, RSS {row[3]} MiB"
            )
        time.sleep(0.1)
    details["start_trace"] = trace
    out["start_load"], out["start_busy_pct"] = load1(), machine.busy_pct()
    started = child.reports.get("started")
    out["imports_s"] = None if started is None else round(started["at"] - began, 2)
    ready = child.reports.get("ready")
    if ready is None:
        not_ready(child, began, seen, out, details, progress)
        return False
    out["start_s"], out["start_cpu_s"] = round(ready["at"] - began, 2), round(ready["cpu"], 2)
    if started is not None:
        out["list_cpu_s"] = round(ready["cpu"] - started["cpu"], 2)
    out["ready_nodes"] = int(ready["nodes"])
    progress(f"ready: {out['start_s']}s, CPU {out['start_cpu_s']}s, {ready['nodes']} Nodes")
    return True


def not_ready(
    child: Child,
    began: float,
    seen: tuple[float, float, float],
    out: dict[str, Metric],
    details: dict[str, Any],
    progress: Progress,
) -> None:
    """A start that timed out, or ended with the process: how far it got, what it cost."""
    took = round(time.time() - began)
    exited = child.process.process.poll() if child.process.process is not None else None
    out["start_s"] = TIMEOUT if exited is None else f"exit {exited} at {took} s"
    out["indexed_at_timeout"] = child.nodes
    out["start_cpu_s"], out["start_peak_rss_mib"] = round(seen[0], 1), round(seen[2], 1)
    if exited is not None:
        details["exit_error"] = out["error"] = child.last_error()
    progress(f"no ready after {took}s ({out['start_s']}): {child.nodes} Nodes indexed")


def settle(child: Child, run: FleetRun) -> tuple[float, float, float]:
    """Wait until the process has been idle (< 2 % of a core) for run.settle_quiet seconds, at
    most run.step_timeout; (RSS, peak RSS) in MiB, and the seconds waited."""
    samples: list[tuple[float, float]] = []
    began = time.monotonic()
    while time.monotonic() - began < run.step_timeout:
        child.poll()
        now, cpu = time.monotonic(), child.cpu()
        samples = [s for s in samples if now - s[0] <= run.settle_quiet] + [(now, cpu)]
        span = now - samples[0][0]
        if span >= run.settle_quiet - 1 and (cpu - samples[0][1]) / span < 0.02:
            break
        time.sleep(1.0)
    rss, hwm = child.rss()
    return round(rss, 1), round(hwm, 1), round(time.monotonic() - began, 1)


def cpu_over(child: Child, work: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, the observer's CPU seconds) while ``work`` runs."""
    cpu0, began = child.cpu(), time.monotonic()
    work()
    return time.monotonic() - began, child.cpu() - cpu0


def heartbeat_windows(
    child: Child, rest: Rest, names: list[str], run: FleetRun, out: dict[str, Metric],
    progress: Progress,
) -> None:  # fmt: skip
    """A window without heartbeats (the observer's own idle cost), then run.heartbeat_rate
    Node heartbeats a second: the observer's CPU as % of one core in each, the rate reached,
    the machine's load; then the CPU until the observer is idle again (a backlog it caught up)."""
    base_pct = 0.0
    if run.baseline_seconds > 0:
        took, cpu = cpu_over(child, lambda: time.sleep(run.baseline_seconds))
        base_pct = out["baseline_cpu_pct"] = round(100 * cpu / took, 2)
    # Three times the sender threads bench_scale uses: on a loaded machine a PATCH takes a few
    # hundred ms, and 9 threads reached 30-40 of the 70/s.
    beats = Heartbeats(
        rest, names, run.heartbeat_rate, workers=3 * math.ceil(run.heartbeat_rate / 8)
    )
    progress(f"heartbeats: {run.heartbeat_rate:g}/s for {run.heartbeat_seconds:g}s")
    machine = Machine()
    took, cpu = cpu_over(child, lambda: beats.run(run.heartbeat_seconds))
    out["heartbeat_busy_pct"], out["heartbeat_load"] = machine.busy_pct(), load1()
    out["heartbeat_rate"] = round(beats.sent / took, 1)
    out["heartbeat_errors"] = beats.errors
    pct = out["heartbeat_cpu_pct"] = round(100 * cpu / took, 2)
    out["heartbeat_caused_cpu_pct"] = round(pct - base_pct, 2)
    per_beat = (cpu - base_pct / 100 * took) / max(beats.sent, 1)
    out["heartbeat_us"] = round(1e6 * per_beat)
    out["heartbeat_at_rate_pct"] = round(100 * per_beat * run.heartbeat_rate, 2)
    drained = child.cpu()
    rss, _, waited = settle(child, run)
    out["heartbeat_after_cpu_s"] = round(child.cpu() - drained, 2)
    out["heartbeat_drain_s"] = round(max(0.0, waited - run.settle_quiet), 1)
    out["heartbeat_rss_mib"] = rss
    progress(
        f"heartbeats: {out['heartbeat_rate']}/s, observer {pct} % of a core "
        f"(baseline {base_pct} %), machine {out['heartbeat_busy_pct']} % busy, load "
        f"{out['heartbeat_load']}; RSS after {rss} MiB"
    )


def added_node(body: Obj) -> Obj:
    body["metadata"]["labels"][ADDED_LABEL] = "true"
    return body


def add_nodes(child: Child, rest: Rest, run: FleetRun, out: dict[str, Metric],
              progress: Progress) -> None:  # fmt: skip
    """Add run.add_nodes Nodes of the same shape while the observer runs; once it holds them and
    is idle again, its RSS growth per added Node."""
    rss0, _, _ = settle(child, run)
    child.poll()
    held, count = child.nodes, run.add_nodes
    shape = ScaleConfig(nodes=count, octet=run.added_octet)
    create_nodes(rest, lambda i: added_node(shape.node(i)), count, workers=8, progress=progress)
    if not child.wait_nodes(held + count, run.step_timeout):
        out["added_bytes_per_node"] = TIMEOUT
        progress(f"the observer holds {child.nodes} of {held + count} Nodes: timeout")
        return
    rss1, hwm, _ = settle(child, run)
    out["added_nodes"], out["added_rss_mib"], out["added_peak_rss_mib"] = count, rss1, hwm
    out["added_bytes_per_node"] = round((rss1 - rss0) * MIB / count)
    progress(f"{count} Nodes added: RSS {rss0} -> {rss1} MiB, {out['added_bytes_per_node']} B each")


def remove_added(rest: Rest, progress: Progress, timeout: float = 300.0) -> None:
    """Delete the added Nodes and wait until they are gone (the next observer lists N)."""
    selector = f"{ADDED_LABEL}=true"
    rest.raw("DELETE", f"/api/v1/nodes?labelSelector={quote(selector)}")
    began = time.monotonic()
    params = {"labelSelector": selector}
    while sum(1 for _ in rest.list_pages("/api/v1/nodes", params, METADATA)):
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"added Nodes still there after {timeout:.0f}s")
        time.sleep(2)
    progress(f"added Nodes removed in {time.monotonic() - began:.1f}s")


def measure_observer(
    cluster: LocalCluster, rest: Rest, run: FleetRun, observer: Observer, names: list[str],
    progress: Progress,
) -> tuple[dict[str, Metric], dict[str, Any]]:  # fmt: skip
    """Start the observer, measure it, stop it; (metrics, details). The added Nodes are
    removed again, whatever happened."""
    out: dict[str, Metric] = {}
    details: dict[str, Any] = {}
    audit = AuditTail(cluster)
    child = Child(cluster, observer)
    began = child.start()
    try:
        if wait_ready(child, run, began, out, details, progress):
            rss, hwm, took = settle(child, run)
            out["start_settled_rss_mib"], out["start_peak_rss_mib"] = rss, hwm
            out["start_settle_s"] = took
            progress(f"settled after {took}s: RSS {rss} MiB, peak {hwm} MiB")
            heartbeat_windows(child, rest, names, run, out, progress)
            if run.add_nodes:
                add_nodes(child, rest, run, out, progress)
    except Exception as error:  # into the table; the next observer still runs
        progress(f"failed: {error!r}")
        out["error"] = repr(error)
    finally:
        child.stop()
        writes = audit.between(began, time.time())
        out["writes"] = len(writes)
        details["writes"] = [write.kind for write in writes[:50]]
        if run.add_nodes:
            remove_added(rest, progress)
    return out, details
