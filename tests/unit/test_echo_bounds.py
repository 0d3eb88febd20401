"""Whatever other objects say, the Gpu's status and Events stay small (issue 43, point 5).

Text the module copies from other objects is cut once where it is folded into facts
(facts/echo.py), every message of the status again as a whole, and lists name a few and count
the rest. Here every input is hostile at once and as large as its writer can make it: 1,000
pending pods in gpu-operator with 10 kB image names, HelmRelease and chart source conditions
of 100 kB, a ClusterPolicy's state and error of 100 kB, 3,000 DaemonSets (1,000 of them
"drivers" of distinct versions), 300 GPU nodes with 253-character names, and a 100 kB error
from the API server. Before the cut, ComponentsReady alone quoted 50 kB of image names.
"""

from __future__ import annotations

from typing import Any

import pytest

from kyma_gpu.api import GpuSpec
from kyma_gpu.extensions import EXTENSIONS, MACHINE, NODE_FOLDS
from kyma_gpu.facts.echo import ELLIPSIS, MESSAGE_LIMIT, NAME_LIMIT, REASON_LIMIT, TEXT_LIMIT
from kyma_gpu.facts.gpu import GpuObject
from kyma_gpu.facts.node import observe_node
from kyma_gpu.facts.stack import (
    cluster_policy_facts,
    daemonset_facts,
    flux_object_facts,
    pull_failure,
)
from kyma_gpu.plan import make_plan
from kyma_gpu.plan.plan import Plan
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status.aggregate import STATUS_SIZE_LIMIT
from kyma_gpu.status.deletion import Uninstall
from kyma_gpu.status.events import MESSAGE_LIMIT as EVENT_MESSAGE_LIMIT
from kyma_gpu.status.events import events_for
from kyma_gpu.status.snapshot import Snapshot, gpu_status
from tests.unit.builders import facts_of, node

HUGE = 100_000
PODS = 1000
IMAGE = 10_000


def _long_name(prefix: str, i: int) -> str:
    """A valid Kubernetes name of 253 characters, the most the API server lets through."""
    tail = f"-{i:05d}"
    return prefix + "x" * (253 - len(prefix) - len(tail)) + tail


def _nodes(count: int) -> list[dict[str, Any]]:
    bodies = []
    for i in range(count):
        body = node(_long_name("gpu", i), os_image="Garden Linux " + "z" * HUGE,
                    provider_id="p" * HUGE + ":///x", pool=f"pool-{i:03d}" + "q" * 50,
                    arch="a" * HUGE, instance_type="t" * 63, nfd=i % 2 == 0)  # fmt: skip
        upgrade = "upgrade-failed" if i % 3 else "cordon-required"
        body["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] = upgrade
        bodies.append(body)
    return bodies


def _flux(kind: str, name: str) -> dict[str, Any]:
    condition = {"type": "Ready", "status": "False", "reason": "R" * HUGE,
                 "message": "Helm said: " + "m" * HUGE, "observedGeneration": 1}  # fmt: skip
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": "kyma-system", "generation": 1},
        "status": {"observedGeneration": 1, "conditions": [condition],
                   "history": [{"status": "deployed", "chartVersion": "v" * HUGE}]},
    }  # fmt: skip


def _pending_pod(i: int) -> dict[str, Any]:
    image = f"registry.example/{i:05d}/" + "i" * IMAGE + ":v1"
    waiting = {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "w" * HUGE}}}
    return {
        "metadata": {"name": _long_name("pod", i), "namespace": "gpu-operator"},
        "spec": {"nodeName": _long_name("node", i)},
        "status": {"containerStatuses": [{"image": image, **waiting}] * 3},
    }


def _daemonset(i: int) -> dict[str, Any]:
    driver = i < 1000
    labels = {"app": "x", **({"app.kubernetes.io/component": "nvidia-driver"} if driver else {})}
    image = f"nvcr.io/driver:5{i % 100:02d}.{i}.{i}-ubuntu22.04"
    return {
        "metadata": {"name": _long_name("ds", i), "generation": 1, "labels": labels},
        "spec": {"template": {"spec": {"containers": [{"name": "nvidia-driver-ctr",
                                                         "image": image}]}}},
        "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "numberAvailable": 0,
                   "updatedNumberScheduled": 1},
    }  # fmt: skip


def _snapshot(plan: Plan, nodes: list[dict[str, Any]], catalog: Catalog) -> Snapshot:
    assert plan.helm_release is not None
    assert plan.source is not None
    policy = {"status": {"state": "s" * HUGE, "conditions": [
        {"type": "Error", "status": "True", "message": "e" * HUGE}]}}  # fmt: skip
    return Snapshot(
        nodes=tuple(observe_node(n, catalog.machine_types, NODE_FOLDS) for n in nodes),
        flux_status=(
            flux_object_facts(_flux("HelmRelease", plan.helm_release["metadata"]["name"])),
            flux_object_facts(_flux(plan.source["kind"], plan.source["metadata"]["name"])),
        ),
        daemonsets=tuple(daemonset_facts(_daemonset(i)) for i in range(3000)),
        cluster_policy=cluster_policy_facts(policy),
        image_pulls=tuple(f for i in range(PODS) if (f := pull_failure(_pending_pod(i)))),
        observed={
            "pods": tuple(  # users' GPU pods (extensions/workload_protection/pods.py)
                f"{_long_name('ns', i)[:63]}/{_long_name('w', i)}" for i in range(PODS)
            )
        },
    )


def _gpu(deleting: bool) -> GpuObject:
    status = {"driverVersion": ", ".join(f"5{i:02d}.1.1" for i in range(100))}
    return GpuObject("gpu", "uid", 1, "1", {}, status, deleting, ())


@pytest.mark.parametrize(
    ("deleting", "error"),
    [(False, ""), (False, "the API server said: " + "a" * HUGE), (True, "")],
    ids=["flux-failed", "apply-failed", "deleting"],
)
def test_hostile_objects_keep_the_status_and_events_small(
    catalog: Catalog, deleting: bool, error: str
) -> None:
    nodes = _nodes(300)
    plan = make_plan(GpuSpec(), facts_of(catalog.machine_types, *nodes), catalog, None)
    stalled = tuple(f"HelmRelease/kyma-system/{_long_name('hr', i)}" for i in range(200))
    uninstall = Uninstall(stalled=stalled, since="2026-01-01T00:00:00Z", bound_seconds=360)
    status = gpu_status(_gpu(deleting), _snapshot(plan, nodes, catalog), plan,
                        "2026-01-01T00:10:00Z", error, uninstall, MACHINE.status_hooks)  # fmt: skip
    body = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    size = len(status.model_dump_json(by_alias=True, exclude_none=True).encode())
    assert size < STATUS_SIZE_LIMIT, size
    assert len(status.message) <= MESSAGE_LIMIT
    for condition in status.conditions:
        assert len(condition.message) <= MESSAGE_LIMIT, condition.type
        assert len(condition.reason) <= REASON_LIMIT, condition.type
    assert len(status.driver_version or "") <= 200, status.driver_version
    news = events_for({}, body, tuple(e.status for e in EXTENSIONS if e.status is not None))
    for event in [*([news.transition] if news.transition else []), *news.findings]:
        assert len(event.message) <= EVENT_MESSAGE_LIMIT
        assert len(event.reason) <= REASON_LIMIT


def test_the_pending_pods_images_are_cut_and_counted(catalog: Catalog) -> None:
    nodes = _nodes(3)
    plan = make_plan(GpuSpec(), facts_of(catalog.machine_types, *nodes), catalog, None)
    snap = _snapshot(plan, nodes, catalog)
    status = gpu_status(_gpu(False), snap, plan, "2026-01-01T00:10:00Z")
    components = next(c for c in status.conditions if c.type == "ComponentsReady")
    assert components.reason == "ImagePullFailed"
    assert components.message.startswith(f"{PODS} pods of the GPU operator cannot pull")
    assert "; and 995 more images. Check that the registry holds them" in components.message
    assert components.message.endswith("(docs/operations.md#check-the-mirror-before-you-switch)")
    first = components.message.split(": ", 1)[1].split(" (")[0]
    assert len(first) == NAME_LIMIT, first
    assert first.endswith(ELLIPSIS)
    assert "(ImagePullBackOff: pod pod" in components.message  # a pod once, not per container
    assert " and 2 more)" not in components.message
    release = next(c for c in status.conditions if c.type == "ReleaseReady")
    assert release.message.endswith(ELLIPSIS)
    assert len(release.message) < TEXT_LIMIT + 100
    assert release.reason == "R" * (REASON_LIMIT - len(ELLIPSIS)) + ELLIPSIS
