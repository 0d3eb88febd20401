"""What NVIDIA's components refuse on a node, found per worker pool before anything is
applied: MPS on MIG GPUs, MPS with the Mixed strategy, more MPS replicas than the MPS server
serves, a sharing profile the spec lacks, vGPU VMs, GPUs newer drivers dropped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kyma_gpu.api import GpuSpec
from kyma_gpu.plan import Plan, make_plan
from kyma_gpu.plan.node_checks import node_sharing
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import facts_of, node, ubuntu_node

A100 = "p4d.24xlarge"
MIG = {"nvidia.com/mig.config": "all-1g.5gb"}
MPS = {"mode": "MPS", "replicas": 4}
TIME_SLICED = {"name": "ts", "mode": "TimeSlicing", "replicas": 4}


def plan_for(catalog: Catalog, *bodies: Mapping[str, Any], spec: Mapping[str, Any]) -> Plan:
    facts = facts_of(catalog.machine_types, *bodies)
    return make_plan(GpuSpec.model_validate(spec), facts, catalog, None)


def found(plan: Plan) -> list[tuple[str, str, str | None]]:
    return [(str(f.severity), str(f.reason), f.pool) for f in plan.preflight.findings]


def test_mps_on_mig_gpus_blocks_that_pool_whoever_made_the_layout(catalog: Catalog) -> None:
    """The node admin's MIG layout (migManager off) counts as much as the MIG manager's."""
    plan = plan_for(
        catalog,
        ubuntu_node("mig-1", instance_type=A100, pool="mig", labels=MIG),
        ubuntu_node("whole-1", instance_type=A100, pool="whole"),
        spec={"sharing": MPS},
    )
    assert found(plan) == [("error", "MpsOnMig", "mig")]
    message = plan.preflight.findings[0].message
    assert message.startswith("worker pool mig (1 of 1 node: mig-1): MIG layout 'all-1g.5gb'")
    assert "'MPS sharing is not supported for mig devices'" in message
    assert "give this pool a TimeSlicing or None profile" in message
    assert plan.preflight.verdict == "warning"
    assert plan.helm_release is not None
    # Its own profile solves it.
    fixed = plan_for(
        catalog,
        ubuntu_node("mig-1", instance_type=A100, pool="mig",
                    labels={**MIG, "nvidia.com/device-plugin.config": "ts"}),
        spec={"sharing": {**MPS, "profiles": [TIME_SLICED]}},
    )  # fmt: skip
    assert found(fixed) == []


def test_the_mig_managers_future_layouts_are_a_warning(catalog: Catalog) -> None:
    spec = {"sharing": MPS, "components": {"migManager": True}}
    plan = plan_for(catalog, ubuntu_node(instance_type=A100), spec=spec)
    assert found(plan) == [("warning", "MpsWithMig", None)]
    now = plan_for(catalog, ubuntu_node(instance_type=A100, labels=MIG), spec=spec)
    assert found(now) == [("error", "MpsOnMig", "gpu")]
    assert now.preflight.verdict == "error"  # the only pool


def test_mps_with_the_mixed_strategy(catalog: Catalog) -> None:
    spec: dict[str, Any] = {"sharing": MPS, "components": {"migStrategy": "Mixed"}}
    plan = plan_for(catalog, ubuntu_node(), spec=spec)
    assert found(plan) == [("error", "MpsWithMixedStrategy", "gpu")]
    assert "'using --mig-strategy=mixed is not supported with MPS'" in (
        plan.preflight.findings[0].message
    )
    # An MPS profile nobody picks yet: a warning for the first node that will.
    idle = {"sharing": {"profiles": [{"name": "mps", **MPS}]},
            "components": {"migStrategy": "Mixed"}}  # fmt: skip
    assert found(plan_for(catalog, ubuntu_node(), spec=idle)) == [
        ("warning", "MpsWithMixedStrategy", None)
    ]


@pytest.mark.parametrize(
    ("instance_type", "replicas", "refused"),
    [
        ("g6.xlarge", 48, False),
        ("g6.xlarge", 49, True),  # 48 clients per GPU from compute capability 7.5 on
        ("p3.2xlarge", 16, False),
        ("p3.2xlarge", 17, True),  # V100: 7.0, 16 clients
        ("x1.large", 64, True),  # unknown GPU: the 48 of every GPU
    ],
)
def test_mps_replicas_above_what_the_mps_server_serves(
    catalog: Catalog, instance_type: str, replicas: int, refused: bool
) -> None:
    body = ubuntu_node(instance_type=instance_type, capacity={"nvidia.com/gpu": "1"})
    sharing = {"mode": "MPS", "replicas": replicas}
    plan = plan_for(catalog, body, spec={"sharing": sharing, "driver": {"version": "580"}})
    reasons = [r for _, r, _ in found(plan)]
    assert ("MpsReplicasAboveLimit" in reasons) is refused


def test_a_profile_the_spec_does_not_have(catalog: Catalog) -> None:
    plan = plan_for(
        catalog,
        ubuntu_node("a", labels={"nvidia.com/device-plugin.config": "mps-3"}, pool="odd"),
        ubuntu_node("b"),
        spec={"sharing": {"mode": "TimeSlicing", "replicas": 2, "profiles": [TIME_SLICED]}},
    )
    assert found(plan) == [("error", "UnknownSharingProfile", "odd")]
    assert "(profiles: ts)" in plan.preflight.findings[0].message
    # Without spec.sharing the device plugin has no config manager: the label is not read.
    plain = plan_for(catalog, ubuntu_node(labels={"nvidia.com/device-plugin.config": "x"}), spec={})
    assert found(plain) == []


def test_node_sharing_picks_the_labelled_profile(catalog: Catalog) -> None:
    spec = GpuSpec.model_validate({"sharing": {**MPS, "profiles": [TIME_SLICED]}})
    facts = facts_of(catalog.machine_types, node("a"),
                     node("b", labels={"nvidia.com/device-plugin.config": "ts"}))  # fmt: skip
    picked = [node_sharing(spec.sharing, n) for n in facts.gpu_nodes]
    assert [(name, c.mode if c else None) for name, c in picked] == [
        ("default", "MPS"), ("ts", "TimeSlicing")]  # fmt: skip


def test_vgpu_vms_need_the_licensed_guest_driver(catalog: Catalog) -> None:
    azure = "azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/vm/v"
    vm = ubuntu_node("nv6", instance_type="Standard_NV6ads_A10_v5", provider_id=azure,
                     pool="graphics")  # fmt: skip
    plan = plan_for(catalog, vm, ubuntu_node("t4"), spec={})
    assert found(plan) == [("error", "NeedsVgpuGuestDriver", "graphics")]
    message = plan.preflight.findings[0].message
    assert "gives the VM a vGPU (1/6 of an A10)" in message
    assert "gpu.kyma-project.io/driver-preinstalled=true" in message
    own = ubuntu_node("nv6", instance_type="Standard_NV6ads_A10_v5", provider_id=azure,
                      labels={"gpu.kyma-project.io/driver-preinstalled": "true"})  # fmt: skip
    assert found(plan_for(catalog, own, spec={})) == []


@pytest.mark.parametrize(
    ("body", "spec", "refused"),
    [
        (ubuntu_node(instance_type="p3.2xlarge"), {}, True),  # the chart's 595 dropped Volta
        (ubuntu_node(instance_type="p3.2xlarge"), {"driver": {"version": "580"}}, False),
        (node(instance_type="p3.8xlarge"), {}, True),  # the installer's default 590
        (node(instance_type="p3.8xlarge"), {"driver": {"version": "580"}}, False),
        (ubuntu_node(instance_type="g6.xlarge"), {}, False),
    ],
)
def test_gpus_that_newer_drivers_dropped(
    catalog: Catalog, body: dict[str, Any], spec: dict[str, Any], refused: bool
) -> None:
    plan = plan_for(catalog, body, spec=spec)
    reasons = [r for _, r, _ in found(plan)]
    assert ("GpuNotSupportedByDriver" in reasons) is refused
    if refused:
        assert 'the last branch that does is 580): set spec.driver.version to "580"' in (
            plan.preflight.findings[0].message
        )
