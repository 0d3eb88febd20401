"""Workload protection (extensions/workload_protection/): which pods count as users' GPU pods
(pods.py), its part of the status (status.py): a deletion waits while users' pods use GPUs,
and says so in WorkloadsProtected and in Ready, and the loop that observes the pods only
while a deletion waits. Removing the extension removes this file."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kyma_gpu.api import GpuState
from kyma_gpu.extensions.workload_protection import EXTENSION
from kyma_gpu.extensions.workload_protection.conditions import WorkloadsReason
from kyma_gpu.extensions.workload_protection.machine import Phase as Protection
from kyma_gpu.extensions.workload_protection.pods import PODS, is_gpu_workload, requests_gpu
from kyma_gpu.extensions.workload_protection.status import (
    PODS_SHOWN,
    without_pod_names,
    workloads_wait,
)
from kyma_gpu.observe.informer import ListWatch
from kyma_gpu.observe.informers import Informers
from kyma_gpu.observe.store import Entry, Store, version_of
from kyma_gpu.observe.watches import FLUX
from kyma_gpu.plan import Plan
from kyma_gpu.reconcile.machine import Phase
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status.events import EventType, event_for
from tests.unit.test_loop import _condition as condition_of
from tests.unit.test_loop import installed, new_world
from tests.unit.test_observe import ScriptedReader
from tests.unit.test_status import aggregate, plans, world

__all__ = ("plans",)  # the fixture

assert EXTENSION.status is not None
REPORT = (EXTENSION.status,)
"""What workload protection says (its `Report`): its Events redact users' pod names."""


@pytest.mark.parametrize(
    ("pods", "state", "expect"),
    [
        pytest.param(
            ("ml/train-0", "ml/train-1"), GpuState.WARNING,
            {"Ready": ("False", "Deleting"), "ReleaseReady": ("Unknown", "Uninstalling"),
             "WorkloadsProtected": ("False", "GpuWorkloadsRunning")},
            id="deleting-with-gpu-pods",
        ),
        pytest.param(
            (), GpuState.DELETING,
            {"Ready": ("False", "Deleting"), "WorkloadsProtected": ("True", "NoGpuWorkloads")},
            id="deleting",
        ),
    ],
)  # fmt: skip
def test_a_deletion_shows_the_users_gpu_pods(
    plans: dict[str, Plan],
    pods: tuple[str, ...],
    state: GpuState,
    expect: dict[str, tuple[str, str]],
) -> None:
    status = aggregate(plans["gl"], world(deleting=True, observed={PODS: pods}), generation=5)
    assert status.state is state, status.message
    got = {c.type: (c.status, c.reason) for c in status.conditions}
    for type_, wanted in expect.items():
        assert got[type_] == wanted, (type_, status.conditions)


def test_deletion_names_the_pods(plans: dict[str, Plan]) -> None:
    pods = tuple(f"ml/train-{i:02d}" for i in range(12))
    status = aggregate(plans["gl"], world(deleting=True, observed={PODS: pods}), generation=1)
    assert status.state is GpuState.WARNING
    assert status.message.startswith(
        "deletion waits for 12 pods that use GPUs: ml/train-00, ml/train-01"
    )
    assert "ml/train-09" in status.message
    assert "ml/train-10" not in status.message
    assert "and 2 more. Delete them, or annotate the Gpu with " in status.message
    assert status.message.endswith("skip-workload-protection=true to go ahead")


def test_one_pod_is_said_in_the_singular(plans: dict[str, Plan]) -> None:
    status = aggregate(plans["gl"], world(deleting=True, observed={PODS: ("ml/train",)}), 1)
    assert status.message == (
        "deletion waits for 1 pod that uses GPUs: ml/train. Delete it, or annotate the Gpu "
        "with gpu.kyma-project.io/skip-workload-protection=true to go ahead"
    )


@pytest.mark.parametrize(
    ("pod", "uses"),
    [
        ({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}, True),
        ({"spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": 2}}}]}}, True),
        ({"spec": {"initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}, True),
        ({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0"}}}]}}, False),
        # spec.sharing renameByDefault, and MIG instances of the Mixed strategy
        (
            {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]}},
            True,
        ),
        (
            {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]}},
            True,
        ),
        (
            {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpumem": "1000"}}}]}},
            False,
        ),
        ({"spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}}]}}, False),
        ({"spec": {"containers": [{}]}}, False),
        (
            {
                "status": {"phase": "Succeeded"},
                "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            },
            False,
        ),
        (
            {
                "status": {"phase": "Running"},
                "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            },
            True,
        ),
        ({}, False),
    ],
)
def test_requests_gpu(pod: dict[str, Any], uses: bool) -> None:
    assert requests_gpu(pod) is uses


def _gpu_pod(namespace: str, phase: str = "Pending", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": namespace, **meta},
        "status": {"phase": phase},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }


def _dra_pod(namespace: str, phase: str) -> dict[str, Any]:
    claim = {"name": "gpu", "resourceClaimTemplateName": "single-gpu"}
    return {
        "metadata": {"name": "p", "namespace": namespace},
        "status": {"phase": phase},
        "spec": {"containers": [{"resources": {"claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [claim]},
    }  # fmt: skip


STACK = ("kyma-system", "gpu-operator")


@pytest.mark.parametrize(
    ("pod", "counts"),
    [
        (_gpu_pod("ml"), True),
        (_gpu_pod("ml", "Running"), True),
        (_gpu_pod("gpu-operator"), False),  # a validator Pending on a broken stack
        (_gpu_pod("kyma-system", "Running"), False),
        (_gpu_pod("ml", deletionTimestamp="2026-12-01T00:00:00Z"), False),
        (_gpu_pod("ml", "Failed"), False),
        (_gpu_pod("ml", "Succeeded"), False),
        ({**_gpu_pod("ml"), "spec": {"containers": [{}]}}, False),
        (_dra_pod("ml", "Running"), True),  # a DRA claim (the GPU stack of issue 12)
        (_dra_pod("ml", "Succeeded"), False),
        (_dra_pod("gpu-operator", "Running"), False),
    ],
)
def test_only_users_gpu_pods_hold_a_deletion(pod: dict[str, Any], counts: bool) -> None:
    assert is_gpu_workload(pod, STACK) is counts


def test_deletion_waits_for_gpu_pods_then_uninstalls_then_releases(catalog: Catalog) -> None:
    world = installed(new_world(catalog))
    world.edit(deletionTimestamp="2026-11-30T10:00:00Z")
    assert world.run() is Protection.WAITING_FOR_WORKLOADS
    assert world.wanted[-1] == {PODS}
    assert world.api.calls == []
    world.store.replace(PODS, {"ml/train": Entry(None, "ml/train")}, None)
    assert world.run() is Protection.WAITING_FOR_WORKLOADS
    ready = next(c for c in world.api.gpu["status"]["conditions"] if c["type"] == "Ready")
    assert "ml/train" in ready["message"]
    world.store.put(PODS, "ml/train", None)
    assert world.run() is Phase.UNINSTALLING
    assert world.api.calls == ["delete HelmRelease", "delete HelmRepository", "status"]
    waits = [e.message for e in world.api.events if e.reason == "Deleting"]
    assert "deletion waits for 1 pod that uses GPUs" in waits[0]  # the wait began ...
    assert "ml/train" not in waits[0]  # (the status names users' pods, an Event does not)
    assert waits[1].startswith("Flux is uninstalling the GPU stack")  # ... and changed
    for plural in FLUX:
        world.store.replace(plural, {}, version_of(world.api.next_version()))
    assert world.run() is Phase.RELEASED
    assert world.api.calls == ["finalizers"]
    assert world.api.gpu["metadata"]["finalizers"] == []
    assert asyncio.run(world.loop.pass_for("gpu"))[1]  # the daemon ends


def test_the_skip_annotation_lets_a_deletion_pass_gpu_pods(catalog: Catalog) -> None:
    world = installed(new_world(catalog))
    world.edit(
        deletionTimestamp="2026-11-30T10:00:00Z",
        annotations={"gpu.kyma-project.io/skip-workload-protection": "true"},
    )
    assert world.run() is Phase.UNINSTALLING  # pods are not even looked at
    assert world.wanted[-1] == frozenset()
    assert world.api.calls == ["delete HelmRelease", "delete HelmRepository", "status"]
    skipped = condition_of(world, "WorkloadsProtected")
    assert (skipped["status"], skipped["reason"]) == ("False", "ProtectionSkipped")
    assert condition_of(world, "Uninstalled")["reason"] == "UninstallInProgress"
    assert world.api.gpu["status"]["state"] == "Deleting"


def test_the_users_gpu_pods_are_listed_only_while_a_deletion_wants_them() -> None:
    """The extension's list-watch on demand (`EXTENSION.watch`): `Informers.observe` starts it
    with the stack's namespaces, which the server leaves out (field selector), and stops it."""
    watch = EXTENSION.watch
    assert watch is not None
    made: list[ListWatch] = []

    def make(namespaces: tuple[str, ...]) -> ListWatch:
        made.append(watch.list_watch(namespaces))
        return made[-1]

    async def main() -> tuple[list[str], list[str]]:
        informers = Informers(ScriptedReader(pages=[[]]), Store(), asyncio.get_running_loop(),
                              on_demand={watch.resource: make})  # fmt: skip
        informers.start(Catalog().machine_types, "kyma-system", "gpu-operator")
        informers.observe({PODS})
        started = list(informers.running)
        informers.observe(frozenset())
        informers.stop()
        return started, list(informers.running)

    started, stopped = asyncio.run(main())
    assert (PODS in started, PODS in stopped, watch.resource) == (True, False, PODS)
    (pods,) = made
    assert pods.query.path == "/api/v1/pods"
    assert pods.query.field_selector == (
        "status.phase!=Succeeded,status.phase!=Failed,"
        "metadata.namespace!=kyma-system,metadata.namespace!=gpu-operator"
    )
    assert pods.fold(_gpu_pod("ml", "Running")) == "ml/p"
    assert pods.fold(_gpu_pod("gpu-operator", "Running")) is None


@pytest.mark.parametrize(
    ("pods", "skipped", "reason", "state"),
    [
        ((), False, WorkloadsReason.NO_GPU_WORKLOADS, GpuState.DELETING),
        (("ml/a",), False, WorkloadsReason.GPU_WORKLOADS_RUNNING, GpuState.WARNING),
        (("ml/a",), True, WorkloadsReason.PROTECTION_SKIPPED, GpuState.DELETING),
    ],
)
def test_workload_waits(
    pods: tuple[str, ...], skipped: bool, reason: WorkloadsReason, state: GpuState
) -> None:
    wait = workloads_wait(pods, skipped)
    assert (wait.reason, wait.state) == (reason, state)
    assert wait.status == ("False" if pods or skipped else "True")


# -- its Events name no user's pod (issue 32, finding 5) --

NAMED = ("ml/trainer", "research-2/batch.v1-0", *(f"team-{i}/job-{i}" for i in range(20)))


def _deleting(message: str) -> dict[str, Any]:
    ready = {"type": "Ready", "status": "False", "reason": "Deleting", "message": message}
    return {"state": "Warning", "message": message, "conditions": [ready]}


def test_the_workloads_message_loses_the_pod_names_and_keeps_the_count() -> None:
    for count in (1, 2, PODS_SHOWN, len(NAMED)):
        message = workloads_wait(NAMED[:count], skipped=False).message
        assert "ml/trainer" in message  # the status keeps naming them
        said = without_pod_names(message)
        assert not any(pod in said for pod in NAMED), said
        pods = "1 pod that uses GPUs" if count == 1 else f"{count} pods that use GPUs"
        them = "it" if count == 1 else "them"
        assert said.startswith(f"deletion waits for {pods} (the Gpu's condition "
                               f"WorkloadsProtected names {them}). Delete {them}, or ")  # fmt: skip
        assert said.endswith("skip-workload-protection=true to go ahead")
    other = "Flux is uninstalling the GPU stack: waiting for HelmRelease/kyma-system/x"
    assert without_pod_names(other) == other


def test_a_deletion_event_says_how_many_pods_and_not_which() -> None:
    two = _deleting(workloads_wait(NAMED[:2], skipped=False).message)
    event = event_for({}, two, REPORT)
    assert event is not None
    assert (event.type, event.reason) == (EventType.WARNING, "Deleting")
    assert "ml/trainer" not in event.message
    assert "deletion waits for 2 pods" in event.message
    # Other pods, as many: nothing new to say. One fewer: said.
    other = _deleting(workloads_wait(NAMED[2:4], skipped=False).message)
    assert event_for(two, other, REPORT) is None
    one = event_for(two, _deleting(workloads_wait(NAMED[:1], skipped=False).message), REPORT)
    assert one is not None
    assert "deletion waits for 1 pod that uses GPUs" in one.message
