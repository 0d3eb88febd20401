"""The Gpu is observed like every other kind (observe/watches.py gpu_watch): its facts in the
store are gpu_object of its body, managedFields read; a deletion leaves None at its version; a
missing CRD is "not served: waiting", and its appearance starts the list."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kyma_gpu.errors import NotFound
from kyma_gpu.facts.gpu import gpu_object
from kyma_gpu.observe import Store
from kyma_gpu.observe.informer import Informer, WatchSettings
from kyma_gpu.observe.informers import Informers
from kyma_gpu.observe.watches import GATED, GPUS, gpu_watch
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


def observe(reader: ScriptedReader, until: Any, crd_present: bool = False) -> Store:
    async def main() -> Store:
        store = Store()
        informer = Informer(reader, gpu_watch(), store, asyncio.get_running_loop(),
                            WatchSettings(absent_recheck=30.0)).start()  # fmt: skip
        await asyncio.sleep(0.1)
        if crd_present:
            informer.crd_present(True)
        deadline = time.monotonic() + 5
        while not until(store) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        informer.stop()
        return store

    return asyncio.run(main())


def test_the_facts_are_what_gpu_object_makes_of_the_body_managed_fields_included() -> None:
    listed, changed = body(5), body(7, components={"dcgmExporter": False})
    reader = ScriptedReader(pages=[[listed]], watches=[[{"type": "MODIFIED", "object": changed}]])
    store = observe(reader, lambda s: "watch 7" in reader.calls)
    held = store.get(GPUS, "gpu")
    assert held == gpu_object(changed)
    assert held is not None
    assert held.pruned_values == ("spec.values.hostPaths",)
    assert held.annotations == {"gpu.kyma-project.io/skip-workload-protection": "true"}
    assert held.finalizers == ("gpu.kyma-project.io/finalizer",)
    assert gpu_watch().query.path == "/apis/gpu.kyma-project.io/v1beta1/gpus"


def test_a_deleted_gpu_is_none_at_the_version_of_its_deletion() -> None:
    reader = ScriptedReader(pages=[[body(5)]], watches=[[{"type": "DELETED", "object": body(9)}]])
    store = observe(reader, lambda s: "watch 9" in reader.calls)
    assert store.get(GPUS, "gpu") is None
    assert store.collection(GPUS).gone == {"gpu": 9}


def test_without_its_crd_the_gpu_is_absent_until_the_crd_appears() -> None:
    reader = ScriptedReader(pages=[[body(5)]], list_errors=[NotFound("list", 404)])
    absent = observe(reader, lambda s: s.synced(GPUS))
    assert absent.synced(GPUS)
    assert absent.collection(GPUS).absent
    assert absent.facts(GPUS) == []
    reader = ScriptedReader(pages=[[body(5)]], list_errors=[NotFound("list", 404)])
    listed = observe(reader, lambda s: s.get(GPUS, "gpu") is not None, crd_present=True)
    assert not listed.collection(GPUS).absent
    assert GATED["gpus.gpu.kyma-project.io"] == GPUS  # the CRD informer says when it appears


def test_the_informers_watch_the_gpu_with_the_nine_other_kinds() -> None:
    reader = ScriptedReader(pages=[[]])

    async def main() -> list[str]:
        informers = Informers(reader, Store(), asyncio.get_running_loop())
        informers.start(Catalog().machine_types, "kyma-system", "gpu-operator")
        informers.stop()
        return list(informers.running)

    started = asyncio.run(main())
    assert started[0] == GPUS
    assert len(started) == 10  # Gpus, Nodes, DaemonSets, pulls, 3 Flux kinds, 2 NVIDIA, CRDs
