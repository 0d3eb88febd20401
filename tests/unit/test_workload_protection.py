"""Workload protection's part of the status (extensions/workload_protection/status.py): a
deletion waits while users' pods use GPUs, and says so in WorkloadsProtected and in Ready.
Removing the extension removes this file."""

from __future__ import annotations

import pytest

from kyma_gpu.api import GpuState
from kyma_gpu.plan import Plan
from tests.unit.test_status import aggregate, plans, world

__all__ = ("plans",)  # the fixture


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
    status = aggregate(plans["gl"], world(deleting=True, gpu_workloads=pods), generation=5)
    assert status.state is state, status.message
    got = {c.type: (c.status, c.reason) for c in status.conditions}
    for type_, wanted in expect.items():
        assert got[type_] == wanted, (type_, status.conditions)


def test_deletion_names_the_pods(plans: dict[str, Plan]) -> None:
    pods = tuple(f"ml/train-{i:02d}" for i in range(12))
    status = aggregate(plans["gl"], world(deleting=True, gpu_workloads=pods), generation=1)
    assert status.state is GpuState.WARNING
    assert status.message.startswith(
        "deletion waits for 12 pods that use GPUs: ml/train-00, ml/train-01"
    )
    assert "ml/train-09" in status.message
    assert "ml/train-10" not in status.message
    assert "and 2 more. Delete them, or annotate the Gpu with " in status.message
    assert status.message.endswith("skip-workload-protection=true to go ahead")
