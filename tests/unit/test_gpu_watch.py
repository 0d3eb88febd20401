"""The Gpu is kopf's (handlers.py): kopf's watch events put its facts into the store, as
gpu_object makes them of its body (managedFields read); a deletion leaves None at its version;
the informers watch the nine other kinds, not the Gpu."""

from __future__ import annotations

import asyncio
from typing import Any

from kyma_gpu.facts.gpu import gpu_object
from kyma_gpu.handlers import take_gpu_event
from kyma_gpu.observe import Store
from kyma_gpu.observe.informers import Informers
from kyma_gpu.observe.watches import GPUS
from kyma_gpu.rules.catalog import Catalog
from tests.unit.test_observe import ScriptedReader

PRUNED: dict[str, Any] = {"f:spec": {"f:values": {"f:hostPaths": {}}}}


def body(rv: int, **spec: Any) -> dict[str, Any]:
    meta = {"name": "gpu", "uid": "u-1", "generation": 2, "resourceVersion": str(rv),
            "annotations": {"gpu.kyma-project.io/skip-workload-protection": "true"},
            "finalizers": ["gpu.kyma-project.io/finalizer"],
            "managedFields": [{"manager": "kubectl", "fieldsV1": PRUNED}]}  # fmt: skip
    return {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu", "metadata": meta,
            "spec": spec, "status": {"state": "Ready"}}  # fmt: skip


def test_the_facts_are_what_gpu_object_makes_of_the_body_managed_fields_included() -> None:
    store = Store()
    changed = body(7, components={"dcgmExporter": False})
    assert take_gpu_event(store, {"type": None, "object": body(5)})  # kopf's initial list
    assert take_gpu_event(store, {"type": "MODIFIED", "object": changed})
    held = store.get(GPUS, "gpu")
    assert held == gpu_object(changed)
    assert held is not None
    assert held.managed_values == ({"f:hostPaths": {}},)
    assert held.annotations == {"gpu.kyma-project.io/skip-workload-protection": "true"}
    assert held.finalizers == ("gpu.kyma-project.io/finalizer",)
    assert store.changed.is_set()


def test_an_older_event_than_a_writes_answer_changes_nothing() -> None:
    store = Store()
    take_gpu_event(store, {"type": "MODIFIED", "object": body(9)})
    assert not take_gpu_event(store, {"type": "MODIFIED", "object": body(8, stack="DRA")})
    assert store.get(GPUS, "gpu") == gpu_object(body(9))


def test_a_deleted_gpu_is_none_at_the_version_of_its_deletion() -> None:
    store = Store()
    take_gpu_event(store, {"type": "MODIFIED", "object": body(5)})
    assert take_gpu_event(store, {"type": "DELETED", "object": body(9)})
    assert store.get(GPUS, "gpu") is None
    assert store.collection(GPUS).gone == {"gpu": 9}


def test_the_informers_watch_nine_kinds_and_not_the_gpu() -> None:
    reader = ScriptedReader(pages=[[]])

    async def main() -> list[str]:
        informers = Informers(reader, Store(), asyncio.get_running_loop())
        informers.start(Catalog().machine_types, "kyma-system", "gpu-operator")
        informers.stop()
        return list(informers.running)

    started = asyncio.run(main())
    assert GPUS not in started
    assert len(started) == 9  # Nodes, DaemonSets, pulls, 3 Flux kinds, 2 NVIDIA, CRDs
