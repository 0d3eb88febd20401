"""Who picks the images, on the real API server: a cluster administrator lists the registry
mirrors in the ConfigMap kyma-system/kyma-gpu-chart-sources (key registries), and the admission
policy kyma-gpu-images refuses a Gpu that names another one, in the words `kyma-gpu plan` uses.

Writes as a Gpu author are `--dry-run=server` (admission runs, nothing is stored), but one: a
Gpu stored with an allowed mirror stays writable after the administrator drops that mirror, as
long as the write leaves the registry as it is (the manager's finalizer patch, a label).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.api.chart_sources import (
    CONFIG_MAP_NAME,
    REGISTRIES_KEY,
    REGISTRY_NOT_ALLOWED,
    VGPU_IMAGE_NOT_ALLOWED,
)
from kyma_gpu_tools.cli import main
from tests.harness.chart_sources import MODULE_NAMESPACE, NVIDIA, chart_sources_config_map
from tests.harness.cluster import LocalCluster
from tests.harness.module import install_crds, wait_until

pytestmark = pytest.mark.integration

MIRROR = "mirror.sovereign.example/nvidia"
REGISTRIES = f"# the sovereign mirror and its pull Secret\n{MIRROR}   mirror-pull\npublic\n"
VGPU = "components"


def _gpu(spec: dict[str, Any], name: str = "gpu") -> dict[str, Any]:
    return {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def _config_map(registries: str | None) -> dict[str, Any]:
    body = chart_sources_config_map(NVIDIA)
    if registries is not None:
        body["data"][REGISTRIES_KEY] = registries
    return body


def _admission(cluster: LocalCluster, spec: dict[str, Any]) -> tuple[int, str]:
    result = cluster.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-",
                             input=json.dumps(_gpu(spec)), check=False)  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def _plan(tmp_path: Path, spec: dict[str, Any], registries: str | None) -> tuple[int, Any]:
    gpu, sources = tmp_path / "gpu.json", tmp_path / "sources.json"
    gpu.write_text(json.dumps(_gpu(spec)), encoding="utf-8")
    sources.write_text(json.dumps(_config_map(registries)), encoding="utf-8")
    out = io.StringIO()
    code = main(["plan", "-f", str(gpu), "--sources", str(sources), "-o", "yaml"],
                stdin=io.StringIO(), stdout=out, stderr=io.StringIO())  # fmt: skip
    return code, yaml.safe_load(out.getvalue())


def _messages(plan: dict[str, Any], reason: str) -> list[str]:
    return [f["message"] for f in plan["preflight"]["findings"] if f["reason"] == reason]


def _set_registries(cluster: LocalCluster, registries: str | None) -> None:
    cluster.kubectl("replace", "-f", "-", input=json.dumps(_config_map(registries)))


@pytest.fixture(scope="module")
def cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The CRD and the policies in force, the administrator's ConfigMap listing the mirror;
    the ConfigMap as it was before is put back afterwards (other tests share the cluster)."""
    install_crds(local_cluster)
    before = local_cluster.get_object("configmap", CONFIG_MAP_NAME, MODULE_NAMESPACE)
    local_cluster.apply(_config_map(None))
    _set_registries(local_cluster, REGISTRIES)
    wait_until(lambda: _admission(local_cluster, {"source": {"imageRegistry": MIRROR}})[0] == 0,
               30, "the images policy reading the administrator's list")  # fmt: skip
    yield local_cluster
    if before is None:
        local_cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE)
    else:
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            before["metadata"].pop(key, None)
        local_cluster.kubectl("replace", "-f", "-", input=json.dumps(before))


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("another-registry", {"source": {"imageRegistry": "evil.example"}},
     REGISTRY_NOT_ALLOWED.format(registry="evil.example")),
    ("a-path-below-the-mirror", {"source": {"imageRegistry": f"{MIRROR}/more"}},
     REGISTRY_NOT_ALLOWED.format(registry=f"{MIRROR}/more")),
    ("the-word-public", {"source": {"imageRegistry": "public"}},
     REGISTRY_NOT_ALLOWED.format(registry="public")),
    ("a-vgpu-image-from-elsewhere", {VGPU: {"vgpuManagerImage": "evil.example/nv/vgpu:1"}},
     VGPU_IMAGE_NOT_ALLOWED.format(image="evil.example/nv/vgpu:1")),
    ("a-vgpu-image-from-a-prefix-of-the-mirror",
     {VGPU: {"vgpuManagerImage": "mirror.sovereign.example/nvidiax/vgpu:1"}},
     VGPU_IMAGE_NOT_ALLOWED.format(image="mirror.sovereign.example/nvidiax/vgpu:1")),
]  # fmt: skip


@pytest.mark.parametrize(("case", "spec", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_at_admission_and_by_the_plan_in_the_same_words(
    cluster: LocalCluster, tmp_path: Path, case: str, spec: dict[str, Any], words: str
) -> None:
    code, out = _admission(cluster, spec)
    assert code != 0, (case, out)
    assert words in out, (case, out)
    code, plan = _plan(tmp_path, spec, REGISTRIES)
    assert code == 1, (case, plan["preflight"])
    assert _messages(plan, "ImageRegistryNotAllowed") == [words], (case, plan["preflight"])


def test_a_listed_mirror_passes_both(cluster: LocalCluster, tmp_path: Path) -> None:
    """The control: the same path accepts the listed mirror, so the refusals mean something;
    the plan adds the administrator's pull Secret to the chart's values."""
    spec = {"source": {"imageRegistry": MIRROR},
            VGPU: {"vgpuManagerImage": f"{MIRROR}/vgpu-manager:580.95.02"}}  # fmt: skip
    code, out = _admission(cluster, spec)
    assert code == 0, out
    code, plan = _plan(tmp_path, spec, REGISTRIES)
    assert code == 0, plan["preflight"]
    values = plan["values"]
    assert values["operator"]["repository"] == f"{MIRROR}/nvidia", values["operator"]
    assert values["operator"]["imagePullSecrets"] == ["mirror-pull"], values["operator"]


def test_a_stored_gpu_stays_writable_when_the_list_changes(cluster: LocalCluster) -> None:
    """Only a new or changed registry is checked: the administrator drops the mirror, and the
    Gpu that names it still takes a label (and the manager's finalizer patch, and deletion);
    the manager's plan refuses it (ImageRegistryNotAllowed) until it names a listed one."""
    assert cluster.get_object("gpu", "gpu") is None, "a Gpu of another test is still there"
    body = _gpu({"source": {"imageRegistry": MIRROR}})
    cluster.apply(body)
    try:
        _set_registries(cluster, "public\n")
        wait_until(lambda: _admission(cluster, {"source": {"imageRegistry": MIRROR}})[0] != 0,
                   30, "the images policy reading the shorter list")  # fmt: skip
        labelled = cluster.kubectl("label", "gpu", "gpu", "test=stored", check=False)
        assert labelled.returncode == 0, labelled.stderr
        other = {"spec": {"source": {"imageRegistry": "other.example"}}}
        changed = cluster.kubectl("patch", "gpu", "gpu", "--type=merge", "-p",
                                  json.dumps(other), check=False)  # fmt: skip
        assert changed.returncode != 0
        assert REGISTRY_NOT_ALLOWED.format(registry="other.example") in changed.stderr
    finally:
        _set_registries(cluster, REGISTRIES)
        cluster.kubectl("delete", "gpu", "gpu", "--wait=false", "--ignore-not-found")


def test_without_the_config_map_the_plan_is_the_refusal(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """A cluster without the ConfigMap (the default): the API server looks the policy's
    parameter up before its matchConditions, so the binding lets every Gpu through rather than
    refuse them all; the plan allows no mirror and applies nothing."""
    spec = {"source": {"imageRegistry": "evil.example"}}
    before = cluster.get_object("configmap", CONFIG_MAP_NAME, MODULE_NAMESPACE)
    cluster.kubectl("delete", "configmap", CONFIG_MAP_NAME, "-n", MODULE_NAMESPACE)
    try:
        wait_until(lambda: _admission(cluster, spec)[0] == 0, 30, "the binding without params")
        gpu, out = tmp_path / "gpu.json", io.StringIO()
        gpu.write_text(json.dumps(_gpu(spec)), encoding="utf-8")
        code = main(["plan", "-f", str(gpu), "-o", "yaml"], stdin=io.StringIO(), stdout=out,
                    stderr=io.StringIO())  # fmt: skip
        plan = yaml.safe_load(out.getvalue())
        assert code == 1, plan["preflight"]
        words = REGISTRY_NOT_ALLOWED.format(registry="evil.example")
        assert _messages(plan, "ImageRegistryNotAllowed") == [words], plan["preflight"]
        assert plan["objects"] == []
    finally:
        assert before is not None
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            before["metadata"].pop(key, None)
        cluster.kubectl("create", "-f", "-", input=json.dumps(before))
