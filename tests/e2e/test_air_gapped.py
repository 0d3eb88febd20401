"""An air-gapped install, end to end (issue 31): nothing runs from outside the sovereign
registry.

The module is released into registry A (the public registries' stand-in) and moved whole into
registry B with `ocm transfer --copy-resources`; A is stopped (tests/harness/air_gapped.py). An
administrator writes the one ConfigMap a sovereign cluster needs: B's chart pinned by digest,
B as the only image registry. Then the real KLM installs the module from B (its image
localisation names B for the manager and the module's Flux), the manager runs on the real node
from B's copy of its image, the default Gpu (the empty spec KLM creates) gets B's chart through
an OCIRepository pinned by digest and B's images, Flux installs the chart, and the real NVIDIA
controller reconciles. Every container and init container of every pod template that the
module, the chart and the NVIDIA controller created must name B; one that does not fails the
test by name. Every operand container of the chart and the controller but the driver names
its image by the digest the release recorded (and B serves that digest). Then an image B
lacks: the real kubelet fails to pull it, and the Gpu's status names it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kyma_gpu.rules.catalog import IMAGE_DIGESTS
from kyma_gpu_tools.registry import Presence, presence
from tests.harness.air_gapped import AirGapped, administrator_config_map
from tests.harness.klm import SKR_KYMA, SKR_NAMESPACE, manager_pods
from tests.harness.module import condition, gpu, gpu_ready, wait_until
from tests.harness.realnode import TAINT

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
log = logging.getLogger(__name__)

NAMESPACES = ("kyma-system", "gpu-operator")
WORKLOADS = ("deployments", "daemonsets", "statefulsets", "jobs", "cronjobs")
KLM_OWN = "Deployment/kyma-system/skr-webhook"
"""KLM's runtime watcher, which KLM puts into every Kyma cluster from its own settings: not
the module's, the chart's or the NVIDIA operator's."""


@pytest.fixture(scope="module")
def landscape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirGapped]:
    gapped = AirGapped(tmp_path_factory.mktemp("air-gapped"), progress=log.info).start()
    try:
        yield gapped
    finally:
        gapped.stop()


def _template(workload: dict[str, Any]) -> dict[str, Any]:
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return dict(spec["template"]["spec"])


def _images(cluster: Any) -> dict[str, str]:
    """kind/namespace/name[container] -> image, for every pod template in the namespaces."""
    found = {}
    for namespace in NAMESPACES:
        for resource in WORKLOADS:
            for workload in cluster.list_objects(resource, namespace):
                where = f"{workload['kind']}/{namespace}/{workload['metadata']['name']}"
                if where == KLM_OWN:
                    continue
                pod = _template(workload)
                for container in [*pod.get("initContainers", []), *pod["containers"]]:
                    found[f"{where}[{container['name']}]"] = container["image"]
    return found


def _manager_env(cluster: Any) -> dict[str, str]:
    dep = cluster.get_object("deployment", "gpu-manager", SKR_NAMESPACE) or {}
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


@pytest.mark.timeout(1500)
def test_nothing_runs_from_outside_the_sovereign_registry(landscape: AirGapped) -> None:
    cluster, sovereign = landscape.cluster, landscape.sovereign
    assert presence(f"{landscape.public.host}/kyma-project/gpu-manager:{landscape.version}")[0] is (
        Presence.UNREACHABLE
    ), "registry A is gone"
    cluster.apply(administrator_config_map(sovereign, landscape.version))
    wait_until(lambda: landscape.klm.kyma(SKR_NAMESPACE, SKR_KYMA), 120, "KLM's SKR Kyma")
    landscape.klm.enable("gpu")

    ready = wait_until(lambda: gpu_ready(cluster), 900, "the default Gpu Ready, all from B")
    assert (gpu(cluster) or {})["spec"].get("source") is None, "the Gpu names no source"
    pods = manager_pods(cluster)
    assert pods, "the manager's pods"
    assert {p["spec"].get("nodeName") for p in pods} == {landscape.node.name}
    names = {f"{SKR_NAMESPACE}/{p['metadata']['name']}" for p in pods}
    assert landscape.node.running_pods() >= names, "pulled from B and running"

    source = cluster.get_object("ocirepositories.source.toolkit.fluxcd.io", "gpu-operator",
                                SKR_NAMESPACE) or {}  # fmt: skip
    assert source["spec"]["url"].startswith(f"oci://{sovereign.host}/"), source["spec"]
    assert source["spec"]["ref"].get("digest", "").startswith("sha256:"), source["spec"]

    images = _images(cluster)
    assert any(k.startswith("DaemonSet/gpu-operator/") for k in images), images  # the operands
    assert any(k.startswith("Deployment/kyma-system/gpu-manager") for k in images), images
    outside = {k: v for k, v in images.items() if not v.startswith(f"{sovereign.host}/")}
    assert outside == {}, f"images from outside {sovereign.host}: {outside}"
    flux = {k: v for k, v in _manager_env(cluster).items() if k.endswith("_IMAGE")}
    assert flux, "the manager names its Flux's images"
    assert all(v.startswith(f"{sovereign.host}/") for v in flux.values()), flux
    log.info("air-gapped: %d pod templates, all from %s; Gpu %s", len(images), sovereign.host,
             ready["status"].get("state"))  # fmt: skip


def _path(reference: str) -> str:
    """host/path:tag[@digest] -> path:tag (the part a mirror keeps)."""
    return reference.split("@", 1)[0].split("/", 1)[1]


@pytest.mark.timeout(600)
def test_the_operands_run_by_the_digests_the_release_copied(landscape: AirGapped) -> None:
    cluster, sovereign = landscape.cluster, landscape.sovereign
    wait_until(lambda: gpu_ready(cluster), 300, "the Gpu Ready (the test before)")
    released = landscape.workdir / landscape.version / IMAGE_DIGESTS
    recorded = {_path(k): v for k, v in yaml.safe_load(released.read_text())["images"].items()}
    operands = {k: v for k, v in _images(cluster).items() if k.startswith(
        ("DaemonSet/gpu-operator/", "Deployment/gpu-operator/"))}  # fmt: skip
    drivers = {k for k, v in operands.items() if _path(v).split(":")[0].endswith("/driver")}
    assert len(operands) - len(drivers) >= 5, operands  # operator, NFD, toolkit, plugin, ...
    by_tag = {k: v for k, v in operands.items() if "@" not in v and k not in drivers}
    assert by_tag == {}, f"operands by tag only: {by_tag}"
    pinned = {k: v for k, v in operands.items() if k not in drivers}
    wrong = {k: v for k, v in pinned.items() if recorded.get(_path(v)) != v.rsplit("@", 1)[1]}
    assert wrong == {}, f"digests the release did not record for that image: {wrong}"
    os.environ["SSL_CERT_FILE"] = str(sovereign.ca)
    try:
        absent = {v: presence(v)[1] for v in set(pinned.values())
                  if presence(v)[0] is not Presence.PRESENT}  # fmt: skip
    finally:
        del os.environ["SSL_CERT_FILE"]
    assert absent == {}, f"B does not serve these digests: {absent}"
    log.info("by digest: %d operand containers, %d driver containers by tag", len(pinned),
             len(drivers))  # fmt: skip


def _components(cluster: Any) -> dict[str, Any]:
    return condition(gpu(cluster), "ComponentsReady") or {}


@pytest.mark.timeout(600)
def test_an_image_the_mirror_lacks_is_named_in_the_status(landscape: AirGapped) -> None:
    """A pod of the GPU operator's namespace on the real node whose image B does not hold: the
    kubelet really fails to pull it, and the Gpu names the image; the pod gone, it clears."""
    cluster, sovereign = landscape.cluster, landscape.sovereign
    wait_until(lambda: gpu_ready(cluster), 300, "the Gpu Ready (the test before)")
    image = f"{sovereign.host}/nvidia/cloud-native/k8s-not-mirrored:v1.0.0"
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "not-mirrored", "namespace": "gpu-operator"},
        "spec": {"nodeName": landscape.node.name, "containers": [{"name": "c", "image": image}],
                 "tolerations": [{**TAINT, "operator": "Equal"}]},
    }  # fmt: skip
    cluster.apply(pod)
    try:
        named = wait_until(
            lambda: (c := _components(cluster)).get("reason") == "ImagePullFailed" and c, 180,
            "ComponentsReady naming the image the kubelet cannot pull",
        )  # fmt: skip
        assert image in named["message"], named
        assert f"pod not-mirrored on node {landscape.node.name}" in named["message"], named
    finally:
        cluster.kubectl("delete", "pod", "not-mirrored", "-n", "gpu-operator", "--wait=false")
    wait_until(lambda: _components(cluster).get("status") == "True", 180,
               "ComponentsReady again once the pod is gone")  # fmt: skip
