"""Planning: driver modes, preflight, chart values and the Flux objects (docs/architecture.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kyma_gpu.api import GpuSpec
from kyma_gpu.api.conditions import PreflightReason
from kyma_gpu.api.models import ClusterDriverMode
from kyma_gpu.facts import ClusterFacts, cluster_facts
from kyma_gpu.plan import AllowedSources, Finding, Owner, Plan, Preflight, Severity, make_plan
from kyma_gpu.plan.allowed import allowed_sources_of
from kyma_gpu.plan.driver import resolve
from kyma_gpu.plan.features import FEATURE_CHECKS
from kyma_gpu.plan.plan import template_findings
from kyma_gpu.plan.preflight import CHECKS, preflight_findings
from kyma_gpu.rules.catalog import Catalog
from tests.unit.builders import allowing, cpu_node, facts_of, node, ubuntu_node

REPO = Path(__file__).resolve().parents[2]

PER_POOL = ClusterDriverMode.PER_POOL
UID = "0b5a8c1e-5f7d-4c2b-9a41-6d2f0e7b9c11"
INSTALLER = "ghcr.io/gardenlinux/gardenlinux-nvidia-installer/1.17.0"
FLATCAR = "Flatcar Container Linux by Kinvolk 4081.2.0 (Oklo)"


def plan_for(
    catalog: Catalog,
    *bodies: Mapping[str, Any],
    spec: Mapping[str, Any] | None = None,
    owner: Owner | None = None,
    allowed_sources: AllowedSources | None = None,
) -> Plan:
    facts = facts_of(catalog.machine_types, *bodies)
    return make_plan(GpuSpec.model_validate(spec or {}), facts, catalog, owner, allowed_sources)


def reasons(plan: Plan) -> list[tuple[str, str]]:
    return [(str(f.severity), f.reason) for f in plan.preflight.findings]


def dig(values: Mapping[str, Any], path: str) -> Any:
    node_: Any = values
    for key in path.split("."):
        node_ = node_[key]
    return node_


@pytest.mark.parametrize(
    ("os_image", "labels", "mode"),
    [
        ("Garden Linux 1877.21", {}, "Precompiled"),
        ("SUSE Linux Micro 6.1", {}, "Precompiled"),
        ("Ubuntu 22.04.5 LTS", {}, "Upstream"),
        ("Red Hat Enterprise Linux 9.4 (Plow)", {}, "Upstream"),
        ("SUSE Linux Enterprise Server 15 SP6", {}, "Upstream"),
        ("Debian GNU/Linux 12 (bookworm)", {}, "Upstream"),
        (FLATCAR, {}, "Preinstalled"),
        ("Bottlerocket OS 1.29.0 (aws-k8s-1.31-nvidia)", {}, "Preinstalled"),
        ("Talos (v1.9.5)", {}, "Preinstalled"),
        ("Ubuntu 22.04.5 LTS", {"gpu.kyma-project.io/driver-preinstalled": "true"}, "Preinstalled"),
        (
            "Garden Linux 1877.21",
            {"gpu.kyma-project.io/driver-preinstalled": "true"},
            "Preinstalled",
        ),
    ],
)
def test_auto_driver_mode_per_os(
    catalog: Catalog, os_image: str, labels: dict[str, str], mode: str
) -> None:
    plan = plan_for(catalog, node(os_image=os_image, labels=labels))
    assert plan.driver_mode == mode
    assert [n.driver_mode for n in plan.nodes] == [mode]


@pytest.mark.parametrize(
    ("mode", "mixed_mode", "drivers"),
    [
        ("Precompiled", PER_POOL, ["gpu-flatcar", "gpu-gardenlinux", "gpu-ubuntu"]),
        ("Upstream", PER_POOL, ["gpu-flatcar", "gpu-gardenlinux", "gpu-ubuntu"]),
        ("Preinstalled", "Preinstalled", []),
    ],
)
def test_a_fixed_mode_applies_to_every_node(
    catalog: Catalog, mode: str, mixed_mode: str, drivers: list[str]
) -> None:
    spec = {"driver": {"mode": mode, "version": "580.178.04"}}
    single = plan_for(catalog, node("gl-1"), node("gl-2"), spec=spec)
    assert single.driver_mode == mode
    assert {n.driver_mode for n in single.nodes} == {mode}
    assert "extraObjects" not in single.values
    # More than one OS still needs one driver per OS pool: the image tag depends on the OS.
    mixed = plan_for(
        catalog, node("gl"), ubuntu_node("ub"), node("flat", os_image=FLATCAR), spec=spec
    )
    assert {n.driver_mode for n in mixed.nodes} == {mode}
    assert mixed.driver_mode == mixed_mode
    assert sorted(_drivers(mixed)) == drivers


def without(values: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in keys}


def test_precompiled_garden_linux_values(catalog: Catalog) -> None:
    plan = plan_for(catalog, node(), cpu_node())
    values = plan.values
    assert plan.driver_mode == "Precompiled"
    assert plan.installer_release == "1.17.0"
    assert without(values["driver"], "upgradePolicy") == {
        "imagePullPolicy": "Always",
        "usePrecompiled": True,
        "version": "590",
        "repository": INSTALLER,
    }
    assert values["toolkit"] == {"installDir": "/opt/nvidia"}
    assert values["cdi"]["enabled"] is True
    custom = dig(values, "node-feature-discovery.worker.config.sources.custom")
    assert "system-os_release.VERSION_ID=0" in custom[0]["labelsTemplate"]
    assert "{{ range .system.osrelease }}" in custom[0]["labelsTemplate"]
    assert plan.driver_summary == "590"


@pytest.mark.parametrize(
    "values",
    [{"driver": {}}, {"toolkit": {}}, {"driver": None, "toolkit": {"resources": {}}},
     {"driver": {"rdma": {}, "resources": {"requests": {}}}}],
    ids=str,
)  # fmt: skip
def test_an_empty_map_or_a_null_in_spec_values_keeps_the_planned_values(
    catalog: Catalog, values: dict[str, Any]
) -> None:
    """What the API server leaves of a pruned key (`driver: {}`) wiped usePrecompiled, version,
    repository and upgradePolicy, and `toolkit: {}` the Garden Linux installDir (issue 49,
    finding 1): a map merges key by key, and nothing in it sets nothing."""
    planned = plan_for(catalog, node(), cpu_node())
    plan = plan_for(catalog, node(), cpu_node(), spec={"values": values})
    assert plan.values == planned.values
    assert plan.values["driver"]["usePrecompiled"] is True
    assert plan.values["toolkit"] == {"installDir": "/opt/nvidia"}


def test_a_listed_value_beside_an_empty_map_is_merged_over_the_planned_ones(
    catalog: Catalog,
) -> None:
    spec = {"values": {"driver": {"resources": {"limits": {"memory": "2Gi"}}}, "toolkit": {}}}
    plan = plan_for(catalog, node(), cpu_node(), spec=spec)
    assert plan.values["driver"]["resources"] == {"limits": {"memory": "2Gi"}}
    assert plan.values["driver"]["version"] == "590"
    assert plan.values["toolkit"] == {"installDir": "/opt/nvidia"}


def test_a_spec_branch_and_installer_release(catalog: Catalog) -> None:
    plan = plan_for(
        catalog,
        node(os_image="Garden Linux 1877.14"),
        spec={"driver": {"version": "580", "installerRelease": "1.7.0"}},
    )
    assert reasons(plan) == []
    assert plan.values["driver"]["version"] == "580"
    assert plan.values["driver"]["repository"].endswith("/1.7.0")
    assert plan.installer_release == "1.7.0"
    assert plan.driver_version == "580.159.03"
    assert plan.driver_summary == "580"


def test_upstream_values(catalog: Catalog) -> None:
    plan = plan_for(catalog, ubuntu_node())
    assert without(plan.values["driver"], "upgradePolicy") == {"usePrecompiled": False}
    assert plan.installer_release is None
    # The chart's default driver is what runs; status says so.
    assert (plan.driver_branch, plan.driver_version) == ("595", "595.91.07")
    assert plan.driver_summary == "595.91.07"


@pytest.mark.parametrize(("version", "full"), [("570", "570.211.01"), ("580.65.06", "580.65.06")])
def test_upstream_version_from_the_spec(catalog: Catalog, version: str, full: str) -> None:
    plan = plan_for(catalog, ubuntu_node(), spec={"driver": {"version": version}})
    assert plan.values["driver"]["version"] == full
    assert plan.driver_summary == full


def test_preinstalled_values(catalog: Catalog) -> None:
    plan = plan_for(
        catalog,
        node(os_image=FLATCAR),
        ubuntu_node(labels={"gpu.kyma-project.io/driver-preinstalled": "true"}),
    )
    assert plan.driver_mode == "Preinstalled"
    assert without(plan.values["driver"], "upgradePolicy") == {"enabled": False}
    assert plan.driver_summary == ""
    assert plan.installer_release is None


def _drivers(plan: Plan) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"] for o in plan.values.get("extraObjects", [])}


@pytest.fixture(scope="module")
def mixed(catalog: Catalog) -> Plan:
    """The plan of a fleet with two Garden Linux GPU nodes, an Ubuntu one and a CPU node."""
    return plan_for(catalog, node("gl-1"), node("gl-2"), ubuntu_node("ub-1"), cpu_node())


def test_a_mixed_fleet_gets_a_driver_per_pool(mixed: Plan) -> None:
    assert mixed.driver_mode == PER_POOL


def test_a_mixed_fleets_pools_get_their_os_driver_modes(mixed: Plan) -> None:
    assert [(str(p.os), str(p.mode)) for p in mixed.pools] == [
        ("gardenlinux", "Precompiled"),
        ("ubuntu", "Upstream"),
    ]


def test_a_mixed_fleet_enables_nvidiadriver_objects_without_the_default_one(mixed: Plan) -> None:
    assert mixed.values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}


def test_a_mixed_fleet_gets_one_nvidiadriver_per_pool(mixed: Plan) -> None:
    assert sorted(_drivers(mixed)) == ["gpu-gardenlinux", "gpu-ubuntu"]


def test_the_garden_linux_nvidiadriver_runs_the_precompiled_installer(mixed: Plan) -> None:
    gl = _drivers(mixed)["gpu-gardenlinux"]
    assert gl["usePrecompiled"] is True
    assert gl["repository"] == INSTALLER
    assert gl["version"] == "590"
    assert gl["imagePullPolicy"] == "Always"


def test_the_ubuntu_nvidiadriver_runs_nvidias_driver_container(mixed: Plan) -> None:
    ub = _drivers(mixed)["gpu-ubuntu"]
    assert ub["usePrecompiled"] is False
    assert ub["repository"] == "nvcr.io/nvidia"
    assert ub["version"] == "595.91.07"
    assert ub["imagePullPolicy"] == "IfNotPresent"


def test_no_nvidiadriver_needs_a_pull_secret(mixed: Plan) -> None:
    drivers = _drivers(mixed)
    gl, ub = drivers["gpu-gardenlinux"], drivers["gpu-ubuntu"]
    assert gl["imagePullSecrets"] == ub["imagePullSecrets"] == []


@pytest.mark.parametrize("os", ["gardenlinux", "ubuntu"])
def test_each_nvidiadriver_selects_the_nodes_of_its_os(mixed: Plan, os: str) -> None:
    selector = _drivers(mixed)[f"gpu-{os}"]["nodeSelector"]
    assert selector == {"feature.node.kubernetes.io/system-os_release.ID": os}


def test_the_per_pool_driver_rule_writes_the_extra_objects(mixed: Plan) -> None:
    assert mixed.provenance["extraObjects"] == "per-pool-driver-objects"


def test_mixed_fleet_preinstalled_pools_get_no_driver(catalog: Catalog) -> None:
    plan = plan_for(catalog, node("gl"), ubuntu_node("ub"), node("flat", os_image=FLATCAR))
    assert plan.driver_mode == PER_POOL
    assert sorted(_drivers(plan)) == ["gpu-gardenlinux", "gpu-ubuntu"]
    plan = plan_for(catalog, node("gl"), node("flat", os_image=FLATCAR))
    assert plan.driver_mode == PER_POOL
    assert sorted(_drivers(plan)) == ["gpu-gardenlinux"]


def test_mixed_preinstalled_fleet_is_preinstalled(catalog: Catalog) -> None:
    plan = plan_for(
        catalog,
        node("flat", os_image=FLATCAR),
        node("talos", os_image="Talos (v1.9.5)"),
    )
    assert plan.driver_mode == "Preinstalled"
    assert "extraObjects" not in plan.values


def test_mixed_fleet_upstream_version_from_the_spec(catalog: Catalog) -> None:
    plan = plan_for(catalog, node("gl"), ubuntu_node("ub"), spec={"driver": {"version": "580"}})
    drivers = _drivers(plan)
    assert drivers["gpu-gardenlinux"]["version"] == "580"
    # Not the installer's 580.178.04: the newest 580 NVIDIA publishes for Ubuntu 22.04.
    assert drivers["gpu-ubuntu"]["version"] == "580.126.20"
    sources = {str(p.os): (p.version, p.source) for p in plan.pools}
    assert sources == {"gardenlinux": ("580", "SpecBranch"),
                       "ubuntu": ("580.126.20", "NvidiaCatalog")}  # fmt: skip


def test_preflight_no_gpu_nodes(catalog: Catalog) -> None:
    plan = plan_for(catalog, cpu_node("a"), cpu_node("b"))
    assert reasons(plan) == [("warning", "NoGpuNodes")]
    assert "2 CPU-only nodes" in plan.preflight.findings[0].message
    assert plan.preflight.verdict == "warning"
    assert plan.driver_mode == "Precompiled"  # prepared for Garden Linux
    assert len(plan.objects) == 2


def test_preflight_unknown_os_and_machine_type(catalog: Catalog) -> None:
    plan = plan_for(
        catalog,
        node("odd", os_image="Debian GNU/Linux 12 (bookworm)"),
        node(
            "n1",
            instance_type="n1-standard-8",
            provider_id="gce://p/z/n1",
            labels={"gpu.kyma-project.io/gpu": "true"},
        ),
    )
    assert reasons(plan) == [
        ("warning", "UnknownOs"),
        ("info", "UnknownMachineType"),
        ("warning", "NoDriverForUnknownOs"),
    ]
    stranded = plan.preflight.findings[2]
    assert stranded.message.startswith("worker pool gpu (1 of 2 nodes: odd): mixed fleet: their OS")
    assert (stranded.pool, stranded.nodes, stranded.blocking) == ("gpu", ("odd",), True)
    assert (
        "(1 of 2 nodes: odd): OS 'Debian GNU/Linux 12 (bookworm)'"
        in plan.preflight.findings[0].message
    )
    assert "using Upstream driver mode" in plan.preflight.findings[0].message
    assert "GPU detected by opt-in" in plan.preflight.findings[1].message
    assert plan.preflight.verdict == "warning"


def test_preflight_info_only_is_ok(catalog: Catalog) -> None:
    plan = plan_for(catalog, node(instance_type="x", capacity={"nvidia.com/gpu": "1"}))
    assert reasons(plan) == [("info", "UnknownMachineType")]
    assert plan.preflight.verdict == "ok"


def test_preflight_unknown_installer_release(catalog: Catalog) -> None:
    spec = {"driver": {"installerRelease": "9.9.9"}}
    plan = plan_for(catalog, node(), spec=spec)
    assert reasons(plan) == [("error", "UnknownInstallerRelease")]
    assert "'9.9.9' is not adopted" in plan.preflight.findings[0].message
    assert "known: 1.17.0, 1.7.0" in plan.preflight.findings[0].message
    assert plan.objects == ()
    assert plan.helm_release is None
    # Nodes that do not use the installer do not care.
    assert reasons(plan_for(catalog, ubuntu_node(), spec=spec)) == []


def test_preflight_upstream_branch_without_a_build(catalog: Catalog) -> None:
    plan = plan_for(catalog, ubuntu_node(), spec={"driver": {"version": "410"}})
    assert reasons(plan) == [("error", "UnknownDriverVersion")]
    assert "NVIDIA's catalog has no driver of branch 410 (branches: 595, 590, 580, 570" in (
        plan.preflight.findings[0].message
    )
    assert plan.objects == ()


@pytest.mark.parametrize(
    ("version", "expected", "source"),
    [
        # The chart's own default branch, refused before: the installer builds no 595.
        ("595", "595.91.07", "NvidiaCatalog"),
        ("580", "580.126.20", "NvidiaCatalog"),  # the newest confirmed 580, not 580.178.04
        ("570", "570.211.01", "NvidiaCatalog"),  # no confirmed 570: the newest listed
        ("580.95.05", "580.95.05", "Spec"),
        (None, "595.91.07", "ChartDefault"),
    ],
)
def test_upstream_versions_come_from_nvidias_catalog(
    catalog: Catalog, version: str | None, expected: str, source: str
) -> None:
    spec = {"driver": {"version": version}} if version else {}
    plan = plan_for(catalog, ubuntu_node(), spec=spec)
    assert reasons(plan) == []
    assert [(p.version, p.source) for p in plan.pools] == [(expected, source)]
    assert plan.driver_version == expected
    assert plan.document()["driver"]["pools"][0]["versionSource"] == source


def test_an_upstream_pool_without_a_published_image_is_blocked(catalog: Catalog) -> None:
    """Ubuntu 20.04 gets no 595 driver container: that pool is blocked, the other served."""
    plan = plan_for(
        catalog,
        ubuntu_node("old", os_image="Ubuntu 20.04.6 LTS", pool="legacy"),
        ubuntu_node("new", pool="gpu"),
    )
    assert reasons(plan) == [("error", "NoDriverImage")]
    finding = plan.preflight.findings[0]
    assert finding.pool == "legacy"
    assert "NVIDIA publishes no nvcr.io/nvidia/driver:595.91.07-ubuntu20.04" in finding.message
    assert "newest for ubuntu20.04: 570.211.01" in finding.message
    assert plan.preflight.verdict == "warning"
    assert plan.preflight.blocked == ("legacy",)
    assert plan.helm_release is not None
    # A version the catalog does not list: a warning, it cannot tell.
    unlisted = plan_for(catalog, ubuntu_node(), spec={"driver": {"version": "580.999.01"}})
    assert reasons(unlisted) == [("warning", "NoDriverImage")]
    assert "does not list driver 580.999.01" in unlisted.preflight.findings[0].message
    assert not unlisted.preflight.findings[0].blocking


def test_preflight_unknown_chart_version(catalog: Catalog) -> None:
    refused = plan_for(catalog, node(), spec={"operatorVersion": "v27.1.0"})
    assert ("error", "ChartSourceNotAllowed") in reasons(refused)
    assert refused.objects == ()
    nvidia = "https://helm.ngc.nvidia.com/nvidia"
    allowed_sources = allowing({"kind": "HelmRepository", "url": nvidia,
                        "operatorVersions": ["v26.7.0", "v27.1.0"]}, nvidia=False)  # fmt: skip
    plan = plan_for(
        catalog, node(), spec={"operatorVersion": "v27.1.0"}, allowed_sources=allowed_sources
    )
    assert reasons(plan) == [("warning", "UnknownChartVersion")]
    assert plan.chart_version == "v27.1.0"
    assert plan.helm_release is not None
    assert plan.helm_release["spec"]["chart"]["spec"]["version"] == "v27.1.0"
    mirrored = plan_for(
        catalog,
        node(),
        spec={"operatorVersion": "v27.1.0", "source": {"imageRegistry": "mirror.example"}},
        allowed_sources=allowed_sources,
    )
    assert ("error", "MirrorNeedsChartFacts") in reasons(mirrored)
    assert mirrored.objects == ()
    # The user guide's row for spec.operatorVersion says the same (it once promised only the
    # warning), and names the versions the module has facts for.
    guide = (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8")
    (row,) = [line for line in guide.splitlines() if line.startswith("| `spec.operatorVersion`")]
    said = re.findall(r"`([A-Z][A-Za-z]+)`", row)
    assert said == ["ChartSourceNotAllowed", "UnknownChartVersion", "MirrorNeedsChartFacts"], row
    today = re.search(r"today ((?:`v[\d.]+`(?:, )?)+)", row)
    assert today is not None, row
    assert re.findall(r"`(v[\d.]+)`", today.group(1)) == sorted(catalog.chart_versions()), row


def test_preflight_matrix(catalog: Catalog) -> None:
    spec = {"driver": {"version": "570"}}
    some = plan_for(
        catalog,
        node("ok", os_image="Garden Linux 1877.21"),
        node("old", os_image="Garden Linux 1877.18"),
        node("new", os_image="Garden Linux 2150.8.0"),
        spec=spec,
    )
    assert reasons(some) == [("warning", "NoDriverImage"), ("warning", "NoDriverImage")]
    messages = [f.message for f in some.preflight.findings]
    assert messages[0].startswith(
        "worker pool gpu (1 of 3 nodes: new): installer release 1.17.0 excludes driver 570.211.01"
    )
    assert messages[1].startswith("worker pool gpu (1 of 3 nodes: old): Garden Linux 1877.18 is")
    assert (
        "update the pool's machine image to a version the release builds (1877.19)" in (messages[1])
    )
    assert some.helm_release is not None
    every = plan_for(catalog, node("new", os_image="Garden Linux 2150.8.0"), spec=spec)
    assert reasons(every) == [("error", "NoDriverImage")]
    assert every.preflight.verdict == "error"  # the only pool is blocked: nothing to serve
    assert every.objects == ()
    arm = plan_for(catalog, node("arm", instance_type="g5g.xlarge", arch="arm64"))
    assert reasons(arm) == [("error", "NoDriverImage")]
    assert "architecture arm64" in arm.preflight.findings[0].message


def test_the_matrix_ignores_other_pools(catalog: Catalog) -> None:
    plan = plan_for(catalog, ubuntu_node(arch="arm64"), spec={"driver": {"version": "570"}})
    assert reasons(plan) == []


@pytest.mark.parametrize(
    ("severities", "verdict", "worst"),
    [
        ((), "ok", None),
        ((Severity.INFO,), "ok", "info"),
        ((Severity.INFO, Severity.WARNING), "warning", "warning"),
        ((Severity.WARNING, Severity.ERROR, Severity.INFO), "error", "error"),
    ],
)
def test_preflight_verdict(
    severities: tuple[Severity, ...], verdict: str, worst: str | None
) -> None:
    reasons = list(PreflightReason)
    preflight = Preflight(tuple(Finding(s, reasons[i], "m") for i, s in enumerate(severities)))
    assert preflight.verdict == verdict
    found = preflight.worst()
    assert (str(found.severity) if found else None) == worst


def test_helm_repository_source(catalog: Catalog) -> None:
    plan = plan_for(catalog, node(), owner=Owner(uid=UID))
    source, release = plan.objects
    assert source["kind"] == "HelmRepository"
    assert source["spec"] == {"interval": "1h", "url": "https://helm.ngc.nvidia.com/nvidia"}
    chart = release["spec"]["chart"]["spec"]
    assert chart["chart"] == "gpu-operator"
    assert chart["version"] == "v26.7.0"
    assert chart["sourceRef"] == {
        "kind": "HelmRepository",
        "name": "gpu-operator",
        "namespace": "kyma-system",
    }
    assert plan.source is source
    assert plan.helm_release is release


def test_oci_source(catalog: Catalog) -> None:
    spec = {
        "source": {
            "chartRepository": "oci://registry.example/mirror/charts/",
            "secretRef": "chart-auth",
        }
    }
    mirror = {"kind": "OCIRepository", "url": "oci://registry.example/mirror/charts",
              "secretRefs": ["chart-auth"]}  # fmt: skip
    source, release = plan_for(catalog, node(), spec=spec, allowed_sources=allowing(mirror)).objects
    assert source["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert source["kind"] == "OCIRepository"
    assert source["spec"]["url"] == "oci://registry.example/mirror/charts/gpu-operator"
    assert source["spec"]["ref"] == {"tag": "v26.7.0"}
    assert source["spec"]["layerSelector"]["operation"] == "copy"
    assert source["spec"]["secretRef"] == {"name": "chart-auth"}
    assert "insecure" not in source["spec"]
    assert release["spec"]["chartRef"] == {
        "kind": "OCIRepository",
        "name": "gpu-operator",
        "namespace": "kyma-system",
    }
    assert "chart" not in release["spec"]


def test_insecure_sources(catalog: Catalog) -> None:
    allowed_sources = allowing(
        {"kind": "OCIRepository", "url": "oci://127.0.0.1:5000/charts", "insecure": True},
        {"kind": "HelmRepository", "url": "http://127.0.0.1:8879/charts", "insecure": True},
    )
    oci = {"source": {"chartRepository": "oci://127.0.0.1:5000/charts", "insecure": True}}
    source, _ = plan_for(catalog, node(), spec=oci, allowed_sources=allowed_sources).objects
    assert source["spec"]["insecure"] is True
    http = {"source": {"chartRepository": "http://127.0.0.1:8879/charts", "insecure": True}}
    source, _ = plan_for(catalog, node(), spec=http, allowed_sources=allowed_sources).objects
    assert source["kind"] == "HelmRepository"
    assert source["spec"]["url"] == "http://127.0.0.1:8879/charts"


@pytest.mark.parametrize(
    ("spec", "location"),
    [
        ({"source": {"chartRepository": "http://charts.example"}}, "source"),
        ({"source": {"chartRepository": "ftp://charts.example"}}, "source.chartRepository"),
        ({"source": {"imageRegistry": "https://mirror.example"}}, "source.imageRegistry"),
        ({"source": {"imagePullSecrets": ["Not_A_Name"]}}, "source.imagePullSecrets"),
        ({"driver": {"mode": "Foo"}}, "driver.mode"),
        ({"driver": {"version": "latest"}}, "driver.version"),
        ({"driver": {"version": 590}}, "driver.version"),
        ({"driver": {"installerRelease": "1.17"}}, "driver.installerRelease"),
        ({"operatorVersion": "latest"}, "operatorVersion"),
        ({"components": {"dcgmExporter": "maybe"}}, "components.dcgmExporter"),
        ({"unknownField": 1}, "unknownField"),
    ],
)
def test_invalid_specs_are_rejected_by_the_model(spec: dict[str, Any], location: str) -> None:
    with pytest.raises(ValidationError) as err:
        GpuSpec.model_validate(spec)
    assert ".".join(str(p) for p in err.value.errors()[0]["loc"]).startswith(location)


def test_owner_references(catalog: Catalog) -> None:
    owned = plan_for(catalog, node(), owner=Owner(uid=UID))
    for obj in owned.objects:
        assert obj["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "gpu.kyma-project.io/v1beta1",
                "kind": "Gpu",
                "name": "gpu",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert obj["metadata"]["namespace"] == "kyma-system"
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kyma-gpu"
    for obj in plan_for(catalog, node()).objects:
        assert "ownerReferences" not in obj["metadata"]


def test_helm_release_follows_flux_recommendations(catalog: Catalog) -> None:
    release = plan_for(catalog, node()).helm_release
    assert release is not None
    spec = release["spec"]
    assert spec["install"]["crds"] == "CreateReplace"
    assert spec["upgrade"]["crds"] == "CreateReplace"
    assert spec["install"]["strategy"]["name"] == "RetryOnFailure"
    assert spec["upgrade"]["strategy"]["name"] == "RetryOnFailure"
    assert spec["driftDetection"]["mode"] == "enabled"
    assert spec["driftDetection"]["ignore"]
    assert spec["uninstall"]["keepHistory"] is False
    assert spec["timeout"] == "20m"
    assert spec["targetNamespace"] == "gpu-operator"
    assert spec["releaseName"] == "gpu-operator"
    assert spec["values"] == plan_for(catalog, node()).values


def test_mirror_rewrites_every_chart_image(catalog: Catalog) -> None:
    mirror = "registry.sovereign.example/mirror"
    plan = plan_for(
        catalog,
        node(),
        spec={"source": {"imageRegistry": mirror, "imagePullSecrets": ["pull"]}},
    )
    chart = catalog.chart("v26.7.0")
    assert chart is not None
    for image in chart.images:
        repository = dig(plan.values, f"{image.path}.repository")
        assert repository.startswith(mirror + "/"), image.path
        assert plan.provenance[f"{image.path}.repository"] == "image-mirror"
    assert plan.values["driver"]["repository"] == (
        f"{mirror}/gardenlinux/gardenlinux-nvidia-installer/1.17.0"
    )
    assert dig(plan.values, "node-feature-discovery.image.repository") == (
        f"{mirror}/nfd/node-feature-discovery"
    )
    assert dig(plan.values, "dcgmExporter.repository") == f"{mirror}/nvidia/k8s"
    assert plan.rules_applied[-1] == "image-mirror"
    for path in ("operator", "driver", "toolkit", "devicePlugin", "nodeStatusExporter"):
        assert dig(plan.values, f"{path}.imagePullSecrets") == ["pull"]
    assert dig(plan.values, "node-feature-discovery.imagePullSecrets") == [{"name": "pull"}]


def test_mirror_covers_the_older_chart_too(catalog: Catalog) -> None:
    plan = plan_for(
        catalog,
        node(),
        spec={"operatorVersion": "v26.3.3", "source": {"imageRegistry": "mirror.example:5000"}},
    )
    assert dig(plan.values, "node-feature-discovery.image.repository") == (
        "mirror.example:5000/nfd/node-feature-discovery"
    )


def test_mirror_covers_per_pool_drivers(catalog: Catalog) -> None:
    mirror = "mirror.example"
    plan = plan_for(
        catalog,
        node("gl"),
        ubuntu_node("ub"),
        spec={"source": {"imageRegistry": mirror, "imagePullSecrets": ["pull"]}},
    )
    drivers = _drivers(plan)
    assert drivers["gpu-gardenlinux"]["repository"] == (
        f"{mirror}/gardenlinux/gardenlinux-nvidia-installer/1.17.0"
    )
    assert drivers["gpu-ubuntu"]["repository"] == f"{mirror}/nvidia"
    assert {d["imagePullSecrets"][0] for d in drivers.values()} == {"pull"}


def test_no_mirror_no_pull_secrets(catalog: Catalog) -> None:
    plan = plan_for(catalog, node())
    assert "imagePullSecrets" not in plan.values["driver"]
    assert "operator" not in plan.values
    assert "image-mirror" not in plan.rules_applied


@pytest.mark.parametrize(
    ("components", "expected"),
    [
        ({}, {"dcgmExporter": True, "serviceMonitor": False, "migManager": False, "gfd": True}),
        (
            {"dcgmExporter": False, "migManager": True, "serviceMonitor": True},
            {"dcgmExporter": False, "serviceMonitor": True, "migManager": True, "gfd": True},
        ),
    ],
)
def test_components(
    catalog: Catalog, components: dict[str, bool], expected: dict[str, bool]
) -> None:
    values = plan_for(catalog, node(), spec={"components": components}).values
    assert {
        "dcgmExporter": values["dcgmExporter"]["enabled"],
        "serviceMonitor": values["dcgmExporter"]["serviceMonitor"]["enabled"],
        "migManager": values["migManager"]["enabled"],
        "gfd": values["gfd"]["enabled"],
    } == expected


def test_spec_values_are_merged_last(catalog: Catalog) -> None:
    spec = {
        "source": {"imageRegistry": "mirror.example"},
        "values": {
            "driver": {"imagePullPolicy": "IfNotPresent"},
            "operator": {"priorityClassName": "system-node-critical"},
            "migManager": {"config": {"name": "mig-layouts", "default": "all-disabled"}},
            "toolkit": None,  # dropped, as the API server drops it: never unsets the module's
        },
    }
    mirrors = allowed_sources_of({"data": {"registries": "mirror.example\n"}})
    plan = plan_for(catalog, node(), spec=spec, allowed_sources=mirrors)
    assert plan.rules_applied[-2:] == ("image-mirror", "spec.values")
    assert plan.values["driver"]["imagePullPolicy"] == "IfNotPresent"
    assert plan.values["operator"]["priorityClassName"] == "system-node-critical"
    assert plan.values["migManager"]["config"] == {"name": "mig-layouts", "default": "all-disabled"}
    assert plan.values["toolkit"]["installDir"] == "/opt/nvidia"
    assert plan.values["driver"]["repository"].startswith("mirror.example/")  # untouched
    for path in (
        "driver.imagePullPolicy",
        "operator.priorityClassName",
        "migManager.config.name",
        "migManager.config.default",
    ):
        assert plan.provenance[path] == "spec.values", path
    assert not [
        p for p, by in plan.provenance.items() if p.startswith("toolkit") and by == "spec.values"
    ]
    assert plan.provenance["driver.repository"] == "image-mirror"


def test_node_status_entries(catalog: Catalog) -> None:
    plan = plan_for(catalog, ubuntu_node("b"), node("a"), cpu_node())
    assert [n.model_dump(by_alias=True, exclude_none=True) for n in plan.nodes] == [
        {
            "name": "a",
            "provider": "aws",
            "machineType": "g6.xlarge",
            "gpuModel": "L4",
            "gpuCount": 1,
            "os": "gardenlinux",
            "osVersion": "1877.21",
            "arch": "amd64",
            "driverMode": "Precompiled",
            "pool": "gpu",
        },
        {
            "name": "b",
            "provider": "aws",
            "machineType": "g4dn.xlarge",
            "gpuModel": "T4",
            "gpuCount": 1,
            "os": "ubuntu",
            "osVersion": "22.04.5",
            "arch": "amd64",
            "driverMode": "Upstream",
            "pool": "gpu",
        },
    ]


def test_plan_is_deterministic(catalog: Catalog) -> None:
    bodies = [node("gl"), ubuntu_node("ub"), cpu_node()]
    first = plan_for(catalog, *bodies, owner=Owner(uid=UID)).document()
    second = plan_for(catalog, *reversed(bodies), owner=Owner(uid=UID)).document()
    assert first == second


def test_plan_does_not_share_values_with_the_catalog(catalog: Catalog) -> None:
    plan = plan_for(catalog, node())
    plan.values["driver"]["version"] = "mutated"
    plan.values["node-feature-discovery"]["worker"]["config"]["sources"]["custom"].clear()
    again = plan_for(catalog, node())
    assert again.values["driver"]["version"] == "590"
    assert again.values["node-feature-discovery"]["worker"]["config"]["sources"]["custom"]


def test_empty_cluster_facts(catalog: Catalog) -> None:
    plan = make_plan(GpuSpec(), ClusterFacts(gpu_nodes=(), cpu_node_count=0), catalog)
    assert plan.nodes == ()
    assert plan.pools == ()
    assert reasons(plan) == [("warning", "NoGpuNodes")]
    assert make_plan(GpuSpec(), cluster_facts([]), catalog).document() == plan.document()


def test_garden_linux_upstream_does_not_adopt_the_installer(catalog: Catalog) -> None:
    """Found by hypothesis: a fixed Upstream mode on a mixed fleet read the values of an
    unknown installer release (a RuleError out of make_plan)."""
    spec = {"driver": {"mode": "Upstream", "installerRelease": "9.9.9"}}
    plan = plan_for(catalog, node("gl"), ubuntu_node("ub"), spec=spec)
    assert plan.driver_mode == PER_POOL
    assert "garden-linux-installer-values" not in plan.rules_applied
    assert "cdi" not in plan.values
    assert plan.installer_release is None
    assert reasons(plan) == [("warning", "UpstreamOnGardenLinux")]
    assert {d["repository"] for d in _drivers(plan).values()} == {"nvcr.io/nvidia"}


def test_preinstalled_node_in_a_driven_os_pool_must_be_excluded(catalog: Catalog) -> None:
    """A per-pool NVIDIADriver selects by OS ID, so a Garden Linux node with its own driver is
    selected by the Garden Linux NVIDIADriver unless the NVIDIA operator's own switch is off."""
    own = {"gpu.kyma-project.io/driver-preinstalled": "true"}
    plan = plan_for(catalog, node("gl"), node("own", labels=own), ubuntu_node("ub"))
    assert plan.driver_mode == "PerPool"
    assert reasons(plan) == [("warning", "PreinstalledNodeNotExcluded")]
    message = plan.preflight.findings[0].message
    assert "nodes own have their own driver" in message
    assert "nvidia.com/gpu.deploy.driver=false" in message

    excluded = {**own, "nvidia.com/gpu.deploy.driver": "false"}
    plan = plan_for(catalog, node("gl"), node("own", labels=excluded), ubuntu_node("ub"))
    assert reasons(plan) == []
    # The NVIDIA operator's label alone marks a node Preinstalled too.
    only_nvidia = {"nvidia.com/gpu.deploy.driver": "false"}
    plan = plan_for(catalog, node("gl"), node("own", labels=only_nvidia), ubuntu_node("ub"))
    modes = {n.name: n.driver_mode for n in plan.nodes}
    assert modes["own"] == "Preinstalled"
    assert reasons(plan) == []


def test_preinstalled_pool_of_an_os_without_a_driver_pool_needs_nothing(catalog: Catalog) -> None:
    own = {"gpu.kyma-project.io/driver-preinstalled": "true"}
    plan = plan_for(
        catalog, node("gl"), ubuntu_node("ub-own", labels=own), ubuntu_node("x", labels=own)
    )
    assert reasons(plan) == []


def test_the_plan_is_its_preflight_checks_in_order(catalog: Catalog) -> None:
    """make_plan's findings (before the mirror step) are the checks' findings, in order: the
    driver checks (CHECKS), then the typed operations' (FEATURE_CHECKS)."""
    spec = GpuSpec.model_validate({"driver": {"mode": "Upstream", "version": "123"}})
    facts = facts_of(catalog.machine_types, node("gpu-0"), ubuntu_node("gpu-1"))
    resolved = resolve(spec, facts, catalog)
    checks = (*CHECKS, *FEATURE_CHECKS)
    expected = [f for check in checks for f in check(resolved)]
    assert expected == preflight_findings(resolved, checks)
    assert list(make_plan(spec, facts, catalog).preflight.findings) == expected
    assert [f.reason for f in expected][:2] == ["UpstreamOnGardenLinux", "UnknownDriverVersion"]
    assert isinstance(make_plan(spec, facts, catalog).driver_mode, ClusterDriverMode)


# -- worker pools ----------------------------------------------------------------------------


def test_a_pool_past_the_matrix_is_one_finding_with_its_count(catalog: Catalog) -> None:
    """Three nodes of one pool on the same new Garden Linux: one finding, not three, and the
    advice for a version newer than the release builds."""
    past = [node(f"new-{i}", os_image="Garden Linux 2150.10.0", pool="next") for i in range(3)]
    plan = plan_for(catalog, node("ok-1"), node("ok-2"), *past)
    (finding,) = plan.preflight.findings
    assert (finding.severity, finding.reason, finding.pool) == ("error", "NoDriverImage", "next")
    assert finding.nodes == ("new-0", "new-1", "new-2")
    assert finding.message.startswith("worker pool next (3 of 3 nodes: new-0, new-1, new-2): ")
    assert "wait for an installer release that builds it" in finding.message
    assert "pin the pool's machine image to 2150.9.0" in finding.message
    assert plan.preflight.verdict == "warning"
    assert (plan.preflight.blocked, plan.preflight.degraded) == (("next",), ())
    assert [plan.pool_state(p.name) for p in plan.worker_pools] == ["ok", "blocked"]
    # The good pool's values are those it gets alone.
    alone = plan_for(catalog, node("ok-1"), node("ok-2"))
    assert plan.values == alone.values


def test_many_nodes_are_named_in_part(catalog: Catalog) -> None:
    past = [node(f"n{i:02}", os_image="Garden Linux 2150.10.0") for i in range(12)]
    plan = plan_for(catalog, *past)
    (finding,) = plan.preflight.findings
    assert finding.message.startswith("worker pool gpu (12 of 12 nodes: n00, n01, n02 and 9 more)")
    assert len(finding.nodes) == 12
    assert plan.preflight.verdict == "error"  # the only pool: nothing to serve


def test_another_adopted_release_that_builds_it_is_named(catalog: Catalog) -> None:
    """Garden Linux 1592.12 is older than 1.17.0 builds; 1.7.0 builds it."""
    plan = plan_for(catalog, node("old", os_image="Garden Linux 1592.12"), node("ok"))
    (finding,) = plan.preflight.findings
    assert "installer release 1.7.0 builds it: set spec.driver.installerRelease" in finding.message


def test_a_branch_the_release_does_not_build_is_the_specs_error(catalog: Catalog) -> None:
    plan = plan_for(catalog, node("gl"), ubuntu_node("ub", pool="ub"), spec={"driver": {
        "version": "550"}})  # fmt: skip
    assert reasons(plan) == [("error", "NoDriverImage")]
    finding = plan.preflight.findings[0]
    assert finding.pool is None
    assert finding.message.startswith("driver branch 550: installer release 1.17.0 builds no")
    assert plan.preflight.verdict == "error"


GL_OLD = "Garden Linux 1877.14"  # in installer release 1.7.0's build matrix
BUILDS_117 = "(builds: 590.48.01, 580.178.04, 570.211.01)"
REFUSED = ("error", "UnknownDriverVersion")


@pytest.mark.parametrize(
    ("bodies", "driver", "expected", "pool_versions", "words"),
    [
        # A full version the installer release does not build: refused, not made its branch.
        (
            [node()],
            {"version": "590.1.1"},
            [REFUSED],
            [None],
            f"'590.1.1': installer release 1.17.0 does not build it {BUILDS_117}; its Garden "
            "Linux images are per branch, and branch 590's holds 590.48.01. Set "
            "spec.driver.version to the branch ('590')",
        ),
        # A real NVIDIA driver that 1.17.0 does not build (older releases did: history.yaml).
        (
            [node()],
            {"version": "580.126.20"},
            [REFUSED],
            [None],
            f"'580.126.20': installer release 1.17.0 does not build it {BUILDS_117}",
        ),
        (
            [node(os_image=GL_OLD)],
            {"version": "580.178.04", "installerRelease": "1.7.0"},
            [REFUSED],
            [None],
            "(builds: 590.48.01, 580.159.03, 570.211.01)",
        ),
        ([node()], {"mode": "Precompiled", "version": "590.1.1"}, [REFUSED], [None], ""),
        # The Garden Linux pool of a mixed fleet would silently get 580.178.04.
        (
            [node("gl"), ubuntu_node("ub", pool="ub")],
            {"version": "580.126.20"},
            [REFUSED],
            [None, "580.126.20"],
            "branch 580's holds 580.178.04",
        ),
        # No GPU nodes: the stack is prepared for Garden Linux, with the spec's version.
        ([cpu_node()], {"version": "590.1.1"}, [("warning", "NoGpuNodes"), REFUSED], [], ""),
        # What the release builds, and branches, keep working.
        ([node()], {"version": "590.48.01"}, [], ["590"], ""),
        ([node()], {"version": "590"}, [], ["590"], ""),
        (
            [node(os_image=GL_OLD)],
            {"version": "580.159.03", "installerRelease": "1.7.0"},
            [],
            ["580"],
            "",
        ),
        (
            [node("gl"), ubuntu_node("ub", pool="ub")],
            {"version": "580"},
            [],
            ["580", "580.126.20"],
            "",
        ),
        # A branch the release does not build is the branch's error, said once.
        (
            [node()],
            {"version": "550.1.2"},
            [("error", "NoDriverImage")],
            ["550"],
            "driver branch 550: installer release 1.17.0 builds no driver of it",
        ),
        # Other modes: no installer. Upstream's catalog is not complete: a version it does not
        # list is a warning (NoDriverImage), as before; Preinstalled ignores the version.
        (
            [ubuntu_node()],
            {"version": "590.1.1"},
            [("warning", "NoDriverImage")],
            ["590.1.1"],
            "does not list driver 590.1.1; check that nvcr.io/nvidia/driver:590.1.1-ubuntu22.04",
        ),
        ([node()], {"mode": "Preinstalled", "version": "590.1.1"}, [], [None], ""),
    ],
)
def test_a_full_version_the_installer_release_does_not_build(
    catalog: Catalog,
    bodies: list[dict[str, Any]],
    driver: dict[str, str],
    expected: list[tuple[str, str]],
    pool_versions: list[str | None],
    words: str,
) -> None:
    plan = plan_for(catalog, *bodies, spec={"driver": driver})
    assert reasons(plan) == expected
    assert [p.version for p in plan.pools] == pool_versions
    assert not words or any(words in f.message for f in plan.preflight.findings)
    if REFUSED in expected:
        assert plan.preflight.verdict == "error"
        assert plan.objects == ()
        assert all(f.pool is None for f in plan.preflight.findings)  # the spec's error
    elif plan.driver_mode == "Precompiled":  # the branch reaches the chart, as before
        assert plan.values["driver"]["version"] == pool_versions[0]


def test_nodes_without_a_pool_label(catalog: Catalog) -> None:
    plan = plan_for(catalog, node("bare", os_image="Garden Linux 2150.10.0", pool=None), node("ok"))
    (finding,) = plan.preflight.findings
    assert finding.pool == "(none)"
    assert finding.message.startswith("nodes without a worker pool label (1 of 1 node: bare): ")


def test_template_code_in_extra_objects_stops_the_plan() -> None:
    """The chart runs extraObjects through tpl; nothing that reaches them may hold {{."""
    clean = {"extraObjects": [{"kind": "NVIDIADriver", "spec": {"podSelector": "app=x"}}]}
    assert template_findings(clean) == []
    dirty = {"extraObjects": [{"spec": {"upgradePolicy": {"podSelector": "{{ .Values.p }}"}}}]}
    [finding] = template_findings(dirty)
    assert finding.reason == "TemplateInExtraObjects"
    assert "extraObjects[0].spec.upgradePolicy.podSelector" in finding.message
    assert template_findings({"extraObjects": [{"{{ x }}": 1}]}) != []
    assert template_findings({"driver": {"version": "{{ x }}"}}) == []  # not through tpl


@pytest.mark.parametrize(
    "path",
    [
        ("driver", "version"),
        ("driver", "installerRelease"),
        ("driver", "upgradePolicy", "maxUnavailable"),
        ("driver", "upgradePolicy", "waitForCompletion", "podSelector"),
        ("driver", "upgradePolicy", "drain", "podSelector"),
        ("operatorVersion",),
        ("source", "imageRegistry"),
        ("components", "vgpuManagerImage"),
    ],
)
def test_no_typed_field_that_reaches_extra_objects_holds_braces(path: tuple[str, ...]) -> None:
    """The typed fields the module prints into its NVIDIADriver objects (extraObjects, which
    the chart renders with tpl) cannot hold template delimiters: the model refuses them
    before the preflight check above would have to."""
    spec: dict[str, Any] = {}
    node = spec
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = "{{ .Values.p | b64dec }}"
    with pytest.raises(ValidationError):
        GpuSpec.model_validate(spec)
