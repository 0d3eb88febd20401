"""Node detection: osImage and providerID parsing, GPU evidence, bad bodies, grouping."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kyma_gpu.facts import (
    MachineTypeRegistry,
    NodeError,
    OsFamily,
    cluster_facts,
    node_facts,
    parse_os_image,
)
from kyma_gpu.facts.node import parse_provider
from tests.unit.builders import GL, UBUNTU, cpu_node, facts_of, node, ubuntu_node


@pytest.mark.parametrize(
    ("os_image", "family", "version"),
    [
        ("Garden Linux 1592.4", OsFamily.GARDENLINUX, "1592.4"),
        ("Garden Linux 1877.21", OsFamily.GARDENLINUX, "1877.21"),
        ("Garden Linux 2150.8.0", OsFamily.GARDENLINUX, "2150.8.0"),
        ("  garden linux 1877.21  ", OsFamily.GARDENLINUX, "1877.21"),
        ("Ubuntu 22.04.5 LTS", OsFamily.UBUNTU, "22.04.5"),
        ("Ubuntu 24.04 LTS", OsFamily.UBUNTU, "24.04"),
        ("SUSE Linux Micro 6.1", OsFamily.SL_MICRO, "6.1"),
        ("SL-Micro 6.0", OsFamily.SL_MICRO, "6.0"),
        ("SUSE Linux Enterprise Server 15 SP6", OsFamily.SLES, "15 SP6"),
        ("SUSE Linux Enterprise Server 15.6", OsFamily.SLES, "15.6"),
        ("Red Hat Enterprise Linux 9.4 (Plow)", OsFamily.RHEL, "9.4"),
        (
            "Red Hat Enterprise Linux CoreOS 417.94.202410211619-0",
            OsFamily.RHEL,
            "417.94.202410211619",
        ),
        ("Flatcar Container Linux by Kinvolk 4081.2.0 (Oklo)", OsFamily.FLATCAR, "4081.2.0"),
        ("Bottlerocket OS 1.29.0 (aws-k8s-1.31-nvidia)", OsFamily.BOTTLEROCKET, "1.29.0"),
        ("Talos (v1.9.5)", OsFamily.TALOS, "1.9.5"),
        ("Talos v1.10.0", OsFamily.TALOS, "1.10.0"),
        ("Debian GNU/Linux 12 (bookworm)", OsFamily.UNKNOWN, None),
        ("Container-Optimized OS from Google", OsFamily.UNKNOWN, None),
        ("Windows Server 2022 Datacenter", OsFamily.UNKNOWN, None),
        ("", OsFamily.UNKNOWN, None),
    ],
)
def test_parse_os_image(os_image: str, family: OsFamily, version: str | None) -> None:
    assert parse_os_image(os_image) == (family, version)


@pytest.mark.parametrize(
    ("provider_id", "provider"),
    [
        ("aws:///eu-central-1a/i-0a1b2c3d4e5f60001", "aws"),
        ("gce://sap-kyma-prod/europe-west3-a/shoot--kyma--c2-gpu-z1-6b9d4-k7m2p", "gcp"),
        (
            "azure:///subscriptions/6f1a/resourceGroups/shoot--kyma--c3/providers/"
            "Microsoft.Compute/virtualMachines/shoot--kyma--c3-gpu-z1",
            "azure",
        ),
        ("openstack:///5c1f2a3b-7d4e-4f60-9a8b-1c2d3e4f5a6b", "openstack"),
        ("vsphere://4211a1b2-c3d4-e5f6-a7b8-c9d0e1f2a3b4", "vsphere"),
        ("alicloud://cn-hangzhou.i-bp1abc", "alicloud"),
        ("kwok://fake-node-1", "kwok"),
        ("AWS:///eu-central-1a/i-0abc", "aws"),
        ("kind://docker/kind/kind-worker", "kind"),
        ("cn-hangzhou.i-bp1abcdefg", "unknown"),
        ("://no-scheme", "unknown"),
        ("", "unknown"),
        (None, "unknown"),
    ],
)
def test_parse_provider(provider_id: str | None, provider: str) -> None:
    assert parse_provider(provider_id) == provider


@pytest.mark.parametrize(
    ("body", "evidence", "model", "count", "is_gpu"),
    [
        pytest.param(node(), ("registry",), "L4", 1, True, id="registry"),
        pytest.param(node(instance_type="g6.12xlarge"), ("registry",), "L4", 4, True, id="g6-4"),
        pytest.param(
            node(instance_type=None, labels={"beta.kubernetes.io/instance-type": "g4dn.xlarge"}),
            ("registry",),
            "T4",
            1,
            True,
            id="beta-instance-type-label",
        ),
        pytest.param(
            node(provider_id="gce://p/z/n"), (), None, None, False, id="aws-type-on-gcp-is-unknown"
        ),
        pytest.param(
            node(provider_id="gce://p/z/n", instance_type="g2-standard-8"),
            ("registry",),
            "L4",
            1,
            True,
            id="gcp-g2",
        ),
        pytest.param(node(instance_type="m6i.large"), (), None, None, False, id="cpu-only"),
        pytest.param(
            node(
                instance_type="g_c16_m64",
                provider_id="openstack:///uuid",
                labels={"feature.node.kubernetes.io/pci-10de.present": "true"},
            ),
            ("nfd-pci",),
            None,
            None,
            True,
            id="nfd-pci-label",
        ),
        pytest.param(
            node(
                instance_type="custom",
                labels={
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                    "nvidia.com/gpu.count": "8",
                },
            ),
            ("gpu-present",),
            "NVIDIA-A100-SXM4-80GB",
            8,
            True,
            id="gpu-present-with-gfd-labels",
        ),
        pytest.param(
            node(instance_type="custom", labels={"nvidia.com/gpu.present": "false"}),
            (),
            None,
            None,
            False,
            id="gpu-present-false",
        ),
        pytest.param(
            node(instance_type="custom", capacity={"nvidia.com/gpu": "2"}),
            ("capacity",),
            None,
            2,
            True,
            id="capacity",
        ),
        pytest.param(
            node(instance_type="custom", capacity={"nvidia.com/gpu": "0"}),
            (),
            None,
            None,
            False,
            id="capacity-zero",
        ),
        pytest.param(
            node(instance_type="custom", capacity={"nvidia.com/gpu": "lots"}),
            (),
            None,
            None,
            False,
            id="capacity-garbage",
        ),
        pytest.param(
            node(
                provider_id="gce://p/z/n",
                instance_type="n1-standard-8",
                labels={
                    "gpu.kyma-project.io/gpu": "true",
                    "gpu.kyma-project.io/gpu-model": "T4",
                    "gpu.kyma-project.io/gpu-count": "2",
                },
            ),
            ("opt-in",),
            "T4",
            2,
            True,
            id="opt-in-with-model-and-count",
        ),
        pytest.param(
            node(
                labels={
                    "gpu.kyma-project.io/gpu": "true",
                    "gpu.kyma-project.io/gpu-model": "L4 (24 GB)",
                }
            ),
            ("registry", "opt-in"),
            "L4 (24 GB)",
            1,
            True,
            id="opt-in-label-model-wins-over-registry",
        ),
        pytest.param(
            node(labels={"gpu.kyma-project.io/gpu": "false"}),
            ("registry",),
            "L4",
            1,
            False,
            id="opt-out",
        ),
        pytest.param(
            node(
                instance_type="g6.xlarge",
                capacity={"nvidia.com/gpu": "1"},
                labels={
                    "feature.node.kubernetes.io/pci-10de.present": "true",
                    "nvidia.com/gpu.present": "true",
                },
            ),
            ("registry", "nfd-pci", "gpu-present", "capacity"),
            "L4",
            1,
            True,
            id="all-evidence",
        ),
    ],
)
def test_node_evidence(
    registry: MachineTypeRegistry,
    body: dict[str, Any],
    evidence: tuple[str, ...],
    model: str | None,
    count: int | None,
    is_gpu: bool,
) -> None:
    facts = node_facts(body, registry)
    assert facts.evidence == evidence
    assert facts.gpu_model == model
    assert facts.gpu_count == count
    assert facts.is_gpu is is_gpu
    assert facts.machine_type_known is ("registry" in evidence)


def test_node_facts_fields(registry: MachineTypeRegistry) -> None:
    facts = node_facts(node("n", kernel="6.12.44-cloud-amd64", pool="gpu-a"), registry)
    assert facts.name == "n"
    assert facts.provider == "aws"
    assert facts.machine_type == "g6.xlarge"
    assert facts.os is OsFamily.GARDENLINUX
    assert facts.os_version == "1877.21"
    assert facts.os_image == GL
    assert facts.arch == "amd64"
    assert facts.kernel == "6.12.44-cloud-amd64"
    assert facts.pool == "gpu-a"
    assert facts.preinstalled_driver is False
    assert facts.opted_out is False


@pytest.mark.parametrize(
    ("body", "arch"),
    [
        (node(arch="arm64"), "arm64"),
        (node(arch=None, labels={"kubernetes.io/arch": "arm64"}), "arm64"),
        (node(arch=None, instance_type="x1.large"), "unknown"),
        # Without the kubelet's word: the registry's (Graviton, Grace).
        (node(arch=None), "amd64"),
        (node(arch=None, instance_type="g5g.xlarge"), "arm64"),
        (node(arch=None, instance_type="a4x-highgpu-4g", provider_id="gce://p/z/a4x"), "arm64"),
    ],
)
def test_arch(registry: MachineTypeRegistry, body: dict[str, Any], arch: str) -> None:
    assert node_facts(body, registry).arch == arch


@pytest.mark.parametrize(
    ("labels", "mig_config", "profile"),
    [
        ({}, None, None),
        ({"nvidia.com/mig.config": "all-disabled"}, None, None),
        ({"nvidia.com/mig.config": "all-1g.10gb"}, "all-1g.10gb", None),
        ({"nvidia.com/device-plugin.config": "mps-2"}, None, "mps-2"),
        ({"nvidia.com/device-plugin.config": ""}, None, None),
    ],
)
def test_mig_layout_and_sharing_profile(
    registry: MachineTypeRegistry, labels: dict[str, str], mig_config: str | None,
    profile: str | None,
) -> None:  # fmt: skip
    facts = node_facts(node(instance_type="p5.48xlarge", labels=labels), registry)
    assert (facts.mig_config, facts.mig_mode, facts.sharing_profile) == (
        mig_config, mig_config is not None, profile)  # fmt: skip


@pytest.mark.parametrize(
    ("body", "preinstalled"),
    [
        (node(), False),
        (ubuntu_node(), False),
        (ubuntu_node(labels={"gpu.kyma-project.io/driver-preinstalled": "true"}), True),
        (ubuntu_node(labels={"gpu.kyma-project.io/driver-preinstalled": "false"}), False),
        (node(os_image="Flatcar Container Linux by Kinvolk 4081.2.0 (Oklo)"), True),
        (node(os_image="Bottlerocket OS 1.29.0 (aws-k8s-1.31-nvidia)"), True),
        (node(os_image="Talos (v1.9.5)"), True),
    ],
)
def test_preinstalled_driver(
    registry: MachineTypeRegistry, body: dict[str, Any], preinstalled: bool
) -> None:
    assert node_facts(body, registry).preinstalled_driver is preinstalled


def test_a_heartbeat_changes_no_facts(registry: MachineTypeRegistry) -> None:
    body = node()
    beat = copy.deepcopy(body)
    beat["metadata"]["resourceVersion"] = "999"
    beat["status"]["conditions"] = [{"type": "Ready", "lastHeartbeatTime": "2026-11-30T07:00:00Z"}]
    beat["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0"}
    first, second = node_facts(body, registry), node_facts(beat, registry)
    assert first == second
    assert hash(first) == hash(second)


def test_a_minimal_node(registry: MachineTypeRegistry) -> None:
    facts = node_facts({"metadata": {"name": "bare"}}, registry)
    assert facts.os is OsFamily.UNKNOWN
    assert facts.provider == "unknown"
    assert facts.arch == "unknown"
    assert facts.kernel is None
    assert not facts.is_gpu


def _with(path: str, value: Any) -> dict[str, Any]:
    body = node()
    *parents, last = path.split(".")
    target = body
    for key in parents:
        target = target[key]
    target[last] = value
    return body


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(["not", "a", "node"], "expected a Node object, got list", id="list"),
        pytest.param("Node", "expected a Node object, got str", id="str"),
        pytest.param(None, "expected a Node object, got NoneType", id="none"),
        pytest.param({"kind": "Pod", "metadata": {"name": "p"}}, "kind 'Pod'", id="pod"),
        pytest.param({"kind": "Node"}, "without metadata.name", id="no-metadata"),
        pytest.param({"kind": "Node", "metadata": []}, "without metadata.name", id="meta-list"),
        pytest.param({"metadata": {"name": ""}}, "without metadata.name", id="empty-name"),
        pytest.param({"metadata": {"name": 7}}, "without metadata.name", id="int-name"),
        pytest.param(_with("metadata.labels", ["a=b"]), "metadata.labels", id="labels-list"),
        pytest.param(_with("spec", "x"), "spec must be a mapping", id="spec-str"),
        pytest.param(_with("status", [1]), "status must be a mapping", id="status-list"),
        pytest.param(_with("status.nodeInfo", "x"), "status.nodeInfo", id="nodeinfo-str"),
        pytest.param(_with("status.capacity", [1]), "status.capacity", id="capacity-list"),
    ],
)
def test_bad_bodies_raise_node_error(
    registry: MachineTypeRegistry, body: Any, message: str
) -> None:
    with pytest.raises(NodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        node_facts(body, registry)


def test_odd_scalars_are_read_as_text(registry: MachineTypeRegistry) -> None:
    body = node(labels={"gpu.kyma-project.io/gpu": "true"})
    body["metadata"]["labels"]["gpu.kyma-project.io/gpu-model"] = 4090
    body["metadata"]["labels"]["worker.gardener.cloud/pool"] = 1
    body["status"]["nodeInfo"]["osImage"] = 5
    body["spec"]["providerID"] = 17
    facts = node_facts(body, registry)
    assert facts.gpu_model == "4090"
    assert facts.pool == "1"
    assert facts.os is OsFamily.UNKNOWN
    assert facts.provider == "unknown"


def test_cluster_facts_grouping(registry: MachineTypeRegistry) -> None:
    facts = facts_of(
        registry,
        node("gl-b"),
        ubuntu_node("ub-a"),
        node("gl-a", os_image="Garden Linux 1877.23"),
        cpu_node("cpu-1"),
        cpu_node("cpu-2", os_image=UBUNTU),
        node("opted-out", labels={"gpu.kyma-project.io/gpu": "false"}),
        node(
            "odd",
            instance_type="x1",
            os_image="Debian GNU/Linux 12 (bookworm)",
            capacity={"nvidia.com/gpu": "1"},
        ),
        node("flat", os_image="Flatcar Container Linux by Kinvolk 4081.2.0 (Oklo)"),
    )
    assert [n.name for n in facts.gpu_nodes] == ["flat", "gl-a", "gl-b", "odd", "ub-a"]
    assert facts.cpu_node_count == 3
    by_name = {n.name: n for n in facts.gpu_nodes}
    assert [by_name[n].os for n in ("flat", "gl-a", "ub-a", "odd")] == [
        OsFamily.FLATCAR,
        OsFamily.GARDENLINUX,
        OsFamily.UBUNTU,
        OsFamily.UNKNOWN,
    ]
    assert sorted(n.os_version or "" for n in facts.gpu_nodes if n.os is OsFamily.GARDENLINUX) == [
        "1877.21",
        "1877.23",
    ]
    assert [n.name for n in facts.unknown_os_nodes] == ["odd"]
    assert [n.name for n in facts.unknown_machine_type_nodes] == ["odd"]


def test_cluster_facts_order_does_not_matter(registry: MachineTypeRegistry) -> None:
    bodies = [node("b"), ubuntu_node("a"), cpu_node("c"), node("d")]
    assert facts_of(registry, *bodies) == facts_of(registry, *reversed(bodies))
    assert hash(facts_of(registry, *bodies)) == hash(facts_of(registry, *reversed(bodies)))


def test_no_nodes() -> None:
    facts = cluster_facts([])
    assert facts.gpu_nodes == ()
    assert facts.cpu_node_count == 0


def test_values_that_nodes_repeat_are_one_string_object_across_nodes(
    registry: MachineTypeRegistry,
) -> None:
    """The JSON parser makes a new string per Node; the facts keep one per value (memory at
    20,000 Nodes, docs/performance.md)."""
    import json

    one, two = (json.loads(json.dumps(node(name))) for name in ("gpu-1", "gpu-2"))
    assert one["status"]["nodeInfo"]["osImage"] is not two["status"]["nodeInfo"]["osImage"]
    a, b = node_facts(one, registry), node_facts(two, registry)
    for field in ("provider", "machine_type", "os_image", "os_version", "arch", "kernel", "pool"):
        assert getattr(a, field) is not None, field
        assert getattr(a, field) is getattr(b, field), field
    assert a.name is not b.name
