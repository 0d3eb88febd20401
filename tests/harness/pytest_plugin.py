"""pytest fixtures for the local cluster harness.

Register with ``pytest_plugins = ["tests.harness.pytest_plugin"]`` in the
top-level conftest (tests/conftest.py). Fixtures:

- ``local_cluster`` (session): a started LocalCluster without nodes;
- ``flux_stack`` (module, started on first use): Flux controllers and the
  local Helm repository on that cluster, stopped after the module;
- ``k8s_client`` (function): a kubernetes ApiClient for the admin user;
- ``namespace`` (function): a fresh namespace (with its default
  ServiceAccount), deleted afterwards;
- ``fleet`` (function): ``fleet(path)`` creates the Nodes of a YAML file and
  waits until they are Ready; they are deleted after the test;
- ``demo_fleet`` (function): the nodes of tests/harness/fleets/demo.yaml.

A missing binary fails the test with an error (never a skip): CI must not go
green without having run the integration tests. When a test that uses the
cluster (see ``_uses_cluster``) fails, in its call, setup or teardown, the
report gets a section with the status of every process, the Gpus' status and
the objects it is made of (LocalCluster.objects_summary), and the tail of every
file in the cluster's log dir (the operator's too; of the audit log only its
size and last lines).
Set KYMA_GPU_HARNESS_KEEP=1 to keep the workdir (logs, etcd data) afterwards.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .binaries import MissingBinaryError
from .cluster import LocalCluster, close_client
from .flux import FluxStack
from .nodes import DEMO_FLEET
from .scheduling import DURATIONS, durations_from_reports, write_durations

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

LOG_TAIL_LINES = 40
CLUSTER_MARKERS = ("integration", "e2e")

log = logging.getLogger("tests.harness")
_CLUSTER = pytest.StashKey[LocalCluster]()


def _start_or_fail(start: Callable[[], object]) -> None:
    """Run ``start``; a missing binary becomes a test error with just its message."""
    missing: str | None = None
    try:
        start()
    except MissingBinaryError as error:
        missing = str(error)
    if missing is not None:
        pytest.fail(missing, pytrace=False)


@pytest.fixture(scope="session")
def local_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """The session's local control plane with kwok (no nodes; see ``fleet``)."""
    cluster = LocalCluster(progress=log.info)
    request.config.stash[_CLUSTER] = cluster
    _start_or_fail(cluster.start)
    log.info("local cluster timings %s, RSS KiB %s", cluster.timings, cluster.rss_kib())
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def flux_stack(local_cluster: LocalCluster) -> Iterator[FluxStack]:
    """Flux source-controller + helm-controller and the local Helm repository.

    Module-scoped, not session-scoped: it starts in about 2s, and once
    helm-controller runs it really installs every HelmRelease in the cluster,
    which would change the ground under later tests that write HelmRelease
    status themselves. The Flux CRDs stay installed after it stops.
    """
    flux = FluxStack(local_cluster, progress=log.info)
    _start_or_fail(flux.start)
    log.info("Flux timings %s, RSS KiB %s", flux.timings, flux.rss_kib())
    try:
        yield flux
    finally:
        flux.stop()


@pytest.fixture
def k8s_client(local_cluster: LocalCluster) -> Iterator[ApiClient]:
    """A kubernetes.client.ApiClient for the admin user of the local cluster."""
    api = local_cluster.api_client()
    try:
        yield api
    finally:
        close_client(api)


@pytest.fixture
def namespace(local_cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace, ready for pods; deleted (without waiting) afterwards."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    local_cluster.create_namespace(name)
    try:
        yield name
    finally:
        local_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def fleet(local_cluster: LocalCluster) -> Iterator[Callable[[Path | str], list[str]]]:
    """``fleet(path)``: create the Nodes in a YAML file, Ready; deleted after the test."""
    created: list[str] = []

    def add(path: Path | str) -> list[str]:
        names = local_cluster.add_nodes(path)
        created.extend(names)
        return names

    try:
        yield add
    finally:
        for name in created:
            local_cluster.delete_node(name)


@pytest.fixture
def demo_fleet(fleet: Callable[[Path | str], list[str]]) -> list[str]:
    """Two g6.xlarge GPU nodes and one m5.large node (tests/harness/fleets/demo.yaml)."""
    return fleet(DEMO_FLEET)


def _uses_cluster(item: pytest.Item) -> bool:
    """The test needs the local cluster: directly, through another fixture, or by marker.

    ``item.fixturenames`` is the closure of every fixture the test requests
    (an e2e test's module fixture that takes ``flux_stack`` brings
    ``local_cluster`` along); the markers cover a fixture that fetches the
    cluster with ``request.getfixturevalue``.
    """
    if "local_cluster" in getattr(item, "fixturenames", ()):
        return True
    return any(item.get_closest_marker(name) is not None for name in CLUSTER_MARKERS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failure (in the test, its setup or teardown) of a test that uses the cluster
    gets the status of every process and the tail of every log of the cluster."""
    report = yield
    if report.failed and _uses_cluster(item):
        clusters = LocalCluster.live()
        session = item.config.stash.get(_CLUSTER, None)
        if session is not None and session not in clusters:
            clusters.insert(0, session)
        for cluster in clusters:
            where = "" if cluster is session else f" {cluster.workdir}"
            report.sections.append(
                (
                    f"local cluster{where} at the failure ({report.when})",
                    cluster.diagnostics(LOG_TAIL_LINES),
                )
            )
    return report


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write the seconds per test file of this run to {DURATIONS.name} "
        "(the scheduler of make test hands the longest file out first)",
    )


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """With --record-durations, after a full green run: write tests/durations.json."""
    if not config.getoption("record_durations") or hasattr(config, "workerinput"):
        return
    if exitstatus != 0:
        terminalreporter.write_line("durations not recorded: the run was not green")
        return
    # Every phase: a passed test's setup and teardown are filed under "" by the reporter.
    reports = [
        report
        for reports in terminalreporter.stats.values()
        for report in reports
        if isinstance(report, pytest.TestReport)
    ]
    files = durations_from_reports(reports)
    write_durations(files)
    terminalreporter.write_line(f"recorded the durations of {len(files)} test files in {DURATIONS}")
