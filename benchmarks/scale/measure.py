"""The measurements of the operator at scale (measure_operator)."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.scale.common import (
    GPU_PATH,
    HELMRELEASE_NAME,
    HELMRELEASES,
    RECONCILED,
    TIMEOUT,
    ApiError,
    Metric,
    Obj,
    Progress,
    Rest,
)
from benchmarks.scale.fleet import (
    Fleet,
    ScaleConfig,
    create_or_keep,
    run_parallel,
    scale_node,
)
from benchmarks.scale.footprint import Footprint
from benchmarks.scale.process import (
    AuditTail,
    Heartbeats,
    LineTail,
    ObjectWatch,
    Operator,
    Write,
)
from benchmarks.scale.trace import (
    changes,
    daemonsets,
    gpu_digest,
    install_report,
    own_writes,
    release_digest,
    steady,
    write_rows,
)
from tests.harness.cluster import LocalCluster


@dataclass
class Session:
    """What one measurement run holds: the operator, its log, the audit log, the watches."""

    cluster: LocalCluster
    rest: Rest
    cfg: ScaleConfig
    progress: Progress
    operator: Operator
    audit: AuditTail
    release: ObjectWatch
    gpu: ObjectWatch
    metrics: dict[str, Metric] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    breakdown: Counter[str] = field(default_factory=Counter)
    round: int = 0
    footprint: Footprint | None = None
    """Flux and the NVIDIA controller, measured next to the manager (cfg.flux)."""
    gpu_body: Obj | None = None
    """The Gpu the fleet was built with (created again by install_times)."""
    details: dict[str, Any] = field(default_factory=dict)
    """What explains the numbers (trace.py): the writes of each window and of each spec
    change, what each Gpu and HelmRelease version changed, the install's state."""


def wait_first_reconcile(s: Session, log: LineTail, started: float, prefix: str) -> None:
    """Start (or restart) to the first reconcile (log line or first write of the module's own,
    the earlier: kopf's finalizer on a new Gpu, written once kopf has the Gpu, is none) and
    to the first HelmRelease write; a ``timeout`` after cfg.start_timeout (for the HelmRelease:
    cfg.step_timeout after the first reconcile; an error plan writes none)."""
    first_log = first_write = first_release = None
    last_report = time.monotonic()
    deadline = time.monotonic() + s.cfg.start_timeout
    while time.monotonic() < deadline:
        if (first_log or first_write) and deadline - time.monotonic() > s.cfg.step_timeout:
            deadline = time.monotonic() + s.cfg.step_timeout
        s.operator.check_alive()
        if first_log is None and any(RECONCILED in line for line in log.lines()):
            first_log = time.time()
        for write in s.audit.poll():
            if not write.agent.startswith("kopf"):  # kopf's finalizer is no reconcile
                first_write = first_write or write.at
            if write.resource == "helmreleases" and first_release is None:
                first_release = write.at
        if (first_log or first_write) and first_release:
            break
        if time.monotonic() - last_report >= 30:
            rss, _ = s.operator.memory_mib()
            s.progress(
                f"{prefix}: waiting for the first reconcile, {time.time() - started:.0f}s,"
                f" RSS {rss:.0f} MiB, CPU {s.operator.cpu_seconds():.0f}s"
            )
            last_report = time.monotonic()
        time.sleep(0.1)
    first = min((t for t in (first_log, first_write) if t is not None), default=None)
    s.metrics[f"{prefix}_first_reconcile_s"] = _since(first, started)
    s.metrics[f"{prefix}_first_reconcile_by"] = (
        None if first is None else "log" if first == first_log else "write"
    )
    s.metrics[f"{prefix}_helmrelease_s"] = _since(first_release, started)
    s.metrics[f"{prefix}_cpu_s"] = round(s.operator.cpu_seconds(), 1)
    s.progress(
        f"{prefix}: first reconcile {_show(s.metrics[f'{prefix}_first_reconcile_s'])} s "
        f"(by {s.metrics[f'{prefix}_first_reconcile_by']}), HelmRelease written "
        f"{_show(s.metrics[f'{prefix}_helmrelease_s'])} s"
    )


def _since(at: float | None, started: float) -> Metric:
    return TIMEOUT if at is None else round(at - started, 2)


def _show(value: Metric) -> str:
    return "-" if value is None else str(value)


def idle(s: Session, quiet: float) -> float:
    """Wait until the operator has been idle (< 2 % of a core) for ``quiet`` seconds (at most
    cfg.step_timeout); the seconds waited."""
    samples: deque[tuple[float, float]] = deque()
    began = time.monotonic()
    while time.monotonic() - began < s.cfg.step_timeout:
        s.operator.check_alive()
        now, cpu = time.monotonic(), s.operator.cpu_seconds()
        samples.append((now, cpu))
        while samples and now - samples[0][0] > quiet:
            samples.popleft()
        span = now - samples[0][0]
        if span >= quiet - 1 and (cpu - samples[0][1]) / span < 0.02:
            break
        time.sleep(1.0)
    return time.monotonic() - began


def settle(s: Session, prefix: str) -> None:
    """Wait until the operator has been idle (< 2 % of a core) for cfg.settle_quiet seconds;
    record peak RSS (VmHWM) and then the settled RSS (VmRSS)."""
    began = time.monotonic()
    idle(s, s.cfg.settle_quiet)
    rss, hwm = s.operator.memory_mib()
    s.metrics[f"{prefix}_peak_rss_mib"] = round(hwm, 1)
    s.metrics[f"{prefix}_settled_rss_mib"] = round(rss, 1)
    s.metrics[f"{prefix}_settle_s"] = round(time.monotonic() - began, 1)
    s.progress(
        f"{prefix}: settled after {time.monotonic() - began:.0f}s: RSS {rss:.0f} MiB, "
        f"peak {hwm:.0f} MiB"
    )


def _window(s: Session, label: str, work: Callable[[], None]) -> tuple[float, float, list[Write]]:
    """Run ``work``; (seconds, operator CPU seconds, operator writes) over it, the footprint's
    CPU as ``<process>_<label>_cpu_pct``, and into the details the writes (``<label>_writes``)
    and what the Gpu versions of the window changed (``<label>_gpu``)."""
    s.audit.poll()
    if s.footprint is not None:
        s.footprint.mark(label)
    before = gpu_digest(s.gpu.current())
    start_wall, start_cpu, began = time.time(), s.operator.cpu_seconds(), time.monotonic()
    work()
    took = time.monotonic() - began
    cpu = s.operator.cpu_seconds() - start_cpu
    end_wall = time.time()
    if s.footprint is not None:
        s.footprint.cpu_pct(label, took, s.metrics, f"{label}_cpu_pct")
    writes = s.audit.between(start_wall, end_wall)
    s.details[f"{label}_writes"] = write_rows(writes, start_wall)
    s.details[f"{label}_gpu"] = changes(before, s.gpu.since(start_wall, end_wall), start_wall)
    return took, cpu, writes


def baseline(s: Session) -> None:
    """A window as long as the heartbeats' without them: what the manager writes and spends
    anyway (mirroring the NVIDIA controller's DaemonSets and ClusterPolicy into Gpu.status, an
    install still running). The heartbeat window minus this is what heartbeats cost."""
    s.progress(f"baseline: {s.cfg.heartbeat_seconds:g}s without heartbeats")
    took, cpu, writes = _window(s, "baseline", lambda: time.sleep(s.cfg.heartbeat_seconds))
    s.metrics["baseline_cpu_pct"] = round(100 * cpu / took, 2)
    s.metrics["baseline_writes"] = len(writes)
    s.progress(f"baseline: operator CPU {100 * cpu / took:.2f} % of a core, {len(writes)} writes")


def heartbeats(s: Session) -> None:
    """CPU of the operator (% of one core) and its writes while Nodes send heartbeats; with a
    baseline before, the part the heartbeats caused (this window minus the baseline)."""
    beats = Heartbeats(s.rest, s.nodes, s.cfg.heartbeat_rate)
    s.progress(f"heartbeats: {s.cfg.heartbeat_rate:g}/s for {s.cfg.heartbeat_seconds:g}s")
    rates: list[float] = []
    took, cpu, writes = _window(
        s, "heartbeat", lambda: rates.append(beats.run(s.cfg.heartbeat_seconds))
    )
    s.metrics["heartbeat_rate"] = round(rates[0], 1)
    s.metrics["heartbeat_cpu_pct"] = round(100 * cpu / took, 2)
    s.metrics["heartbeat_writes"] = len(writes)
    s.metrics["heartbeat_errors"] = beats.errors
    base_cpu, base_writes = s.metrics.get("baseline_cpu_pct"), s.metrics.get("baseline_writes")
    if isinstance(base_cpu, float) and isinstance(base_writes, int):
        s.metrics["heartbeat_caused_cpu_pct"] = round(100 * cpu / took - base_cpu, 2)
        s.metrics["heartbeat_caused_writes"] = len(writes) - base_writes
    s.progress(
        f"heartbeats: {rates[0]:.1f}/s, operator CPU {100 * cpu / took:.2f} % of a core, "
        f"{len(writes)} writes"
    )


def spec_body(cfg: ScaleConfig, round_: int) -> Obj:
    """The merge patch of one spec change, with values of the allowlist
    (values-rules/values-allowlist.yaml). ``operands`` (the default): a toleration in
    ``daemonsets.tolerations``, which the NVIDIA controller copies into the pod template of
    every operand DaemonSet, so each change also rolls them all (with Flux: about 5
    RollingUpdate DaemonSets times the GPU nodes). ``inert``: the DCGM exporter's
    ServiceMonitor interval, while the module writes no ServiceMonitor (spec.components
    .serviceMonitor false): Helm upgrades the ClusterPolicy and no pod changes, the manager's
    and Flux's part alone."""
    if cfg.spec_value == "inert":
        values: Obj = {"dcgmExporter": {"serviceMonitor": {"interval": f"{round_}s"}}}
    else:
        values = {"daemonsets": {"tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": f"bench.kyma-project.io/round-{round_}", "operator": "Exists"},
        ]}}  # fmt: skip
    return {"spec": {"values": values}}


def spec_change(s: Session, timeout: float) -> tuple[float | None, list[Write]]:
    """Patch a chart value in Gpu.spec.values; latency until the watch delivers a new
    HelmRelease generation, and the operator's writes from the patch until 3 s after (or
    2 s after the update, if later)."""
    s.round += 1
    generation = s.release.generation()
    body = spec_body(s.cfg, s.round)
    gpu_before, release_before = gpu_digest(s.gpu.current()), release_digest(s.release.current())
    began = time.time()
    s.rest.merge_patch(f"{GPU_PATH}/gpu", body)
    arrived = s.release.wait(lambda _: s.release.generation() > generation, timeout)
    latency = None if arrived is None else arrived - began
    window_end = began + max(3.0, (latency or 0.0) + 2.0)
    time.sleep(max(0.0, window_end - time.time()))
    writes = s.audit.between(began - 0.05, window_end)
    s.details.setdefault("spec_changes", []).append({
        "round": s.round,
        "latency_ms": None if latency is None else round(latency * 1000),
        "writes": write_rows(writes, began),
        "gpu": changes(gpu_before, s.gpu.since(began, window_end), began),
        "helmrelease": changes(release_before, s.release.since(began, window_end), began),
    })  # fmt: skip
    return latency, writes


def spec_changes(s: Session, count: int, prefix: str) -> None:
    """p50/p99 spec change -> HelmRelease update, writes per change (mean, max, breakdown)."""
    latencies: list[float] = []
    writes: list[int] = []
    own: list[int] = []
    for k in range(count):
        latency, done = spec_change(s, s.cfg.step_timeout)
        writes.append(len(done))
        own.append(own_writes(done))
        s.breakdown.update(write.kind for write in done)
        if latency is None:
            s.progress(
                f"{prefix}: change {k + 1}/{count}: no HelmRelease update "
                f"within {s.cfg.step_timeout:.0f}s"
            )
            break
        latencies.append(latency * 1000)
        if (k + 1) % 5 == 0 or k + 1 == count:
            s.progress(
                f"{prefix}: {k + 1}/{count} changes, last {latency * 1000:.0f} ms, "
                f"{len(done)} writes"
            )
    failed = len(latencies) < count
    s.metrics[f"{prefix}_p50_ms"] = TIMEOUT if failed else round(_percentile(latencies, 50))
    s.metrics[f"{prefix}_p99_ms"] = TIMEOUT if failed else round(_percentile(latencies, 99))
    s.metrics[f"{prefix}_max_ms"] = TIMEOUT if failed else round(max(latencies))
    if writes:
        s.metrics[f"{prefix}_writes_mean"] = round(statistics.fmean(writes), 2)
        s.metrics[f"{prefix}_writes_max"] = max(writes)
        s.metrics[f"{prefix}_own_writes_mean"] = round(statistics.fmean(own), 2)
        s.metrics[f"{prefix}_own_writes_max"] = max(own)


def _percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (p99 of 20 samples is the largest)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def node_join(s: Session) -> None:
    """A new GPU node joins: seconds from its create until Gpu.status counts it (gpuNodeCount;
    status.nodes lists only the first 100 by name, which the new one need not be among)."""
    index = s.cfg.nodes
    body = scale_node(index, True, s.cfg.octet)
    name = body["metadata"]["name"]
    before = int(((s.gpu.current() or {}).get("status") or {}).get("gpuNodeCount") or 0)

    def listed(gpu: Obj | None) -> bool:
        status = (gpu or {}).get("status") or {}
        nodes = status.get("nodes") or []
        named = any(isinstance(n, dict) and n.get("name") == name for n in nodes)
        return named or int(status.get("gpuNodeCount") or 0) > before

    began = time.time()
    create_or_keep(s.rest, "/api/v1/nodes", body)
    arrived = s.gpu.wait(listed, s.cfg.step_timeout)
    s.metrics["node_join_s"] = TIMEOUT if arrived is None else round(arrived - began, 3)
    s.progress(f"GPU node join to Gpu.status: {_show(s.metrics['node_join_s'])} s")


def restart(s: Session) -> None:
    """Stop the operator (SIGINT), change the spec while it is down, start it again: restart
    to first reconcile and to the HelmRelease update; RSS; then spec changes again."""
    s.progress("restart: stopping the operator (SIGINT)")
    s.operator.stop()
    s.round += 1000
    s.rest.merge_patch(f"{GPU_PATH}/gpu", spec_body(s.cfg, s.round))
    log = LineTail(s.operator.log_path)
    s.audit.poll()
    started = s.operator.start()
    s.progress(f"restart: operator started again (pid {s.operator.pid})")
    wait_first_reconcile(s, log, started, "restart")
    if s.metrics["restart_first_reconcile_s"] == TIMEOUT:
        return
    settle(s, "restart")
    spec_changes(s, s.cfg.restart_spec_changes, "restart_spec")


def measure_operator(
    cluster: LocalCluster,
    rest: Rest,
    cfg: ScaleConfig,
    fleet: Fleet,
    progress: Progress,
    *,
    keep_running: bool = False,
    footprint: Footprint | None = None,
    details: dict[str, Any] | None = None,
) -> tuple[dict[str, Metric], Counter[str], Operator]:
    """Start the operator against the fleet and run every measurement; stops it at the end
    unless ``keep_running`` (a shared cluster needs it to release the Gpu's finalizer).
    With a ``footprint`` (cfg.flux) Flux and the NVIDIA controller are measured too; into
    ``details`` go the traces that explain the numbers (Session.details)."""
    release = ObjectWatch(rest, HELMRELEASES, HELMRELEASE_NAME, release_digest).start()
    gpu = ObjectWatch(rest, GPU_PATH, "gpu", gpu_digest).start()
    operator = Operator(cluster, cfg.operator_root)
    s = Session(
        cluster, rest, cfg, progress, operator, AuditTail(cluster), release, gpu,
        nodes=fleet.nodes, footprint=footprint, gpu_body=fleet.gpu,
        details=details if details is not None else {},
    )  # fmt: skip
    s.metrics.update(fleet.setup)
    try:
        started = operator.start()
        progress(f"operator started (pid {operator.pid}, {cfg.operator_root}/operator)")
        wait_first_reconcile(s, LineTail(operator.log_path, from_end=False), started, "start")
        if s.metrics["start_first_reconcile_s"] != TIMEOUT:
            _steady_state(s)
    except Exception as error:  # keep what was measured; the caller reports the error
        s.metrics["error"] = f"{error!r}; operator log {operator.log_path}"
        progress(f"measurement failed: {error!r}")
    finally:
        release.stop()
        gpu.stop()
        if not keep_running:
            operator.stop()
    return s.metrics, s.breakdown, operator


def _steady_state(s: Session) -> None:
    settle(s, "start")
    if s.footprint is not None:
        flux_settled(s)  # before the heartbeats: the install's status writes are not theirs
    if s.cfg.heartbeat_seconds > 0:
        if s.cfg.baseline:
            baseline(s)
        heartbeats(s)
    s.release.wait(lambda obj: obj is not None, s.cfg.step_timeout)
    object_sizes(s)
    spec_changes(s, s.cfg.spec_changes, "spec")
    node_join(s)
    if s.cfg.rollout:
        rollout(s)
    if s.footprint is not None:
        s.footprint.record(s.metrics)
    if s.cfg.restart:
        restart(s)
    if s.cfg.install and s.footprint is not None and s.gpu_body is not None:
        install_times(s, s.gpu_body, s.cfg.install_timeout)


UPGRADE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
STATUS_WRITE = "gpus/status"


def flux_settled(s: Session) -> None:
    """With Flux: wait until the HelmRelease is Ready (the chart installed, the NVIDIA
    controller started), the Gpu Ready and the operand DaemonSets steady (each pod ready
    and updated), all within cfg.install_timeout; then until the manager is idle again. What
    the install looked like when the HelmRelease got Ready (or the time ran out) goes into
    the details (``flux_install``): its conditions, the DaemonSets, their pods' pace."""
    deadline = time.monotonic() + s.cfg.install_timeout
    started = s.operator.started_at
    ready = s.release.wait(_ready, s.cfg.install_timeout)
    s.metrics["flux_helmrelease_ready_s"] = _since(ready, started)
    s.details["flux_install"] = install_report(s.rest, s.release.current())
    s.progress(f"Flux: HelmRelease Ready {s.metrics['flux_helmrelease_ready_s']} s after the start")
    if ready is None:
        s.progress(f"Flux: the install then: {json.dumps(s.details['flux_install'])[:2000]}")
    gpu_ready = s.gpu.wait(_gpu_ready, max(0.0, deadline - time.monotonic()))
    s.metrics["flux_gpu_ready_s"] = _since(gpu_ready, started)
    steady_at = _daemonsets_steady(s, deadline)
    s.metrics["flux_daemonsets_steady_s"] = _since(steady_at, started)
    s.details["flux_daemonsets"] = daemonsets(s.rest)
    s.metrics["nfd_worker_pods"] = nfd_worker_pods(s.details["flux_daemonsets"])
    s.progress(
        f"Flux: Gpu Ready {s.metrics['flux_gpu_ready_s']} s, operand DaemonSets steady "
        f"{s.metrics['flux_daemonsets_steady_s']} s after the start"
    )
    idle(s, s.cfg.settle_quiet)


def nfd_worker_pods(sets: dict[str, str]) -> int | None:
    """The NFD worker DaemonSet's desired pods (the first number of its trace line)."""
    for name, text in sets.items():
        if "node-feature-discovery-worker" in name:
            numbers = [int(word) for word in text.split() if word.isdigit()]
            return numbers[0] if numbers else None
    return None


def _daemonsets_steady(s: Session, deadline: float) -> float | None:
    """When the operand DaemonSets were first seen steady (trace.steady); None: not by then."""
    while time.monotonic() < deadline:
        if steady(daemonsets(s.rest)):
            return time.time()
        time.sleep(2.0)
    return None


def rollout(s: Session) -> None:
    """Every GPU node's upgrade label changes once, to upgrade-required (as a driver rollout
    starts on each node), as fast as the benchmark can patch; the manager's CPU and writes
    until it is idle again. Then (not measured) every node is labelled upgrade-done, so that
    the rollout is over for what follows."""
    names = s.cfg.gpu_names()
    s.audit.poll()
    start_wall, start_cpu = time.time(), s.operator.cpu_seconds()
    patched = _label_all(s, names, "upgrade-required")
    idle(s, s.cfg.settle_quiet / 2)
    cpu = s.operator.cpu_seconds() - start_cpu
    writes = s.audit.between(start_wall, time.time())
    status = [w for w in writes if f"{w.resource}/{w.subresource}" == STATUS_WRITE]
    s.metrics["rollout_nodes"] = len(names)
    s.metrics["rollout_patch_s"] = round(patched, 1)
    s.metrics["rollout_cpu_s"] = round(cpu, 2)
    s.metrics["rollout_cpu_ms_per_node"] = round(1000 * cpu / max(1, len(names)), 2)
    s.metrics["rollout_writes"] = len(writes)
    s.metrics["rollout_status_writes"] = len(status)
    s.metrics["rollout_helmrelease_writes"] = sum(w.resource == "helmreleases" for w in writes)
    s.progress(
        f"rollout: {len(names)} labels in {patched:.1f}s, manager CPU {cpu:.2f}s, "
        f"{len(writes)} writes ({len(status)} status)"
    )
    _label_all(s, names, "upgrade-done")
    idle(s, s.cfg.settle_quiet / 2)


def _label_all(s: Session, names: Sequence[str], state: str) -> float:
    s.progress(f"rollout: labelling {len(names)} GPU nodes {UPGRADE_LABEL}={state}")
    body = {"metadata": {"labels": {UPGRADE_LABEL: state}}}

    def label(index: int) -> None:
        s.rest.merge_patch(f"/api/v1/nodes/{names[index]}", body)

    return run_parallel(len(names), label, workers=s.cfg.workers, what="labelled",
                        progress=s.progress)  # fmt: skip


def _json_size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def object_sizes(s: Session) -> None:
    """Bytes of JSON: the Gpu's status, the HelmRelease's values and the whole HelmRelease."""
    gpu = s.gpu.current() or {}
    release = s.release.current() or {}
    s.metrics["gpu_status_bytes"] = _json_size(gpu.get("status") or {})
    s.metrics["helmrelease_values_bytes"] = _json_size((release.get("spec") or {}).get("values"))
    s.metrics["helmrelease_bytes"] = _json_size(release)


def _ready(obj: Obj | None) -> bool:
    meta = (obj or {}).get("metadata") or {}
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            current = cond.get("observedGeneration") == meta.get("generation")
            return bool(cond.get("status") == "True" and current)
    return False


def _gpu_ready(obj: Obj | None) -> bool:
    return ((obj or {}).get("status") or {}).get("state") == "Ready"


def install_times(s: Session, gpu: Obj, timeout: float) -> None:
    """Delete the Gpu (the manager uninstalls), create it again: seconds from the create to
    the HelmRelease Ready and to the Gpu Ready."""
    s.progress("install: deleting the Gpu")
    with contextlib.suppress(ApiError):
        s.rest.call("DELETE", f"{GPU_PATH}/gpu", ok=(200, 202))
    if s.gpu.wait(lambda obj: obj is None, timeout) is None:
        s.metrics["install_error"] = "the Gpu was not deleted"
        return
    s.release.wait(lambda obj: obj is None, timeout)
    began = time.time()
    s.rest.call("POST", GPU_PATH, gpu)
    s.progress("install: Gpu created")
    released = s.release.wait(_ready, timeout)
    ready = s.gpu.wait(_gpu_ready, timeout)
    s.metrics["install_helmrelease_ready_s"] = _since(released, began)
    s.metrics["install_gpu_ready_s"] = _since(ready, began)
    s.progress(
        f"install: HelmRelease Ready {s.metrics['install_helmrelease_ready_s']} s, "
        f"Gpu Ready {s.metrics['install_gpu_ready_s']} s"
    )
