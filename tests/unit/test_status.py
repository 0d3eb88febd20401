"""Status aggregation (docs/architecture.md): a table of observed worlds and the Gpu.status each
gives, the DaemonSet readiness rule, and transition times that only move on a change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, get_type_hints

import pytest

from kyma_gpu.api import GpuSpec, GpuState
from kyma_gpu.api.conditions import FluxMirrored, Reason
from kyma_gpu.api.models import Condition, GpuStatus
from kyma_gpu.extensions import MACHINE
from kyma_gpu.facts import DriverUpgradeState
from kyma_gpu.facts.stack import FluxCondition, driver_image_version
from kyma_gpu.plan import Owner, Plan, make_plan
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status import (
    DaemonSetFacts,
    Evidence,
    FluxObjectFacts,
    OperatorStateFacts,
    cluster_policy_facts,
    daemonset_facts,
    flux_object_facts,
)
from kyma_gpu.status.aggregate import aggregate as aggregate_core
from kyma_gpu.status.aggregate import nodes_ready, running_driver_version
from kyma_gpu.status.deletion import Wait
from kyma_gpu.status.judge import cond, release_ready
from tests.unit.builders import cpu_node, facts_of, node, ubuntu_node

UID = "0b5a8c1e-5f7d-4c2b-9a41-6d2f0e7b9c11"
DRIVER_DS = "nvidia-driver-daemonset-6.12.44-cloud-amd64-gardenlinux0"
INSTALLER = "ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0"
GL_DRIVER_IMAGE = f"{INSTALLER}/driver:590-6.12.44-cloud-amd64-gardenlinux0"
FLATCAR = "Flatcar Container Linux by Kinvolk 4081.2.0 (Oklo)"


def aggregate(
    plan: Plan,
    observed: Evidence,
    generation: int | None,
    previous: Sequence[Condition] = (),
    now: str = "",
) -> GpuStatus:
    """The status with every registered extension's part, as the loop shows it."""
    return aggregate_core(plan, observed, generation, previous, now, MACHINE.status_hooks)


@pytest.fixture(scope="module")
def plans(catalog: Catalog) -> dict[str, Plan]:
    def plan(*bodies: Mapping[str, Any], spec: Mapping[str, Any] | None = None) -> Plan:
        facts = facts_of(catalog.machine_types, *bodies)
        return make_plan(GpuSpec.model_validate(spec or {}), facts, catalog, Owner(uid=UID))

    return {
        "gl": plan(node("gl-1"), cpu_node()),
        "warning": plan(node("odd", os_image="Debian GNU/Linux 12 (bookworm)")),
        "error": plan(node("gl-1"), spec={"driver": {"installerRelease": "9.9.9"}}),
        "preinstalled": plan(node("flat", os_image=FLATCAR)),
        "no-gpu": plan(cpu_node()),
        "upstream": plan(ubuntu_node()),
    }


def hr(
    *,
    generation: int = 2,
    observed: int | None = 2,
    ready: tuple[str, str] | None = ("True", "InstallSucceeded"),
    ready_generation: int | None = None,
    stalled: bool = False,
    reconciling: str | None = None,
    deployed: str | None = "v26.7.0",
) -> FluxObjectFacts:
    """A HelmRelease as Flux writes it, parsed by the same function the operator uses."""
    conditions: list[dict[str, Any]] = []
    if ready is not None:
        conditions.append(
            {
                "type": "Ready",
                "status": ready[0],
                "reason": ready[1],
                "message": f"Helm says {ready[1]}",
                "observedGeneration": ready_generation or generation,
            }
        )
    if stalled:
        conditions.append({"type": "Stalled", "status": "True", "reason": "RetriesExceeded"})
    if reconciling:
        conditions.append({"type": "Reconciling", "status": "True", "reason": reconciling})
    status: dict[str, Any] = {"conditions": conditions}
    if observed is not None:
        status["observedGeneration"] = observed
    if deployed:
        status["history"] = [{"chartVersion": deployed, "status": "deployed"}]
    return flux_object_facts(
        {
            "metadata": {
                "name": "gpu-operator",
                "namespace": "kyma-system",
                "generation": generation,
            },
            "status": status,
        }
    )


def ds(
    name: str,
    desired: int = 1,
    available: int | None = None,
    *,
    updated: int | None = None,
    unavailable: int | None = None,
    generation: int = 1,
    observed: int | None = 1,
    strategy: str = "RollingUpdate",
    image: str = GL_DRIVER_IMAGE,
    ready: int | None = None,
) -> DaemonSetFacts:
    available = desired if available is None else available
    status: dict[str, Any] = {
        "desiredNumberScheduled": desired,
        "numberAvailable": available,
        "numberReady": available if ready is None else ready,
        "updatedNumberScheduled": desired if updated is None else updated,
    }
    if unavailable is not None:
        status["numberUnavailable"] = unavailable
    if observed is not None:
        status["observedGeneration"] = observed
    # As the NVIDIA operator labels its driver DaemonSets (both naming schemes).
    driver = name.startswith(("nvidia-driver-daemonset", "nvidia-gpu-driver-"))
    labels = {"app.kubernetes.io/component": "nvidia-driver"} if driver else {"app": name}
    containers = [{"name": "nvidia-driver-ctr" if driver else name, "image": image}]
    template = {"spec": {"containers": containers}}
    return daemonset_facts(
        {
            "metadata": {"name": name, "generation": generation, "labels": labels},
            "spec": {"updateStrategy": {"type": strategy}, "template": template},
            "status": status,
        }
    )


DRIVER_READY = ds(DRIVER_DS, strategy="OnDelete", updated=0, generation=2)
UPSTREAM_DRIVER = ds("nvidia-driver-daemonset-debian12",
                     image="nvcr.io/nvidia/driver:595.91.07-debian12")  # fmt: skip
"""NVIDIA's driver container in the version of the chart's default (the plans name none)."""
OPERANDS = (
    ds("nvidia-container-toolkit-daemonset"),
    ds("nvidia-device-plugin-daemonset"),
    ds("nvidia-dcgm-exporter"),
)
CP_READY = OperatorStateFacts(state="ready")


def source(ready: tuple[str, str, str] = ("True", "Succeeded", "stored index")) -> FluxObjectFacts:
    """The HelmRepository as source-controller writes it."""
    return flux_object_facts({
        "kind": "HelmRepository",
        "metadata": {"name": "gpu-operator", "namespace": "kyma-system", "generation": 1},
        "status": {"observedGeneration": 1, "conditions": [{
            "type": "Ready", "status": ready[0], "reason": ready[1], "message": ready[2],
            "observedGeneration": 1}]},
    })  # fmt: skip


ALL_READY = Evidence(
    helm_release=hr(),
    chart_source=source(),
    daemonsets=(DRIVER_READY, *OPERANDS),
    cluster_policy=CP_READY,
)


def world(**changes: Any) -> Evidence:
    fields: dict[str, Any] = {
        "helm_release": ALL_READY.helm_release,
        "chart_source": ALL_READY.chart_source,
        "daemonsets": ALL_READY.daemonsets,
        "cluster_policy": ALL_READY.cluster_policy,
    }
    fields.update(changes)
    return Evidence(**fields)


Expect = dict[str, tuple[str, str]]

CASES: list[Any] = [
    pytest.param(
        "gl",
        world(
            chart_source=source(("False", "FetchFailed", "failed to fetch Helm repository index"))
        ),
        GpuState.WARNING,
        {"ReleaseReady": ("True", "InstallSucceeded"), "SourceReady": ("False", "FetchFailed")},
        id="release-installed-source-broken",
    ),
    pytest.param(
        "gl",
        world(
            helm_release=hr(ready=("False", "InstallFailed")),
            chart_source=source(("False", "FetchFailed", "connection refused")),
        ),
        GpuState.ERROR,
        {"ReleaseReady": ("False", "InstallFailed"), "SourceReady": ("False", "FetchFailed")},
        id="release-failed-source-broken",
    ),
    pytest.param(
        "gl",
        world(chart_source=None),
        GpuState.READY,
        {"SourceReady": ("Unknown", "WaitingForSource")},
        id="source-not-observed",
    ),
    pytest.param(
        "gl",
        world(helm_release=None),
        GpuState.PROCESSING,
        {"Ready": ("False", "Processing"), "ReleaseReady": ("Unknown", "ReleasePending")},
        id="helmrelease-missing",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(generation=3, observed=2, ready_generation=2)),
        GpuState.PROCESSING,
        {"ReleaseReady": ("Unknown", "Progressing")},
        id="generation-not-observed",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(generation=3, observed=2, ready=("False", "SourceNotReady"))),
        GpuState.ERROR,
        {"ReleaseReady": ("False", "SourceNotReady")},
        id="condition-current-while-status-lags-source-broken",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(generation=3, observed=3, ready_generation=2)),
        GpuState.PROCESSING,
        {"ReleaseReady": ("Unknown", "Progressing")},
        id="ready-of-an-old-generation-ignored",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(ready=None)),
        GpuState.PROCESSING,
        {"ReleaseReady": ("Unknown", "Progressing")},
        id="no-ready-condition-yet",
    ),
    pytest.param(
        "gl",
        ALL_READY,
        GpuState.READY,
        {
            "Ready": ("True", "Ready"),
            "NodesDetected": ("True", "GpuNodesFound"),
            "Preflight": ("True", "PreflightPassed"),
            "ReleaseReady": ("True", "InstallSucceeded"),
            "DriverReady": ("True", "DriverDaemonSetsReady"),
            "ComponentsReady": ("True", "ComponentsReady"),
        },
        id="ready",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(ready=("False", "InstallFailed"), stalled=True)),
        GpuState.ERROR,
        {"Ready": ("False", "Error"), "ReleaseReady": ("False", "InstallFailed")},
        id="install-failed-stalled",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(ready=("False", "UpgradeFailed"))),
        GpuState.ERROR,
        {"ReleaseReady": ("False", "UpgradeFailed")},
        id="upgrade-failed",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(ready=("False", "Progressing"))),
        GpuState.PROCESSING,
        {"Ready": ("False", "Processing"), "ReleaseReady": ("False", "Progressing")},
        id="progressing",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(ready=("False", "ProgressingWithRetry"))),
        GpuState.PROCESSING,
        {"ReleaseReady": ("False", "ProgressingWithRetry")},
        id="retrying",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(ready=("False", "ProgressingWithRetry"), stalled=True)),
        GpuState.ERROR,
        {"ReleaseReady": ("False", "ProgressingWithRetry")},
        id="stalled",
    ),
    pytest.param(
        "gl",
        world(helm_release=hr(ready=("Unknown", "Progressing"), reconciling="UpgradeInProgress")),
        GpuState.PROCESSING,
        {"ReleaseReady": ("Unknown", "UpgradeInProgress")},
        id="reconciling",
    ),
    pytest.param(
        "gl",
        world(cluster_policy=OperatorStateFacts(state="notReady", message="driver down")),
        GpuState.PROCESSING,
        {
            "ComponentsReady": ("False", "ComponentsNotReady"),
            "DriverReady": ("True", "DriverDaemonSetsReady"),
        },
        id="clusterpolicy-not-ready",
    ),
    pytest.param(
        "gl",
        world(cluster_policy=OperatorStateFacts(state="notReady"), nodes_without_features=("n1",)),
        GpuState.PROCESSING,
        {"ComponentsReady": ("False", "NodeFeaturesMissing")},
        id="nfd-labels-missing",
    ),
    pytest.param(
        "gl",
        world(nodes_without_features=("n1",)),
        GpuState.PROCESSING,
        {"ComponentsReady": ("False", "NodeFeaturesMissing")},
        id="nfd-labels-missing-policy-ready",
    ),
    pytest.param(
        "gl",
        world(cluster_policy=None, daemonsets=(), nodes_without_features=("n1",)),
        GpuState.PROCESSING,
        {"ComponentsReady": ("Unknown", "WaitingForComponents")},
        id="nfd-labels-missing-before-the-chart",
    ),
    pytest.param(
        "gl",
        world(
            cluster_policy=OperatorStateFacts(
                "ready", gpu_nodes_seen=False, ready_reason="NoGPUNodes"
            )
        ),
        GpuState.PROCESSING,
        {"ComponentsReady": ("False", "ComponentsNotReady")},
        id="clusterpolicy-ready-before-it-saw-the-gpu-nodes",
    ),
    pytest.param(
        "gl",
        world(cluster_policy=OperatorStateFacts(state="ignored")),
        GpuState.PROCESSING,
        {"ComponentsReady": ("False", "ComponentsNotReady")},
        id="clusterpolicy-ignored",
    ),
    pytest.param(
        "gl",
        world(cluster_policy=None, daemonsets=(DRIVER_READY,)),
        GpuState.PROCESSING,
        {"ComponentsReady": ("Unknown", "WaitingForComponents")},
        id="nothing-deployed-yet",
    ),
    pytest.param(
        "gl",
        world(cluster_policy=None),
        GpuState.PROCESSING,
        {"ComponentsReady": ("False", "ComponentsNotReady")},
        id="clusterpolicy-without-status",
    ),
    pytest.param(
        "gl",
        world(daemonsets=OPERANDS),
        GpuState.PROCESSING,
        {"DriverReady": ("Unknown", "WaitingForDriver")},
        id="no-driver-daemonset-yet",
    ),
    pytest.param(
        "gl",
        world(daemonsets=(ds(DRIVER_DS, 2, 1, unavailable=1, strategy="OnDelete"), *OPERANDS)),
        GpuState.PROCESSING,
        {"DriverReady": ("False", "DriverNotReady")},
        id="driver-unavailable",
    ),
    pytest.param(
        "gl",
        world(daemonsets=(DRIVER_READY, ds("nvidia-device-plugin-daemonset", 2, updated=1))),
        GpuState.PROCESSING,
        {"ComponentsReady": ("False", "ComponentsNotReady")},
        id="rolling-update-not-updated",
    ),
    pytest.param(
        "warning",
        world(daemonsets=(UPSTREAM_DRIVER, *OPERANDS)),
        GpuState.WARNING,
        {"Ready": ("True", "Ready"), "Preflight": ("False", "UnknownOs")},
        id="preflight-warning",
    ),
    pytest.param(
        "error",
        world(helm_release=None),
        GpuState.ERROR,
        {
            "Ready": ("False", "Error"),
            "Preflight": ("False", "UnknownInstallerRelease"),
            "ReleaseReady": ("False", "NotApplied"),
        },
        id="preflight-error",
    ),
    pytest.param(
        "gl",
        world(applied=False, apply_error="422 Unprocessable Entity"),
        GpuState.ERROR,
        {"ReleaseReady": ("False", "ApplyFailed")},
        id="apply-failed",
    ),
    pytest.param(
        "gl",
        world(deleting=True),
        GpuState.DELETING,
        {"Ready": ("False", "Deleting"), "ReleaseReady": ("Unknown", "Uninstalling")},
        id="deleting",
    ),
    pytest.param(
        "preinstalled",
        world(daemonsets=OPERANDS),
        GpuState.READY,
        {"DriverReady": ("True", "DriverPreinstalled")},
        id="preinstalled",
    ),
    pytest.param(
        "no-gpu",
        world(daemonsets=()),
        GpuState.READY,
        {
            "Ready": ("True", "Ready"),
            "NodesDetected": ("False", "NoGpuNodes"),
            "Preflight": ("True", "PreflightPassed"),
            "DriverReady": ("True", "NoGpuNodes"),
        },
        id="no-gpu-nodes",
    ),
    pytest.param(
        "no-gpu",
        world(helm_release=None, daemonsets=()),
        GpuState.PROCESSING,
        {"DriverReady": ("Unknown", "NoGpuNodes")},
        id="no-gpu-nodes-release-pending",
    ),
]


@pytest.mark.parametrize(("plan_key", "observed", "state", "expect"), CASES)
def test_aggregate(
    plans: dict[str, Plan], plan_key: str, observed: Evidence, state: GpuState, expect: Expect
) -> None:
    status = aggregate(plans[plan_key], observed, generation=5, now="2026-11-30T08:00:00Z")
    assert status.state is state, status.message
    got = {c.type: (c.status, c.reason) for c in status.conditions}
    for type_, wanted in expect.items():
        assert got[type_] == wanted, (type_, status.conditions)
    assert status.conditions[0].type == "Ready"
    assert [c.type for c in status.conditions][1:7] == [
        "NodesDetected",
        "Preflight",
        "ReleaseReady",
        "SourceReady",
        "DriverReady",
        "ComponentsReady",
    ]
    assert all(c.observed_generation == 5 for c in status.conditions)
    assert status.observed_generation == 5
    assert status.message
    assert "\n" not in status.message


def test_status_fields(plans: dict[str, Plan]) -> None:
    status = aggregate(plans["gl"], ALL_READY, generation=1)
    assert status.message == "the GPU stack is installed and ready"
    assert status.gpu_node_count == 1
    assert [n.name for n in status.nodes] == ["gl-1"]
    assert [c.name for c in status.components] == sorted(d.name for d in ALL_READY.daemonsets)
    assert all(c.ready for c in status.components)
    assert status.driver_mode == "Precompiled"
    assert status.desired_driver_version == "590"
    assert status.driver_version is None  # the driver DaemonSet has not rolled out: no pod yet
    assert status.installer_release == "1.17.0"
    assert status.chart_version == "v26.7.0"
    assert status.installed_chart_version == "v26.7.0"
    assert status.helm_release == "kyma-system/gpu-operator"
    upstream = aggregate(plans["upstream"], ALL_READY, generation=1)
    assert (upstream.driver_mode, upstream.desired_driver_version) == ("Upstream", "595.91.07")
    preinstalled = aggregate(plans["preinstalled"], world(daemonsets=OPERANDS), generation=1)
    assert (preinstalled.driver_version, preinstalled.desired_driver_version) == (None, None)
    error = aggregate(plans["error"], Evidence(), generation=1)
    assert error.helm_release is None


def test_messages_say_why(plans: dict[str, Plan]) -> None:
    failed = aggregate(
        plans["gl"], world(helm_release=hr(ready=("False", "InstallFailed"))), generation=1
    )
    assert failed.message == "HelmRelease kyma-system/gpu-operator: Helm says InstallFailed"
    driver = aggregate(
        plans["gl"],
        world(daemonsets=(ds(DRIVER_DS, 3, 1, strategy="OnDelete"), *OPERANDS)),
        generation=1,
    )
    assert driver.message == f"DriverReady: not ready: {DRIVER_DS} (1/3 available)"
    policy = aggregate(
        plans["gl"], world(cluster_policy=OperatorStateFacts("notReady", "no driver")), 1
    )
    assert "ClusterPolicy cluster-policy is notReady (no driver)" in policy.message


@pytest.mark.parametrize(
    ("facts", "ready"),
    [
        pytest.param(ds("a", 0, 0), True, id="desired-0"),
        pytest.param(ds("a", 0, 0, observed=None, generation=9), True, id="desired-0-unobserved"),
        pytest.param(ds("a", 3), True, id="all-available-and-updated"),
        pytest.param(ds("a", 3, 2, unavailable=1), False, id="unavailable"),
        pytest.param(ds("a", 3, 2), False, id="available-short-without-unavailable-field"),
        pytest.param(ds("a", 3, 3, unavailable=0, updated=2), False, id="rolling-not-updated"),
        pytest.param(ds("a", 3, generation=2, observed=1), False, id="generation-not-observed"),
        pytest.param(ds("a", 3, generation=2, observed=None), False, id="never-observed"),
        pytest.param(
            ds(DRIVER_DS, 3, updated=0, generation=4, observed=3, strategy="OnDelete"),
            True,
            id="ondelete-driver-not-updated",
        ),
        pytest.param(
            ds(DRIVER_DS, 3, 2, unavailable=1, strategy="OnDelete"),
            False,
            id="ondelete-unavailable",
        ),
    ],
)
def test_daemonset_readiness(facts: DaemonSetFacts, ready: bool) -> None:
    assert facts.ready is ready


def test_driver_daemonsets_are_known_by_their_component_label(plans: dict[str, Plan]) -> None:
    """Per-pool NVIDIADriver DaemonSets are named nvidia-gpu-driver-<os>-<hash>, not
    nvidia-driver-daemonset*; the component label is what both share."""
    per_pool = ds("nvidia-gpu-driver-ubuntu22.04-7c9f8d6b5", desired=1, available=0)
    assert per_pool.driver
    assert not ds("nvidia-device-plugin-daemonset").driver
    observed = world(daemonsets=(per_pool, *OPERANDS))
    status = aggregate(plans["gl"], observed, generation=1)
    driver = next(c for c in status.conditions if c.type == "DriverReady")
    assert (driver.status, driver.reason) == ("False", "DriverNotReady")


def test_daemonset_facts_of_a_fresh_body() -> None:
    facts = daemonset_facts({"metadata": {"name": "fresh"}})
    assert facts == DaemonSetFacts(
        name="fresh",
        generation=0,
        observed_generation=None,
        desired=0,
        available=0,
        unavailable=0,
        updated=0,
        strategy="RollingUpdate",
    )


def test_sharing_consumers_keep_the_config_maps_they_mount() -> None:
    pod = {"volumes": [{"name": "a", "configMap": {"name": "cm-b"}}, {"name": "host"},
                       {"name": "c", "configMap": {"name": "cm-a"}}]}  # fmt: skip
    body: dict[str, Any] = {"spec": {"template": {"spec": pod}}}
    for app in ("nvidia-device-plugin-daemonset", "nvidia-device-plugin-mps-control-daemon"):
        body["metadata"] = {"name": app, "labels": {"app": app}}
        facts = daemonset_facts(body)
        assert (facts.sharing_consumer, facts.config_maps) == (True, ("cm-a", "cm-b"))
    body["metadata"] = {"name": "nvidia-dcgm-exporter", "labels": {"app": "nvidia-dcgm-exporter"}}
    exporter = daemonset_facts(body)
    assert (exporter.sharing_consumer, exporter.config_maps) == (False, ())


def test_missing_node_features_are_named_with_the_next_step(plans: dict[str, Plan]) -> None:
    nodes = tuple(f"node-{i}" for i in range(7))
    observed = world(cluster_policy=OperatorStateFacts("notReady"), nodes_without_features=nodes)
    status = aggregate(plans["gl"], observed, generation=1)
    components = next(c for c in status.conditions if c.type == "ComponentsReady")
    assert "node-0, node-1, node-2, node-3, node-4 and 2 more" in components.message
    assert "system-os_release.ID" in components.message
    assert "-l role=worker" in components.message
    assert status.message == f"ComponentsReady: {components.message}"


@pytest.mark.parametrize(
    ("body", "facts"),
    [
        # the state is written first, the Ready condition next: not yet known to have seen one
        ({"status": {"state": "ready"}}, OperatorStateFacts("ready", gpu_nodes_seen=False)),
        (
            {
                "status": {
                    "state": "ready",
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "Reconciled"},
                        {"type": "Error", "status": "False", "reason": "Ready"},
                    ],
                }
            },
            OperatorStateFacts("ready", ready_reason="Reconciled"),
        ),
        (
            {
                "status": {
                    "state": "ready",
                    "conditions": [{"type": "Ready", "status": "True", "reason": "NoGPUNodes"}],
                }
            },
            OperatorStateFacts("ready", gpu_nodes_seen=False, ready_reason="NoGPUNodes"),
        ),
        (
            {
                "status": {
                    "state": "ready",
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "NFDLabelsMissing"}
                    ],
                }
            },
            OperatorStateFacts("ready", gpu_nodes_seen=False, ready_reason="NFDLabelsMissing"),
        ),
        (
            {
                "status": {
                    "state": "notReady",
                    "conditions": [
                        {"type": "Ready", "status": "False", "message": "x"},
                        {"type": "Error", "status": "True", "message": "driver pods failing"},
                        "garbage",
                    ],
                }
            },
            OperatorStateFacts("notReady", "driver pods failing"),
        ),
        ({"status": {"state": "ignored"}}, OperatorStateFacts("ignored")),
        ({}, OperatorStateFacts(None)),
    ],
)
def test_cluster_policy_facts(body: dict[str, Any], facts: OperatorStateFacts) -> None:
    assert cluster_policy_facts(body) == facts


def test_helm_release_facts() -> None:
    facts = hr(deployed=None)
    assert facts.installed_chart_version is None
    assert facts.condition("Ready") is not None
    assert facts.condition("Stalled") is None
    failed = flux_object_facts(
        {"status": {"history": [{"chartVersion": "v26.7.0", "status": "failed"}]}}
    )
    assert failed.installed_chart_version is None
    assert failed.generation == 0
    assert flux_object_facts({}).conditions == ()


def test_transition_times_move_only_on_a_change(plans: dict[str, Plan]) -> None:
    pending = world(helm_release=None)
    first = aggregate(plans["gl"], pending, 1, now="2026-11-30T08:00:00Z")
    assert {c.last_transition_time for c in first.conditions} == {"2026-11-30T08:00:00Z"}

    same = aggregate(plans["gl"], pending, 1, first.conditions, now="2026-11-30T09:00:00Z")
    assert same == first  # an unchanged world yields an identical status: nothing to write

    ready = aggregate(plans["gl"], ALL_READY, 1, first.conditions, now="2026-11-30T10:00:00Z")
    times = {c.type: c.last_transition_time for c in ready.conditions}
    assert times["ReleaseReady"] == "2026-11-30T10:00:00Z"
    assert times["Ready"] == "2026-11-30T10:00:00Z"
    assert times["NodesDetected"] == "2026-11-30T08:00:00Z"
    assert times["Preflight"] == "2026-11-30T08:00:00Z"


def test_aggregate_is_idempotent(plans: dict[str, Plan]) -> None:
    for observed in (ALL_READY, world(helm_release=None), world(deleting=True)):
        for plan in plans.values():
            one = aggregate(plan, observed, 3, now="2026-11-30T08:00:00Z")
            two = aggregate(plan, observed, 3, now="2026-11-30T08:00:00Z")
            assert one == two
            again = aggregate(plan, observed, 3, one.conditions, now="2026-12-01T00:00:00Z")
            assert again == one
            assert again.model_dump_json() == one.model_dump_json()


def test_source_catching_up_is_progress_not_failure(plans: dict[str, Plan]) -> None:
    """helm-controller says SourceNotReady while source-controller fetches a new chart version."""
    body = {
        "metadata": {"name": "gpu-operator", "namespace": "kyma-system", "generation": 4},
        "status": {"observedGeneration": 3, "conditions": [{
            "type": "Ready", "status": "False", "reason": "SourceNotReady",
            "observedGeneration": 4,
            "message": "HelmChart 'kyma-system/kyma-system-gpu-operator' is not ready: "
                       "latest generation of object has not been reconciled"}]},
    }  # fmt: skip

    judgement = release_ready(plans["gl"], flux_object_facts(body), None, 1)
    cond = judgement.condition
    assert (cond.status, cond.reason, judgement.error) == ("False", "SourceNotReady", "")


UBUNTU_DRIVER_IMAGE = "nvcr.io/nvidia/driver:570.124.06-ubuntu22.04"


@pytest.mark.parametrize(
    ("image", "version"),
    [
        (GL_DRIVER_IMAGE, "590"),
        (UBUNTU_DRIVER_IMAGE, "570.124.06"),
        ("registry.local:5000/nvidia/driver:580.65.06", "580.65.06"),
        ("nvcr.io/nvidia/driver@sha256:" + "a" * 64, None),
        ("nvcr.io/nvidia/driver:latest", None),
        ("driver", None),
    ],
)
def test_driver_image_version(image: str, version: str | None) -> None:
    assert driver_image_version(image) == version


def test_the_driver_version_is_what_the_driver_daemonsets_run() -> None:
    gl = ds(DRIVER_DS, 2, strategy="OnDelete")
    ubuntu = ds("nvidia-gpu-driver-ubuntu22.04-7c9f", image=UBUNTU_DRIVER_IMAGE)
    assert running_driver_version([gl], None) == "590"
    assert running_driver_version([gl, ubuntu], None) == "570.124.06, 590"
    assert running_driver_version([*OPERANDS], "590") is None  # no driver DaemonSet: none
    # Scaled to zero: the DaemonSet stays, no pod runs.
    assert running_driver_version([ds(DRIVER_DS, 0)], "590") is None
    # A rollout (OnDelete): the new template reached no pod yet, then one of two.
    image_580 = GL_DRIVER_IMAGE.replace(":590-", ":580-")
    new = ds(DRIVER_DS, 2, generation=3, observed=3, updated=0, strategy="OnDelete",
             image=image_580)  # fmt: skip
    assert running_driver_version([new], "590") == "590"
    half = ds(DRIVER_DS, 2, generation=3, observed=3, updated=1, strategy="OnDelete",
              image=image_580)  # fmt: skip
    assert running_driver_version([half], "590") == "580, 590"
    assert running_driver_version([half], "580, 590") == "580, 590"
    done = ds(DRIVER_DS, 2, generation=3, observed=3, strategy="OnDelete", image=image_580)
    assert running_driver_version([done], "580, 590") == "580"
    # The controller has not seen the new template yet: its counts speak of the old one.
    stale = ds(DRIVER_DS, 2, generation=4, observed=3, image=image_580)
    assert running_driver_version([stale], "590") == "590"
    assert running_driver_version([half], "not a version, 590") == "580, 590"


def test_ready_nodes_are_counted_from_the_daemonsets(plans: dict[str, Plan]) -> None:
    plugin = ds("nvidia-device-plugin-daemonset", 3, 3, ready=2)
    assert nodes_ready([ds(DRIVER_DS, 3), plugin], 3) == 2  # the device plugin decides
    assert nodes_ready([ds(DRIVER_DS, 3, ready=1)], 3) == 1  # without it, the driver
    assert nodes_ready([ds(DRIVER_DS, 5)], 3) == 3  # never more than the GPU nodes
    assert nodes_ready([], 3) == 0
    status = aggregate(plans["gl"], world(daemonsets=(DRIVER_READY, plugin)), generation=1)
    assert (status.gpu_nodes_ready, status.ready_nodes, status.gpu_node_count) == (1, "1/1", 1)
    empty = aggregate(plans["gl"], Evidence(), generation=1)
    assert (empty.gpu_nodes_ready, empty.ready_nodes) == (0, "0/1")


def test_no_gpu_nodes_is_ready_and_says_the_pool_may_be_scaled_to_zero(
    plans: dict[str, Plan],
) -> None:
    """A GPU pool with autoscaler minimum 0 has no nodes for hours: a normal state."""
    sets = (ds("nvidia-device-plugin-daemonset", 0), ds("nvidia-dcgm-exporter", 0))
    status = aggregate(plans["no-gpu"], world(daemonsets=sets), generation=1)
    assert status.state is GpuState.READY
    assert "scaled to zero" in status.message
    nodes = next(c for c in status.conditions if c.type == "NodesDetected")
    assert (nodes.status, nodes.reason) == ("False", "NoGpuNodes")
    assert nodes.message.startswith("no GPU nodes right now; the GPU worker pool may be scaled")
    # the NVIDIA operator agrees that there is no GPU node: still Ready
    agreeing = OperatorStateFacts("ready", gpu_nodes_seen=False, ready_reason="NoGPUNodes")
    world_agreeing = world(daemonsets=sets, cluster_policy=agreeing)
    assert aggregate(plans["no-gpu"], world_agreeing, generation=1).state is GpuState.READY
    preflight = next(c for c in status.conditions if c.type == "Preflight")
    assert preflight.status == "True"
    assert "no GPU nodes detected" in preflight.message  # the plan's finding, as information
    assert (status.ready_nodes, status.driver_version) == ("0/0", None)
    # Other warnings still count.
    warned = aggregate(plans["warning"], world(daemonsets=(UPSTREAM_DRIVER, *OPERANDS)), 1)
    assert warned.state is GpuState.WARNING


UP = DriverUpgradeState


def _driver(status: GpuStatus) -> Condition:
    return next(c for c in status.conditions if c.type == "DriverReady")


def test_a_driver_rollout_holds_ready_and_says_where_it_is(plans: dict[str, Plan]) -> None:
    """The old driver pods are ready (OnDelete) while the upgrade controller works its way."""
    upgrades = (("gl-1", UP.POD_RESTART_REQUIRED), ("gl-2", UP.DONE))
    status = aggregate(plans["gl"], world(driver_upgrades=upgrades), generation=1)
    driver = _driver(status)
    assert (driver.status, driver.reason) == ("False", "DriverUpgrading")
    assert status.state is GpuState.PROCESSING
    assert status.message.startswith("DriverReady: the NVIDIA upgrade controller replaces")
    assert "(1/2 nodes upgrade-done; pod-restart-required: gl-1)" in status.message


def test_a_rollout_names_the_driver_daemonsets_not_ready(plans: dict[str, Plan]) -> None:
    restarting = ds(DRIVER_DS, 2, 1, unavailable=1, strategy="OnDelete")
    observed = world(daemonsets=(restarting, *OPERANDS),
                     driver_upgrades=(("gl-1", UP.POD_RESTART_REQUIRED),))  # fmt: skip
    message = _driver(aggregate(plans["gl"], observed, generation=1)).message
    assert message.endswith(f"; not ready: {DRIVER_DS} (1/2 available)")


def _components(status: GpuStatus) -> Condition:
    return next(c for c in status.conditions if c.type == "ComponentsReady")


@pytest.mark.parametrize(
    ("daemonset", "said"),
    [
        (
            ds("nvidia-device-plugin-daemonset", 2, updated=1),
            "nvidia-device-plugin-daemonset (2/2 available, 1/2 on its new template: rolling out)",
        ),
        (
            ds("nvidia-device-plugin-daemonset", 2, generation=2, observed=1),
            "nvidia-device-plugin-daemonset (2/2 available; the DaemonSet controller has not yet "
            "seen its new template)",
        ),
        (
            ds("nvidia-device-plugin-daemonset", 2, 1),
            "nvidia-device-plugin-daemonset (1/2 available)",
        ),
    ],
    ids=["rolling-out", "not-yet-observed", "unavailable"],
)
def test_a_daemonset_not_ready_says_why(
    plans: dict[str, Plan], daemonset: DaemonSetFacts, said: str
) -> None:
    """All pods available and still not ready reads as a contradiction ("(2/2)"): say why."""
    status = aggregate(plans["gl"], world(daemonsets=(DRIVER_READY, daemonset)), generation=1)
    assert _components(status).message.endswith(f"not ready: {said}")


def test_a_failed_driver_upgrade_is_an_error(plans: dict[str, Plan]) -> None:
    upgrades = (("gl-1", UP.FAILED), ("gl-2", UP.UPGRADE_REQUIRED))
    status = aggregate(plans["gl"], world(driver_upgrades=upgrades), generation=1)
    assert (_driver(status).status, _driver(status).reason) == ("False", "DriverUpgradeFailed")
    assert status.state is GpuState.ERROR
    assert status.message.startswith("the NVIDIA driver upgrade failed on 1 node: gl-1 ")


def test_nodes_done_with_the_rollout_hold_nothing(plans: dict[str, Plan]) -> None:
    upgrades = (("gl-1", UP.DONE), ("gl-2", UP.DONE))
    status = aggregate(plans["gl"], world(driver_upgrades=upgrades), generation=1)
    assert (_driver(status).status, _driver(status).reason) == ("True", "DriverDaemonSetsReady")
    assert status.state is GpuState.READY
    assert status == aggregate(plans["gl"], world(), generation=1)


def _gl_plan(catalog: Catalog, version: str) -> Plan:
    facts = facts_of(catalog.machine_types, node("gl-1"), node("gl-2"))
    spec = GpuSpec.model_validate({"driver": {"version": version}})
    return make_plan(spec, facts, catalog, Owner(uid=UID))


def test_a_version_change_is_not_ready_before_the_new_driver_template(catalog: Catalog) -> None:
    """590 -> 580: until the NVIDIA operator renders the 580 driver DaemonSet, the old one
    reads ready and no node has an upgrade label; the Gpu must not say Ready in between."""
    old = ds(DRIVER_DS, 2, strategy="OnDelete")
    status = aggregate(_gl_plan(catalog, "580"), world(daemonsets=(old, *OPERANDS)), 1)
    driver = _driver(status)
    assert (driver.status, driver.reason) == ("False", "DriverVersionPending")
    assert status.state is GpuState.PROCESSING
    assert driver.message == (
        f"the NVIDIA operator has not yet rendered driver 580: {DRIVER_DS} (590) still runs "
        "another driver"
    )
    new = ds(DRIVER_DS, 2, strategy="OnDelete", image=GL_DRIVER_IMAGE.replace(":590-", ":580-"))
    status = aggregate(_gl_plan(catalog, "580"), world(daemonsets=(new, *OPERANDS)), 1)
    assert (_driver(status).reason, status.state) == ("DriverDaemonSetsReady", GpuState.READY)
    # The branch's full version plans the same precompiled image; a digest names no version.
    by_digest = ds(DRIVER_DS, 2, strategy="OnDelete", image=f"{INSTALLER}/driver@sha256:{'0' * 64}")
    status = aggregate(_gl_plan(catalog, "580"), world(daemonsets=(by_digest, *OPERANDS)), 1)
    assert _driver(status).reason == "DriverDaemonSetsReady"


def test_a_new_driver_template_is_not_ready_before_the_controller_begins(catalog: Catalog) -> None:
    """The 580 DaemonSet is rendered (OnDelete), its pods still run 590 and no node is labelled
    yet: the rollout is due, not done. Without autoUpgrade nobody replaces them."""
    image = GL_DRIVER_IMAGE.replace(":590-", ":580-")
    due = ds(DRIVER_DS, 2, strategy="OnDelete", updated=0, generation=3, observed=3, image=image)
    status = aggregate(_gl_plan(catalog, "580"), world(daemonsets=(due, *OPERANDS)), 1)
    driver = _driver(status)
    assert (driver.status, driver.reason, status.state) == (
        "False", "DriverUpgrading", GpuState.PROCESSING)  # fmt: skip
    assert driver.message == (
        "the NVIDIA upgrade controller has not yet begun to replace the driver: "
        f"{DRIVER_DS} (0/2 pods on its new template)"
    )
    facts = facts_of(catalog.machine_types, node("gl-1"), node("gl-2"))
    manual = GpuSpec.model_validate(
        {"driver": {"version": "580", "upgradePolicy": {"autoUpgrade": False}}})  # fmt: skip
    plan = make_plan(manual, facts, catalog, Owner(uid=UID))
    status = aggregate(plan, world(daemonsets=(due, *OPERANDS)), 1)
    assert _driver(status).reason == "DriverDaemonSetsReady"


def test_preinstalled_drivers_ignore_stale_upgrade_labels(plans: dict[str, Plan]) -> None:
    observed = world(driver_upgrades=(("flat", UP.UPGRADE_REQUIRED),))
    driver = _driver(aggregate(plans["preinstalled"], observed, generation=1))
    assert (driver.status, driver.reason) == ("True", "DriverPreinstalled")


# -- worker pools: one blocked pool never makes the fleet Error ---------------------------


@pytest.fixture(scope="module")
def pool_plans(catalog: Catalog) -> dict[str, Plan]:
    def plan(*bodies: Mapping[str, Any]) -> Plan:
        facts = facts_of(catalog.machine_types, *bodies)
        return make_plan(GpuSpec(), facts, catalog, Owner(uid=UID))

    good = (node("gl-1"), node("gl-2"))
    past = node("new-1", os_image="Garden Linux 2150.10.0", pool="gpu-new")
    return {"one-blocked": plan(*good, past), "all-blocked": plan(past), "served": plan(*good)}


def _conditions(status: GpuStatus) -> dict[str, Condition]:
    return {c.type: c for c in status.conditions}


def test_a_blocked_pool_next_to_a_good_one_is_a_warning(pool_plans: dict[str, Plan]) -> None:
    plan = pool_plans["one-blocked"]
    assert plan.helm_release is not None, "the good pool is still planned and applied"
    status = aggregate(plan, world(), 5)
    assert status.state is GpuState.WARNING, status.message
    conditions = _conditions(status)
    assert (conditions["Ready"].status, conditions["Ready"].reason) == ("True", "Ready")
    assert (conditions["Preflight"].status, conditions["Preflight"].reason) == (
        "False", "NoDriverImage")  # fmt: skip
    pools = conditions["PoolsReady"]
    assert (pools.status, pools.reason) == ("False", "PoolBlocked")
    assert pools.message.startswith(
        "worker pool gpu-new is blocked (1 of 1 nodes get no working GPU: NoDriverImage); "
        "served: gpu"
    )
    assert "worker pool gpu-new (1 of 1 node: new-1): Garden Linux 2150.10.0" in status.message


def test_the_blocked_pools_driver_keeps_no_gate_waiting(pool_plans: dict[str, Plan]) -> None:
    """On a real cluster the blocked pool's driver pod never pulls its image: DriverReady stays
    False. While the device plugin runs on every node of the other pools, the Gpu is Warning
    (Ready True, reason Degraded), not Processing forever."""
    plan = pool_plans["one-blocked"]
    stuck = ds("nvidia-driver-daemonset-6.12.50-cloud-amd64-gardenlinux0", available=0,
               unavailable=1, strategy="OnDelete", updated=0, generation=2)  # fmt: skip
    plugin = ds("nvidia-device-plugin-daemonset", 3, 2, unavailable=1)
    observed = world(daemonsets=(DRIVER_READY, stuck, plugin), cluster_policy=None)
    status = aggregate(plan, observed, 5)
    ready = _conditions(status)["Ready"]
    assert status.state is GpuState.WARNING, status.message
    assert (ready.status, ready.reason) == ("True", "Degraded")
    assert ready.message.startswith("the GPU stack serves the 2 GPU nodes of the other pools; ")
    # One of the good pool's nodes is not served yet: still Processing.
    waiting = world(daemonsets=(DRIVER_READY, stuck, ds("nvidia-device-plugin-daemonset", 3, 1)))
    assert aggregate(plan, waiting, 5).state is GpuState.PROCESSING


def test_every_pool_blocked_is_an_error(pool_plans: dict[str, Plan]) -> None:
    plan = pool_plans["all-blocked"]
    assert plan.helm_release is None
    status = aggregate(plan, Evidence(), 5)
    assert status.state is GpuState.ERROR
    assert status.message.startswith("no GPU worker pool can be served, so nothing is applied: ")
    pools = _conditions(status)["PoolsReady"]
    assert (pools.status, pools.reason) == ("False", "PoolBlocked")
    assert pools.message.endswith("; no worker pool is served (the Preflight condition says why)")


def test_every_pool_served(pool_plans: dict[str, Plan], plans: dict[str, Plan]) -> None:
    pools = _conditions(aggregate(pool_plans["served"], ALL_READY, 5))["PoolsReady"]
    assert (pools.status, pools.reason, pools.message) == (
        "True", "PoolsServed", "every GPU worker pool is served: gpu (2)")  # fmt: skip
    none = _conditions(aggregate(plans["no-gpu"], ALL_READY, 5))["PoolsReady"]
    assert (none.status, none.reason) == ("True", "NoGpuNodes")


def test_reasons_are_typed_end_to_end() -> None:
    """`cond` takes a `Reason` (one of the module's enums, or Flux's word as `FluxMirrored`),
    and what feeds it is typed the same way: mypy --strict refuses a literal string there (a
    call with "Ready" fails it). These annotations are what that proof stands on."""
    assert get_type_hints(cond)["reason"] == Reason
    assert get_type_hints(FluxCondition)["reason"] is FluxMirrored
    assert get_type_hints(Wait)["type"] is StrEnum  # ConditionType, or an extension's enum
    assert get_type_hints(Wait)["reason"] is StrEnum


def test_a_clusterpolicy_ready_before_it_saw_the_gpu_nodes_is_not_ready(
    plans: dict[str, Plan],
) -> None:
    """The NVIDIA operator's pass before node-feature-discovery labelled the nodes deploys
    nothing and reports ready (NoGPUNodes): no device plugin runs yet, so no GPU pod could
    start, and the Gpu must not say Ready (seen in a CI run of test_driver_modes)."""
    early = OperatorStateFacts("ready", gpu_nodes_seen=False, ready_reason="NoGPUNodes")
    status = aggregate(plans["gl"], world(cluster_policy=early), generation=1)
    components = next(c for c in status.conditions if c.type == "ComponentsReady")
    assert status.state is GpuState.PROCESSING
    assert (components.status, components.reason) == ("False", "ComponentsNotReady")
    assert components.message == (
        "ClusterPolicy cluster-policy is ready (NoGPUNodes) but the NVIDIA operator has not "
        f"seen the {len(plans['gl'].nodes)} GPU nodes yet: it deploys the operands once "
        "node-feature-discovery has labelled them"
    )
    seen = OperatorStateFacts("ready", ready_reason="Reconciled")
    assert aggregate(plans["gl"], world(cluster_policy=seen), generation=1).state is GpuState.READY
