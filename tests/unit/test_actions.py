"""What to write: nothing when the live objects already hold the plan."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kyma_gpu.api import GpuSpec
from kyma_gpu.plan import Owner, Plan, make_plan
from kyma_gpu.plan.actions import LiveObject, contains, live_object, plan_actions, up_to_date
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import allowing, facts_of, node

UID = "0b5a8c1e-5f7d-4c2b-9a41-6d2f0e7b9c11"


@pytest.mark.parametrize(
    ("live", "desired", "expected"),
    [
        ({"a": 1, "b": 2}, {"a": 1}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ({"a": {"x": 1, "y": 2}}, {"a": {"x": 1}}, True),
        ({"a": {"x": 2}}, {"a": {"x": 1}}, False),
        ({"a": [1, 2]}, {"a": [1, 2]}, True),
        ({"a": [1, 2, 3]}, {"a": [1, 2]}, False),
        ({"a": [2, 1]}, {"a": [1, 2]}, False),
        ({"a": [{"x": 1, "default": True}]}, {"a": [{"x": 1}]}, True),
        ({"a": 1}, {"a": True}, False),
        ({"a": True}, {"a": 1}, False),
        ({"a": 1.0}, {"a": 1}, False),
        ({"a": "1"}, {"a": 1}, False),
        ({"a": None}, {"a": None}, True),
        ({"a": {}}, {"a": {}}, True),
        ({}, {"a": {}}, False),
        ({"a": "x"}, {"a": {}}, False),
        ([1], {"a": 1}, False),
        ({"a": 1}, {}, True),
    ],
)
def test_contains(live: Any, desired: Any, expected: bool) -> None:
    assert contains(live, desired) is expected


MIRROR = {"kind": "OCIRepository", "url": "oci://registry.example/charts"}


def _plan(catalog: Catalog, spec: dict[str, Any] | None = None) -> Plan:
    facts = facts_of(catalog.machine_types, node())
    spec_ = GpuSpec.model_validate(spec or {})
    return make_plan(spec_, facts, catalog, Owner(uid=UID), allowing(MIRROR))


def as_live(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server returns it: defaults, bookkeeping and status added."""
    body = copy.deepcopy(obj)
    meta = body["metadata"]
    meta.update(
        uid="5e7f0c1a-0000-4000-8000-000000000001",
        resourceVersion="4711",
        generation=3,
        creationTimestamp="2026-11-30T07:00:00Z",
        managedFields=[{"manager": "kyma-gpu", "operation": "Apply"}],
        finalizers=["finalizers.fluxcd.io"],
    )
    meta["labels"]["kustomize.toolkit.fluxcd.io/name"] = "other"
    meta.setdefault("annotations", {})["reconcile.fluxcd.io/requestedAt"] = "now"
    meta["ownerReferences"].append(
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "other-uid"}
    )
    spec = body["spec"]
    if body["kind"] in ("HelmRepository", "OCIRepository"):
        spec.update(timeout="60s", provider="generic")
    else:
        if "chart" in spec:
            spec["chart"]["spec"].update(reconcileStrategy="ChartVersion")
        spec["maxHistory"] = 5
        spec["install"]["remediation"] = {"retries": 0}
    body["status"] = {"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "True"}]}
    return body


def test_nothing_to_apply_when_live_holds_the_plan(catalog: Catalog) -> None:
    plan = _plan(catalog)
    live = [live_object(as_live(o)) for o in plan.objects]
    actions = plan_actions(plan.objects, live)
    assert actions.apply == ()
    assert actions.delete == ()
    assert all(up_to_date(o, lv) for o, lv in zip(plan.objects, live, strict=True))


def test_first_apply_writes_everything(catalog: Catalog) -> None:
    plan = _plan(catalog)
    actions = plan_actions(plan.objects, [])
    assert [o["kind"] for o in actions.apply] == ["HelmRepository", "HelmRelease"]
    assert actions.delete == ()


def _changed(obj: dict[str, Any], how: str) -> dict[str, Any]:
    body = as_live(obj)
    if how == "value":
        body["spec"]["interval"] = "5m"
    elif how == "label":
        del body["metadata"]["labels"]["app.kubernetes.io/part-of"]
    elif how == "owner":
        body["metadata"]["ownerReferences"] = []
    elif how == "deleting":
        body["metadata"]["deletionTimestamp"] = "2026-11-30T08:00:00Z"
    return body


@pytest.mark.parametrize("how", ["value", "label", "owner", "deleting"])
def test_a_difference_is_applied(catalog: Catalog, how: str) -> None:
    plan = _plan(catalog)
    source, release = plan.objects
    live = [live_object(as_live(source)), live_object(_changed(release, how))]
    actions = plan_actions(plan.objects, live)
    assert [o["kind"] for o in actions.apply] == ["HelmRelease"]
    assert actions.delete == ()


def test_a_values_change_is_applied(catalog: Catalog) -> None:
    old = _plan(catalog)
    new = _plan(catalog, {"components": {"migManager": True}})
    live = [live_object(as_live(o)) for o in old.objects]
    actions = plan_actions(new.objects, live)
    assert [o["kind"] for o in actions.apply] == ["HelmRelease"]


def test_switching_to_oci_deletes_the_stale_helm_repository(catalog: Catalog) -> None:
    old = _plan(catalog)
    new = _plan(catalog, {"source": {"chartRepository": "oci://registry.example/charts"}})
    live = [live_object(as_live(o)) for o in old.objects]
    actions = plan_actions(new.objects, live)
    assert [o["kind"] for o in actions.apply] == ["OCIRepository", "HelmRelease"]
    assert [(o.kind, o.namespace, o.name) for o in actions.delete] == [
        ("HelmRepository", "kyma-system", "gpu-operator")
    ]
    # Once it is being deleted, it is not deleted again.
    gone = as_live(old.objects[0])
    gone["metadata"]["deletionTimestamp"] = "2026-11-30T08:00:00Z"
    live = [live_object(gone), *(live_object(as_live(o)) for o in new.objects)]
    actions = plan_actions(new.objects, live)
    assert actions.apply == ()
    assert actions.delete == ()


def test_an_empty_plan_deletes_nothing(catalog: Catalog) -> None:
    live = [live_object(as_live(o)) for o in _plan(catalog).objects]
    actions = plan_actions((), live)
    assert actions == type(actions)(apply=(), delete=())


def test_live_object() -> None:
    obj = live_object(
        {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {
                "name": "gpu-operator",
                "namespace": "kyma-system",
                "labels": {"a": "b"},
                "ownerReferences": [{"uid": "u1"}, {"uid": "u2"}],
                "deletionTimestamp": "2026-11-30T08:00:00Z",
            },
            "spec": {"interval": "10m"},
        }
    )
    assert obj == LiveObject(
        api_version="helm.toolkit.fluxcd.io/v2",
        kind="HelmRelease",
        namespace="kyma-system",
        name="gpu-operator",
        labels={"a": "b"},
        owner_uids=("u1", "u2"),
        spec={"interval": "10m"},
        deleting=True,
        deleted_at="2026-11-30T08:00:00Z",
    )
    bare = live_object({})
    assert (bare.kind, bare.name, bare.labels, bare.owner_uids, bare.deleting) == (
        "",
        "",
        {},
        (),
        False,
    )


def test_up_to_date_needs_a_live_object(catalog: Catalog) -> None:
    assert up_to_date(_plan(catalog).objects[0], None) is False


def test_a_field_removed_from_the_plan_is_applied_again(catalog: Catalog) -> None:
    """contains() cannot see a field the plan dropped; the spec-hash annotation does, and
    server-side apply then removes the field the module no longer sets."""
    before = _plan(catalog, {"values": {"migManager": {"config": {"name": "x"}}}})
    after = _plan(catalog, {})
    live = [live_object(as_live(o)) for o in before.objects]
    actions = plan_actions(after.objects, live)
    assert [o["kind"] for o in actions.apply] == ["HelmRelease"]
    assert contains(live[1].spec, after.objects[1]["spec"])  # what the hash is needed for
