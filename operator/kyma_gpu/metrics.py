"""What the manager tells Prometheus: `/metrics`, and the readiness probe `/readyz`.

Both replicas serve both (reconcile/election.py: one writes, both observe). Counted as it
happens: reconciles (count by phase, errors, duration) in the loop, and every API write of the
adapter by resource and verb. Read from the store at scrape time, so that the leader and the
standby report the same world: the Gpu's state, the GPU node count, and whether this replica
leads.

The time of the last successful reconcile is exported as a Unix timestamp, the Prometheus way:
`time() - kyma_gpu_last_successful_reconcile_timestamp_seconds` is the age, computed where it
is read, and stays right between scrapes. No seconds-since gauge: it would be as old as the
last scrape. A replica that never reconciled (the standby) has no sample.

The metrics live in a registry of their own (plus the process and Python collectors), so
that tests create as many as they like.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from kyma_gpu import __version__
from kyma_gpu.api.models import GpuState

PREFIX = "kyma_gpu"


class ErrorKind(StrEnum):
    """The `kind` label of kyma_gpu_reconcile_errors_total."""

    TRANSIENT = "transient"
    """A write failed and is retried soon (a conflict, a throttle, the API server away)."""
    PERMANENT = "permanent"
    """A write failed and only a change can mend it (403, 422, 404 without Flux)."""
    INTERNAL = "internal"
    """A pass raised: a defect of the module."""


STATES = tuple(state.value for state in GpuState)
_VERBS = MappingProxyType({"POST": "create", "PUT": "update", "DELETE": "delete"})
_APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True, slots=True)
class Scraped:
    """What a scrape reads of the store (reconcile/loop.py `Loop.scrape`)."""

    leader: bool
    gpu_states: Mapping[str, str] = field(default_factory=dict)
    """Gpu name -> Gpu.status.state ("" before the first status)."""
    gpu_nodes: int | None = None
    """None until the first list of Nodes."""
    pools: tuple[PoolGpus, ...] = ()
    """GPU health per worker pool, as the Gpu's status says it (status.pools)."""


@dataclass(frozen=True, slots=True)
class PoolGpus:
    """One worker pool's GPUs (Gpu.status.pools)."""

    pool: str
    healthy: int
    total: int
    unhealthy_nodes: int

    @classmethod
    def of(cls, said: Mapping[str, object]) -> PoolGpus:
        def number(key: str) -> int:
            value = said.get(key)
            return value if isinstance(value, int) else 0

        return cls(str(said.get("name", "")), number("gpusHealthy"), number("gpuTotal"),
                   number("unhealthyNodes"))  # fmt: skip


def write_labels(method: str, path: str, content_type: str | None = None) -> tuple[str, str]:
    """(resource, verb) of a write request: `/apis/g/v/namespaces/ns/helmreleases/x` ->
    helmreleases; `.../gpus/gpu/status` -> gpus/status. Server-side apply is `apply`,
    another PATCH `patch`; POST, PUT and DELETE are create, update and delete."""
    parts = [part for part in path.split("?", 1)[0].split("/") if part]
    core = parts[2:] if parts[:1] == ["api"] else parts[3:]  # past /api/v1, /apis/group/v
    if core[:1] == ["namespaces"] and len(core) > 2:
        core = core[2:]
    resource = core[0] if core else "unknown"
    if len(core) > 2:
        resource = f"{resource}/{core[2]}"
    if method == "PATCH":
        return resource, "apply" if content_type == _APPLY else "patch"
    return resource, _VERBS.get(method, method.lower())


class _ObservedCollector:
    """Collects at scrape time what `observed` returns: no state of its own to go stale."""

    def __init__(self, observed: Callable[[], Scraped]) -> None:
        self.observed = observed

    def collect(self) -> Iterator[Metric]:
        now = self.observed()
        leader = GaugeMetricFamily(
            f"{PREFIX}_leader", "1 while this replica holds the Lease and may write, else 0"
        )
        leader.add_metric([], 1.0 if now.leader else 0.0)
        yield leader
        state = GaugeMetricFamily(
            f"{PREFIX}_gpu_state",
            "Gpu.status.state: 1 for the current state of each Gpu, 0 for the others",
            labels=["name", "state"],
        )
        for name, current in sorted(now.gpu_states.items()):
            for value in STATES:
                state.add_metric([name, value], 1.0 if current == value else 0.0)
        yield state
        if now.gpu_nodes is not None:
            nodes = GaugeMetricFamily(
                f"{PREFIX}_gpu_nodes", "GPU nodes this replica observes (Gpu.status.gpuNodeCount)"
            )
            nodes.add_metric([], float(now.gpu_nodes))
            yield nodes
        yield from _health(now.pools)


def _health(pools: tuple[PoolGpus, ...]) -> Iterator[Metric]:
    gpus = GaugeMetricFamily(
        f"{PREFIX}_gpus",
        "GPUs per worker pool: healthy (pods can use them) and unhealthy (missing, withdrawn by "
        "the device plugin, or on a node whose driver failed), as Gpu.status.pools says",
        labels=["pool", "health"],
    )
    nodes = GaugeMetricFamily(
        f"{PREFIX}_unhealthy_gpu_nodes",
        "GPU nodes with a health finding per worker pool (Gpu.status.pools[].unhealthyNodes)",
        labels=["pool"],
    )
    for pool in pools:
        gpus.add_metric([pool.pool, "healthy"], float(pool.healthy))
        gpus.add_metric([pool.pool, "unhealthy"], float(max(pool.total - pool.healthy, 0)))
        nodes.add_metric([pool.pool], float(pool.unhealthy_nodes))
    yield gpus
    yield nodes


class _LastSuccessCollector:
    def __init__(self) -> None:
        self.timestamp: float | None = None

    def collect(self) -> Iterator[Metric]:
        if self.timestamp is not None:
            yield GaugeMetricFamily(
                f"{PREFIX}_last_successful_reconcile_timestamp_seconds",
                "Unix time of the last reconcile that ended without an error",
                value=self.timestamp,
            )


class _BuildInfoCollector:
    def collect(self) -> Iterator[Metric]:
        yield InfoMetricFamily(f"{PREFIX}_build", "The manager's version", {"version": __version__})


class Metrics:
    """The manager's metrics, in one registry. The loop and the adapter call the hooks."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.reconciles = Counter(
            f"{PREFIX}_reconciles", "Reconciles of a Gpu, by the phase they ended in",
            ["phase"], registry=self.registry,
        )  # fmt: skip
        self.reconcile_errors = Counter(
            f"{PREFIX}_reconcile_errors",
            "Reconcile errors: failed writes (transient, permanent) and passes that raised "
            "(internal)",
            ["kind"], registry=self.registry,
        )  # fmt: skip
        self.reconcile_seconds = Histogram(
            f"{PREFIX}_reconcile_duration_seconds", "How long a reconcile of a Gpu took",
            registry=self.registry,
        )  # fmt: skip
        self.api_writes = Counter(
            f"{PREFIX}_api_writes", "Write requests to the API server, by resource and verb",
            ["resource", "verb"], registry=self.registry,
        )  # fmt: skip
        self._last_success = _LastSuccessCollector()
        self.registry.register(self._last_success)
        self.registry.register(_BuildInfoCollector())

    @classmethod
    def for_process(cls) -> Metrics:
        """With the process (CPU, memory, file descriptors), Python and GC collectors, and
        without the `_created` series of the counters (process-wide: the process is ours)."""
        disable_created_metrics()  # type: ignore[no-untyped-call]
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        return cls(registry)

    # -- hooks --

    def reconciled(self, phase: str, seconds: float, failed: bool, clock: float) -> None:
        """A reconcile ended in `phase`; `clock` is the Unix time, for the last success."""
        self.reconciles.labels(phase).inc()
        self.reconcile_seconds.observe(seconds)
        if not failed:
            self._last_success.timestamp = clock

    def reconcile_failed(self, kind: ErrorKind) -> None:
        self.reconcile_errors.labels(kind).inc()

    def api_write(self, method: str, path: str, content_type: str | None) -> None:
        self.api_writes.labels(*write_labels(method, path, content_type)).inc()

    def observe(self, observed: Callable[[], Scraped]) -> None:
        """Report what `observed` returns (called at each scrape, on the event loop)."""
        self.registry.register(_ObservedCollector(observed))


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT (HOST may be empty: every interface) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"not HOST:PORT: {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def readiness(
    waiting_for: Callable[[], list[str]],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """GET /readyz: 200 once nothing is waited for, else 503 and what is missing."""

    async def readyz(request: web.Request) -> web.Response:
        missing = waiting_for()
        if missing:
            text = f"waiting for the first list of {', '.join(missing)}\n"
            return web.Response(status=503, text=text)
        return web.Response(text="ready\n")

    return readyz


async def serve(
    address: str, metrics: Metrics, waiting_for: Callable[[], list[str]]
) -> web.AppRunner:
    """Serve /metrics and /readyz on HOST:PORT, on the running event loop."""
    host, port = parse_address(address)
    app = web.Application()
    app.router.add_get("/metrics", make_aiohttp_handler(metrics.registry))
    app.router.add_get("/readyz", readiness(waiting_for))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
