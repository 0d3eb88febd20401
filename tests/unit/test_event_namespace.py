"""The Gpu's Events go to the module's namespace, not `default` (issue 32, finding 5): readers
of `default` (or of kyma-system) need not be allowed to list pods in every namespace; that
they name no user's pod is workload protection's (tests/unit/test_workload_protection.py).
tests/integration/test_operator.py shows the API server accepts them there."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kyma_gpu.adapter import KubeAdapter
from kyma_gpu.facts.gpu import gpu_object
from kyma_gpu.reconcile.effects import ClusterApi, Recorder
from kyma_gpu.status.events import EventType, GpuEvent, GpuRef, News


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
