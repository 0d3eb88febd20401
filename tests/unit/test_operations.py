"""The typed GPU operations (issue 12): the models' own refusals, the device plugin files,
the rule context, every feature preflight check, and what the status makes of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kyma_gpu.api.models import ComponentsSpec, GpuSpec
from kyma_gpu.api.operations import MigStrategy, SharingMode, SharingSpec
from kyma_gpu.facts.stack import DaemonSetFacts, OperatorStateFacts, cluster_policy_facts
from kyma_gpu.plan.allowed import allowed_sources_of
from kyma_gpu.plan.plan import Plan, make_plan
from kyma_gpu.plan.sharing import config_map_name, device_plugin_config, device_plugin_configs
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.status.aggregate import Evidence, aggregate, nodes_ready, sharing_status
from tests.unit.builders import cpu_node, facts_of, node, ubuntu_node

A100 = "p4d.24xlarge"
"""An AWS machine type with A100 GPUs (MIG-capable, no Confidential Computing)."""


VGPU_MIRRORS = allowed_sources_of({"data": {"registries": "r.corp\nregistry.corp:5000\npublic\n"}})
"""The vGPU images of these tests come from mirrors a cluster administrator lists."""


def plan_for(catalog: Catalog, *bodies: Mapping[str, Any], spec: Mapping[str, Any]) -> Plan:
    facts = facts_of(catalog.machine_types, *bodies)
    return make_plan(GpuSpec.model_validate(spec), facts, catalog, allowed_sources=VGPU_MIRRORS)


def findings(plan: Plan) -> list[tuple[str, str]]:
    return [(str(f.severity), str(f.reason)) for f in plan.preflight.findings]


# -- the models refuse what contradicts itself ----------------------------------------------


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"sharing": {"mode": "TimeSlicing"}}, "replicas is required"),
        ({"sharing": {"mode": "MPS", "replicas": 1}}, "greater than or equal to 2"),
        ({"sharing": {"mode": "MPS", "replicas": 2, "failRequestsGreaterThanOne": True}},
         "TimeSlicing only"),
        ({"sharing": {"profiles": [{"name": "default", "mode": "None"}]}}, "may not be named"),
        ({"sharing": {"profiles": [{"name": "Big_One"}]}}, "String should match pattern"),
        ({"components": {"vgpuManager": True}}, "needs spec.components.vgpuManagerImage"),
        ({"components": {"vgpuManagerImage": "no-tag/vgpu-manager"}}, "should match pattern"),
        ({"components": {"sandboxWorkloads": "Docker"}}, "Input should be"),
        ({"driver": {"upgradePolicy": {"maxUnavailable": "150%"}}}, "should match pattern"),
        ({"driver": {"upgradePolicy": {"maxParallelUpgrades": -1}}}, "greater than or equal"),
        ({"stack": "Both"}, "Input should be 'DevicePlugin' or 'DRA'"),
    ],
)  # fmt: skip
def test_the_models_refuse(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        GpuSpec.model_validate(spec)


def test_the_empty_spec_keeps_everything_off_and_safe() -> None:
    spec = GpuSpec()
    policy = spec.driver.upgrade_policy
    assert (policy.auto_upgrade, policy.max_parallel_upgrades, policy.max_unavailable) == (
        True, 1, "25%")  # fmt: skip
    assert not policy.gpu_pod_deletion.force
    assert not policy.gpu_pod_deletion.delete_empty_dir
    assert not policy.drain.enable
    assert not spec.sharing.configured
    assert str(spec.stack) == "DevicePlugin"
    assert str(spec.components.mig_strategy) == "Single"


# -- the device plugin's configuration files ------------------------------------------------


def test_time_slicing_file() -> None:
    config = SharingSpec(mode=SharingMode.TIME_SLICING, replicas=4, rename_by_default=True,
                         fail_requests_greater_than_one=True)  # fmt: skip
    assert device_plugin_config(config, True, MigStrategy.MIXED) == {
        "version": "v1",
        "flags": {"migStrategy": "mixed", "failOnInitError": True},
        "sharing": {"timeSlicing": {"renameByDefault": True, "failRequestsGreaterThanOne": True,
                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
    }  # fmt: skip


def test_mps_file_and_a_profile_without_sharing() -> None:
    spec = SharingSpec.model_validate(
        {"mode": "MPS", "replicas": 3, "profiles": [{"name": "whole", "mode": "None"}]}
    )
    files = {k: yaml.safe_load(v) for k, v in device_plugin_configs(spec, MigStrategy.NONE).items()}
    assert list(files) == ["default", "whole"]
    assert files["default"]["sharing"] == {
        "mps": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}
    }
    assert "sharing" not in files["whole"]
    assert files["whole"]["flags"]["migStrategy"] == "none"


def test_the_config_map_name_follows_its_content() -> None:
    four = device_plugin_configs(SharingSpec(mode=SharingMode.MPS, replicas=4), MigStrategy.SINGLE)
    again = device_plugin_configs(SharingSpec(mode=SharingMode.MPS, replicas=4), MigStrategy.SINGLE)
    eight = device_plugin_configs(SharingSpec(mode=SharingMode.MPS, replicas=8), MigStrategy.SINGLE)
    assert config_map_name(four) == config_map_name(again)
    assert config_map_name(four) != config_map_name(eight)
    assert config_map_name(four).startswith("kyma-gpu-device-plugin-config-")


def test_sharing_reaches_the_chart_values(catalog: Catalog) -> None:
    sharing = {"mode": "TimeSlicing", "replicas": 2}
    plan = plan_for(catalog, ubuntu_node(), spec={"sharing": sharing})
    config = plan.values["devicePlugin"]["config"]
    assert config["create"] is True
    assert config["default"] == "default"
    assert plan.sharing is not None
    assert config["name"] == plan.sharing.config_map
    assert "replicas: 2" in config["data"]["default"]
    assert "devicePlugin" not in plan_for(catalog, ubuntu_node(), spec={}).values


# -- the rule context and the chart values ----------------------------------------------------


def test_upgrade_policy_values_in_both_shapes(catalog: Catalog) -> None:
    policy = {"maxUnavailable": "2", "gpuPodDeletion": {"force": True}, "drain": {"enable": True}}
    plan = plan_for(catalog, node("gl"), ubuntu_node("ub"),
                    spec={"driver": {"upgradePolicy": policy}})  # fmt: skip
    chart = plan.values["driver"]["upgradePolicy"]
    assert chart["maxUnavailable"] == 2  # an IntOrString: a number
    assert chart["gpuPodDeletion"]["force"] is True
    assert chart["drain"]["enable"] is True
    drivers = [o for o in plan.values["extraObjects"] if o["kind"] == "NVIDIADriver"]
    assert len(drivers) == 2
    for driver in drivers:
        cr = driver["spec"]["upgradePolicy"]
        assert cr["podDeletion"] == chart["gpuPodDeletion"]  # the CR's name for it
        assert cr["maxUnavailable"] == 2
        assert cr["drain"] == chart["drain"]


def test_the_extras_are_written_off_unless_switched_on(catalog: Catalog) -> None:
    values = plan_for(catalog, ubuntu_node(), spec={}).values
    for key in ("sandboxWorkloads", "vgpuManager", "vgpuDeviceManager", "ccManager", "gds",
                "gdrcopy", "vfioManager", "sandboxDevicePlugin"):  # fmt: skip
        assert values[key]["enabled"] is False, key
    on = plan_for(catalog, ubuntu_node(), spec={"components": {"gdrcopy": True}}).values
    assert on["gdrcopy"]["enabled"] is True


def test_the_vgpu_image_is_split_for_the_chart(catalog: Catalog) -> None:
    components = {"vgpuManager": True, "sandboxWorkloads": "KubeVirt",
                  "vgpuManagerImage": "registry.corp:5000/nv/vgpu-manager:580.95.02"}  # fmt: skip
    values = plan_for(catalog, ubuntu_node(), spec={"components": components}).values
    assert values["vgpuManager"] == {"enabled": True, "repository": "registry.corp:5000/nv",
                                     "image": "vgpu-manager", "version": "580.95.02"}  # fmt: skip
    assert values["sandboxWorkloads"] == {"enabled": True, "mode": "kubevirt"}


def test_the_dra_stack_swaps_the_custom_resource_and_drives_by_nvidiadriver(
    catalog: Catalog,
) -> None:
    plan = plan_for(catalog, node(), cpu_node(), spec={"stack": "DRA"})
    values = plan.values
    assert values["clusterPolicy"] == {"deployCR": False}
    assert values["gpuCluster"] == {"deployCR": True}
    assert values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": False}
    (driver,) = values["extraObjects"]
    assert driver["spec"]["imagePullPolicy"] == "Always"
    assert plan.objects, "an info finding does not block the plan"
    preinstalled = plan_for(catalog, node(labels={"gpu.kyma-project.io/driver-preinstalled":
                                                  "true"}), spec={"stack": "DRA"})  # fmt: skip
    assert "extraObjects" not in preinstalled.values
    assert preinstalled.values["driver"]["enabled"] is False


# -- the preflight --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bodies", "spec", "expected"),
    [
        ([node()], {"driver": {"upgradePolicy": {"autoUpgrade": False}}},
         [("info", "AutoUpgradeOff")]),
        ([node(os_image="Flatcar Container Linux by Kinvolk 4081.2.0 (Oklo)")],
         {"driver": {"upgradePolicy": {"maxParallelUpgrades": 3}}},
         [("info", "UpgradePolicyIgnored")]),
        ([ubuntu_node()], {"driver": {"upgradePolicy": {"maxParallelUpgrades": 3}},
                           "components": {"sandboxWorkloads": "KubeVirt"}},
         [("warning", "UpgradePolicyIgnored"), ("warning", "SandboxNeedsBareMetal")]),
        ([ubuntu_node(instance_type=A100)],
         {"sharing": {"mode": "MPS", "replicas": 2}, "components": {"migManager": True}},
         [("warning", "MpsWithMig")]),
        ([ubuntu_node()], {"components": {"migManager": True}},
         [("warning", "NoMigCapableGpus")]),
        ([ubuntu_node(instance_type=A100)], {"components": {"migManager": True}}, []),
        ([node()], {"components": {"gdrcopy": True}}, [("error", "NeedsDriverContainer")]),
        ([node(labels={"gpu.kyma-project.io/driver-preinstalled": "true"})],
         {"components": {"gpuDirectStorage": True}}, [("error", "NeedsDriverContainer")]),
        ([ubuntu_node()], {"components": {"gpuDirectStorage": True, "gdrcopy": True}}, []),
        ([ubuntu_node(instance_type="g4dn.metal")],
         {"components": {"vgpuManager": True, "vgpuManagerImage": "r.corp/nv/vgpu-manager:1"}},
         [("error", "VgpuNeedsSandbox")]),
        ([node(instance_type="g4dn.metal")],
         {"components": {"vgpuManager": True, "vgpuManagerImage": "r.corp/nv/vgpu-manager:1",
                         "sandboxWorkloads": "KubeVirt"}},
         [("warning", "NoVgpuImagesForGardenLinux")]),
        ([ubuntu_node(instance_type="g4dn.metal")],
         {"components": {"confidentialComputing": True, "sandboxWorkloads": "KubeVirt"}},
         [("error", "ConfidentialComputingNeedsKata"), ("warning", "NoConfidentialComputingGpus")]),
        ([ubuntu_node(instance_type="p5.48xlarge")],
         {"components": {"confidentialComputing": True, "sandboxWorkloads": "Kata"}},
         [("warning", "SandboxNeedsBareMetal")]),
        ([node()], {"stack": "DRA", "operatorVersion": "v26.3.3"},
         [("error", "StackNotInChart"), ("info", "DraExperimental")]),
        ([node()], {"stack": "DRA", "sharing": {"mode": "TimeSlicing", "replicas": 2},
                    "components": {"nodeStatusExporter": True, "dcgmExporter": False}},
         [("error", "SharingNeedsDevicePlugin"), ("error", "NotOnDraStack"),
          ("info", "DraExperimental")]),
    ],
)  # fmt: skip
def test_feature_preflight(
    catalog: Catalog,
    bodies: list[dict[str, Any]],
    spec: dict[str, Any],
    expected: list[tuple[str, str]],
) -> None:
    plan = plan_for(catalog, *bodies, spec=spec)
    assert findings(plan) == expected
    assert (plan.preflight.verdict == "error") == any(s == "error" for s, _ in expected)
    assert bool(plan.objects) == (plan.preflight.verdict != "error")


def test_not_on_dra_stack_names_every_switch(catalog: Catalog) -> None:
    spec = {"stack": "DRA", "components": {"migManager": True, "gdrcopy": True}}
    plan = plan_for(catalog, ubuntu_node(), spec=spec)
    message = next(f.message for f in plan.preflight.findings if f.reason == "NotOnDraStack")
    assert message.startswith("spec.components.migManager, spec.components.gdrcopy:")
    assert set(ComponentsSpec.model_fields) >= {"mig_manager", "gdrcopy"}


# -- status ---------------------------------------------------------------------------------


def _plugin(
    updated: int = 2,
    generation: int = 2,
    observed: int = 2,
    mounts: tuple[str, ...] = ("CONFIG",),
    name: str = "nvidia-device-plugin-daemonset",
) -> DaemonSetFacts:
    return DaemonSetFacts(name=name, generation=generation,
                          observed_generation=observed, desired=2, available=2, unavailable=0,
                          updated=updated, strategy="RollingUpdate", number_ready=2,
                          app=name, config_maps=mounts)  # fmt: skip


def _mounting(config_map: str, **kwargs: Any) -> DaemonSetFacts:
    return _plugin(mounts=(config_map,), **kwargs)


def test_sharing_is_active_once_the_cluster_policy_runs_it(catalog: Catalog) -> None:
    plan = plan_for(catalog, ubuntu_node(), spec={"sharing": {"mode": "TimeSlicing",
                                                              "replicas": 4}})  # fmt: skip
    assert plan.sharing is not None
    config_map = plan.sharing.config_map
    named = OperatorStateFacts("ready", device_plugin_config=config_map)
    other = OperatorStateFacts("ready", device_plugin_config="kyma-gpu-device-plugin-config-0")
    mps = "nvidia-device-plugin-mps-control-daemon"
    both = (_mounting(config_map), _mounting(config_map, name=mps))
    active = sharing_status(plan, Evidence(cluster_policy=named, daemonsets=both))
    assert active is not None
    assert active.active
    assert active.replicas == 4
    for observed in (
        Evidence(cluster_policy=other, daemonsets=(_mounting(config_map),)),
        Evidence(cluster_policy=named, daemonsets=(_mounting(config_map, updated=1),)),
        Evidence(cluster_policy=named, daemonsets=(_mounting(config_map, observed=1),)),
        # The NVIDIA operator updates the device plugin, then the MPS control daemon: until
        # both templates mount the new ConfigMap, the configuration is not what runs.
        Evidence(cluster_policy=named, daemonsets=(_plugin(mounts=("old",)),)),
        Evidence(cluster_policy=named, daemonsets=(both[0], _plugin(name=mps, mounts=()))),
        Evidence(cluster_policy=named),
    ):
        shown = sharing_status(plan, observed)
        assert shown is not None
        assert not shown.active
    assert sharing_status(plan_for(catalog, ubuntu_node(), spec={}), Evidence()) is None


def test_the_cluster_policy_names_its_device_plugin_config() -> None:
    body = {"spec": {"devicePlugin": {"config": {"name": "cm", "default": "default"}}},
            "status": {"state": "ready"}}  # fmt: skip
    assert cluster_policy_facts(body).device_plugin_config == "cm"
    assert cluster_policy_facts({"status": {}}).device_plugin_config is None


def test_on_the_dra_stack_components_follow_the_gpu_cluster(catalog: Catalog) -> None:
    plan = plan_for(catalog, node(), spec={"stack": "DRA"})
    gpu_cluster = OperatorStateFacts("notReady", "Waiting for operand pods")
    waiting = Evidence(cluster_policy=OperatorStateFacts("ready"), gpu_cluster=gpu_cluster)
    status = aggregate(plan, waiting, 1)
    components = next(c for c in status.conditions if c.type == "ComponentsReady")
    assert components.status == "False"
    assert components.message == "GPUCluster gpu-cluster is notReady (Waiting for operand pods)"
    assert str(status.stack) == "DRA"
    ready = aggregate(plan, Evidence(gpu_cluster=OperatorStateFacts("ready")), 1)
    components = next(c for c in ready.conditions if c.type == "ComponentsReady")
    assert components.status == "True"
    assert components.message == "GPUCluster ready; 0 DaemonSets ready"


def test_the_dra_kubelet_plugin_counts_the_ready_nodes() -> None:
    kubelet_plugin = DaemonSetFacts(name="nvidia-dra-driver-kubelet-plugin", generation=1,
                                    observed_generation=1, desired=3, available=2, unavailable=1,
                                    updated=3, strategy="RollingUpdate", number_ready=2,
                                    app="nvidia-dra-driver-kubelet-plugin")  # fmt: skip
    assert nodes_ready((kubelet_plugin,), 3) == 2


def test_a_gpu_cluster_left_behind_is_a_stack_conflict(catalog: Catalog) -> None:
    """Back on the device plugin, the chart keeps the GPUCluster (resource policy keep): the
    Gpu says so, and how to end it, instead of mirroring a ClusterPolicy that never gets ready."""
    plan = plan_for(catalog, node(), spec={})
    left = Evidence(cluster_policy=OperatorStateFacts("notReady"),
                    gpu_cluster=OperatorStateFacts("ready"))  # fmt: skip
    status = aggregate(plan, left, 3)
    components = next(c for c in status.conditions if c.type == "ComponentsReady")
    assert (components.status, components.reason) == ("False", "StackConflict")
    assert str(status.state) == "Error"
    assert "kubectl delete gpuclusters.nvidia.com gpu-cluster" in status.message
