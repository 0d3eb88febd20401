"""Who else wrote the module's Flux objects (plan/ownership.py), and the loop removing it.

The real API server's side (a writer in kyma-system, helm-controller, the NVIDIA controller) is
tests/e2e/test_one_source.py.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from kyma_gpu.adapter import ObjectRef
from kyma_gpu.api.resources import FIELD_MANAGER
from kyma_gpu.errors import ApiError
from kyma_gpu.plan.actions import live_object
from kyma_gpu.plan.ownership import ForeignField, foreign_fields, removals
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status.events import FOREIGN_REMOVED
from tests.unit.fake_api import FakeApi
from tests.unit.test_loop import installed, new_world


def entry(manager: str, fields: dict[str, Any] | str, **more: Any) -> dict[str, Any]:
    return {"manager": manager, "operation": "Update", "fieldsV1": fields, **more}


OURS = entry(FIELD_MANAGER, {
    "f:metadata": {"f:labels": {"f:app.kubernetes.io/part-of": {}}},
    "f:spec": {"f:values": {"f:driver": {"f:version": {}, "f:usePrecompiled": {}}},
               "f:interval": {}, "f:chart": {"f:spec": {"f:version": {}}}}},
    operation="Apply")  # fmt: skip
BODY: dict[str, Any] = {
    "metadata": {"labels": {"app.kubernetes.io/part-of": "kyma-gpu",
                            "sharding.fluxcd.io/key": "elsewhere"}},
    "spec": {"interval": "10m", "suspend": True, "chart": {"spec": {"version": "v26.7.0"}},
             "valuesFrom": [{"kind": "Secret", "name": "mine"}],
             "postRenderers": [{"kustomize": {"patches": []}}],
             "values": {"driver": {"version": "590", "usePrecompiled": True, "image": "evil"},
                        "validator": {"cuda": {"env": [{"name": "VALIDATOR_IMAGE"}]}}}},
}  # fmt: skip
INTRUDER = entry("intruder", {
    "f:metadata": {"f:labels": {"f:sharding.fluxcd.io/key": {}}},
    "f:spec": {"f:suspend": {}, "f:valuesFrom": {}, "f:postRenderers": {},
               "f:values": {"f:driver": {"f:version": {}, "f:image": {}},
                            "f:validator": {"f:cuda": {"f:env": {}}}}}})  # fmt: skip


def test_what_another_manager_wrote_and_the_module_does_not_set_is_foreign() -> None:
    found = foreign_fields([OURS, INTRUDER])
    assert [f.dotted for f in found] == [
        "metadata.labels.sharding.fluxcd.io/key",
        "spec.postRenderers",
        "spec.values.driver.image",
        "spec.values.validator.cuda.env",
        "spec.valuesFrom",
    ]
    assert {f.manager for f in found} == {"intruder"}


def test_suspend_status_and_metadata_stay_theirs() -> None:
    """`flux suspend`/`resume`, helm-controller's status and finalizers, `flux reconcile`'s
    annotations: none of them is the Gpu's."""
    others = [
        entry("flux", {"f:spec": {"f:suspend": {}}}),
        entry("helm-controller", {"f:status": {"f:conditions": {}}}, subresource="status"),
        entry("helm-controller", {"f:metadata": {"f:finalizers": {".": {}, 'v:"x"': {}}}}),
        entry("flux", {"f:metadata": {"f:annotations": {"f:reconcile.fluxcd.io/requestedAt": {}}}}),
    ]
    assert foreign_fields([OURS, *others]) == ()


def test_a_field_the_module_sets_too_is_not_foreign() -> None:
    """Another manager that set a value of the module's to the same value shares it: the next
    apply of another value takes it back (forced), so nothing needs removing."""
    same = entry("intruder", {"f:spec": {"f:values": {"f:driver": {"f:version": {}}}}})
    assert foreign_fields([OURS, same]) == ()


def test_fields_v1_as_a_string_and_list_items_are_read() -> None:
    import json

    listed = entry("intruder", json.dumps({"f:spec": {"f:dependsOn": {'k:{"name":"x"}': {}}}}))
    assert [f.dotted for f in foreign_fields([OURS, listed])] == ["spec.dependsOn"]


def test_removals_test_each_value_and_leave_no_empty_map() -> None:
    found = foreign_fields([OURS, INTRUDER])
    ops = removals(BODY, found)
    assert {"op": "remove", "path": "/spec/values/validator"} in ops  # not validator: {} left
    assert {"op": "remove", "path": "/metadata/labels/sharding.fluxcd.io~1key"} in ops
    assert {"op": "test", "path": "/spec/values/driver/image", "value": "evil"} in ops
    assert len(ops) == 2 * 5
    assert all(a["op"] == "test" and b == {"op": "remove", "path": a["path"]}
               for a, b in zip(ops[::2], ops[1::2], strict=True))  # fmt: skip


def test_a_field_gone_since_is_not_removed() -> None:
    gone = [ForeignField("intruder", ("spec", "values", "nothere"))]
    assert removals(BODY, gone) == []


def test_the_loop_removes_them_once_and_says_who_wrote_them(catalog: Catalog) -> None:
    world = installed(new_world(catalog))
    release = world.api.objects[("HelmRelease", "gpu-operator")]
    meta, spec = release["metadata"], release["spec"]
    spec["values"]["validator"] = {"cuda": {"env": [{"name": "VALIDATOR_IMAGE"}]}}
    spec["valuesFrom"] = [{"kind": "Secret", "name": "mine"}]
    spec["suspend"] = True
    meta["labels"]["sharding.fluxcd.io/key"] = "elsewhere"
    meta["managedFields"] = [*meta["managedFields"], INTRUDER]
    world.flux_says("HelmRelease", history=[{"status": "deployed", "chartVersion": "v26.7.0"}])
    world.api.calls.clear()
    world.run()
    # the patch is a new generation of the release: Flux upgrades it, the status says so
    assert world.api.writes() == ["patch HelmRelease", "status"]
    spec = world.api.objects[("HelmRelease", "gpu-operator")]["spec"]
    assert "validator" not in spec["values"]
    assert "valuesFrom" not in spec
    assert spec["suspend"] is True  # the user's
    assert spec["values"]["driver"]["usePrecompiled"] is True  # the module's stay
    labels = world.api.objects[("HelmRelease", "gpu-operator")]["metadata"]["labels"]
    assert "sharding.fluxcd.io/key" not in labels
    (event,) = [e for e in world.api.events if e.reason == FOREIGN_REMOVED]
    assert event.type == "Warning"
    assert "spec.valuesFrom (by intruder)" in event.message, event.message
    assert "HelmRelease kyma-system/gpu-operator" in event.message
    world.api.calls.clear()
    world.run()
    assert world.api.writes() == []  # nothing left to remove: no write, no Event


def test_a_value_changed_since_the_read_fails_the_patch_and_removes_nothing() -> None:
    api = FakeApi()
    body = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "gpu-operator", "namespace": "kyma-system",
                         "managedFields": [OURS, INTRUDER], **copy.deepcopy(BODY["metadata"])},
            "spec": copy.deepcopy(BODY["spec"])}  # fmt: skip
    api.objects[("HelmRelease", "gpu-operator")] = copy.deepcopy(body)
    live = live_object(body)
    api.objects[("HelmRelease", "gpu-operator")]["spec"]["values"]["driver"]["image"] = "other"
    ref = ObjectRef(live.api_version, live.kind, live.namespace, live.name)
    with pytest.raises(ApiError):
        asyncio.run(api.patch(ref, removals(live.guarded, live.foreign)))
    assert api.objects[("HelmRelease", "gpu-operator")]["spec"]["valuesFrom"]


def test_a_patch_under_the_modules_name_is_someone_elses() -> None:
    """`kubectl patch --field-manager=kyma-gpu`: an Update, which the module never makes."""
    spoofed = entry(FIELD_MANAGER, {"f:spec": {"f:valuesFrom": {}}})
    assert [f.dotted for f in foreign_fields([OURS, spoofed])] == ["spec.valuesFrom"]


def test_an_apply_under_the_modules_name_that_adds_a_field_is_applied_over() -> None:
    """`kubectl apply --server-side --field-manager=kyma-gpu` of the module's object plus a
    field: the module's next apply (the same manager) drops what it does not set, so the object
    is not up to date while the module's applied fields hold more than the plan's."""
    from kyma_gpu.plan.actions import up_to_date
    from kyma_gpu.plan.ownership import applied_fields, planned_fields

    desired: dict[str, Any] = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
               "metadata": {"name": "gpu-operator", "namespace": "kyma-system",
                            "labels": {"app.kubernetes.io/part-of": "kyma-gpu"}},
               "spec": {"interval": "10m", "values": {"driver": {"version": "590"}}}}  # fmt: skip
    planned = planned_fields(desired)
    assert ("spec", "values", "driver", "version") in planned
    body = copy.deepcopy(desired)
    labels: dict[str, Any] = {"f:labels": {"f:app.kubernetes.io/part-of": {}}}
    spec: dict[str, Any] = {"f:interval": {}, "f:values": {"f:driver": {"f:version": {}}}}
    honest: dict[str, Any] = {"f:metadata": labels, "f:spec": spec}
    body["metadata"]["managedFields"] = [entry(FIELD_MANAGER, honest, operation="Apply")]
    assert applied_fields(body["metadata"]["managedFields"]) == planned
    assert up_to_date(desired, live_object(body))
    spoofed = copy.deepcopy(honest)
    spoofed["f:spec"]["f:valuesFrom"] = {}
    body["spec"]["valuesFrom"] = [{"kind": "Secret", "name": "theirs"}]
    body["metadata"]["managedFields"] = [entry(FIELD_MANAGER, spoofed, operation="Apply")]
    assert not up_to_date(desired, live_object(body))
