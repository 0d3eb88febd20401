"""The Gpu's Events go to the module's namespace, not `default`, and name no user's pod (issue
32, finding 5): readers of `default` (or of kyma-system) need not be allowed to list pods in
every namespace. tests/integration/test_operator.py shows the API server accepts them there."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kyma_gpu.adapter import KubeAdapter
from kyma_gpu.extensions.workload_protection.status import (
    EVENTS,
    PODS_SHOWN,
    without_pod_names,
    workloads_wait,
)
from kyma_gpu.facts.gpu import gpu_object
from kyma_gpu.reconcile.effects import ClusterApi, Recorder
from kyma_gpu.status.events import EventType, GpuEvent, GpuRef, News, event_for

PODS = ("ml/trainer", "research-2/batch.v1-0", *(f"team-{i}/job-{i}" for i in range(20)))


def deleting(message: str) -> dict[str, Any]:
    ready = {"type": "Ready", "status": "False", "reason": "Deleting", "message": message}
    return {"state": "Warning", "message": message, "conditions": [ready]}


def test_the_workloads_message_loses_the_pod_names_and_keeps_the_count() -> None:
    for count in (1, 2, PODS_SHOWN, len(PODS)):
        message = workloads_wait(PODS[:count], skipped=False).message
        assert "ml/trainer" in message  # the status keeps naming them
        said = without_pod_names(message)
        assert not any(pod in said for pod in PODS), said
        assert said.startswith(f"deletion waits for {count} pods that use GPUs (the Gpu's ")
        assert said.endswith("skip-workload-protection=true to go ahead")
    other = "Flux is uninstalling the GPU stack: waiting for HelmRelease/kyma-system/x"
    assert without_pod_names(other) == other


def test_a_deletion_event_says_how_many_pods_and_not_which() -> None:
    two = deleting(workloads_wait(PODS[:2], skipped=False).message)
    event = event_for({}, two, (EVENTS,))
    assert event is not None
    assert (event.type, event.reason) == (EventType.WARNING, "Deleting")
    assert "ml/trainer" not in event.message
    assert "deletion waits for 2 pods" in event.message
    # Other pods, as many: nothing new to say. One fewer: said.
    other = deleting(workloads_wait(PODS[2:4], skipped=False).message)
    assert event_for(two, other, (EVENTS,)) is None
    one = event_for(two, deleting(workloads_wait(PODS[:1], skipped=False).message), (EVENTS,))
    assert one is not None
    assert "deletion waits for 1 pods" in one.message


class Posted:
    def __init__(self) -> None:
        self.calls: list[tuple[str, GpuRef, GpuEvent]] = []

    async def post_event(self, namespace: str, gpu: GpuRef, event: GpuEvent) -> None:
        self.calls.append((namespace, gpu, event))


def test_the_recorder_posts_into_the_module_namespace() -> None:
    writer = Posted()
    recorder = Recorder(cast(ClusterApi, writer), "kyma-system")
    body = {"metadata": {"name": "gpu", "uid": "u1", "resourceVersion": "1"}, "spec": {}}
    event = GpuEvent(EventType.NORMAL, "Ready", "ready")
    asyncio.run(recorder.post(gpu_object(body), News(transition=event)))
    assert [(ns, ref.name) for ns, ref, _ in writer.calls] == [("kyma-system", "gpu")]
    assert Recorder(cast(ClusterApi, writer)).namespace == "kyma-system"  # never `default`


def test_the_adapter_names_the_namespace_in_the_involved_object() -> None:
    adapter = KubeAdapter(api=None)  # type: ignore[arg-type]
    sent: list[tuple[str, str, dict[str, Any]]] = []

    def answer(*args: Any, **kwargs: Any) -> dict[str, Any]:
        sent.append((args[1], args[2], kwargs["body"]))
        return {}

    adapter._json = answer  # type: ignore[method-assign]
    event = GpuEvent(EventType.WARNING, "Deleting", "deletion waits for 1 pods")
    asyncio.run(adapter.post_event("kyma-system", GpuRef("gpu", "u1"), event))
    [(method, path, body)] = sent
    assert (method, path) == ("POST", "/api/v1/namespaces/kyma-system/events")
    assert body["metadata"]["namespace"] == "kyma-system"
    # The API server refuses an Event outside `default` whose involvedObject has no namespace.
    assert body["involvedObject"]["namespace"] == "kyma-system"
    assert (body["involvedObject"]["kind"], body["involvedObject"]["uid"]) == ("Gpu", "u1")
