"""The Gpu alone steers the release (issue 49, findings 1 and 2), end to end with real Flux and
the real NVIDIA GPU Operator controller on the demo fleet (Garden Linux, precompiled driver).

- A merge patch of the Gpu with keys outside the allowlist is pruned by the API server, which
  stores the empty maps it leaves (`driver: {}`, `toolkit: {}`): the manager writes nothing,
  the HelmRelease keeps the planned driver and toolkit values, the driver is not replaced.
- A writer in kyma-system (here a field manager `intruder`; the admission policy that refuses
  a namespace editor is tests/integration/test_flux_admission.py) adds a validator image,
  `valuesFrom` and a post-renderer to the HelmRelease: the manager removes what it does not set
  (a Warning Event names each and its manager), takes its own post-renderers back, and the
  operands end as the Gpu wants them.
- `flux suspend` and `flux resume` (the real CLI) stay the user's: a spec change of the Gpu
  while the release is suspended keeps it suspended.

Tests run in file order on the one Gpu the fixture installs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyma_gpu.status.events import FOREIGN_REMOVED
from tests.harness.binaries import FLUX_CLI, binary
from tests.harness.cluster import LocalCluster
from tests.harness.demo import flux_cli
from tests.harness.flux import FluxStack
from tests.harness.module import (
    MODULE_NAMESPACE,
    TARGET_NAMESPACE,
    OperatorProcess,
    gpu,
    helm_release,
    module_on,
    operator_writes,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

GPUS = "gpus.gpu.kyma-project.io"
HELM_RELEASES = "helmreleases.helm.toolkit.fluxcd.io"
EVIL = "evil.example/validator"


@pytest.fixture(scope="module")
def flux() -> Path:
    return binary(FLUX_CLI)


@pytest.fixture(scope="module")
def ready(
    local_cluster: LocalCluster, flux_stack: FluxStack, flux: Path
) -> Iterator[OperatorProcess]:
    """The sample Gpu (chart from the local repository), Ready."""
    with module_on(local_cluster, name="operator-one-source") as process:
        source = {"chartRepository": flux_stack.helm_repo_url, "insecure": True}
        local_cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                             "metadata": {"name": "gpu"}, "spec": {"source": source}})  # fmt: skip
        wait_until(lambda: _ready(local_cluster, flux_stack, process), 300, "Gpu Ready")
        yield process


def _ready(cluster: LocalCluster, flux: FluxStack, process: OperatorProcess) -> bool:
    flux.check_alive()
    assert process.alive(), f"the operator exited:\n{process.log()}"
    obj = gpu(cluster) or {}
    status = obj.get("status") or {}
    current = status.get("observedGeneration") == obj.get("metadata", {}).get("generation")
    return current and status.get("state") == "Ready"


def _observed(cluster: LocalCluster, generation: int) -> dict[str, Any] | None:
    """The Gpu once the manager has decided on `generation` (its status says so)."""
    obj = gpu(cluster) or {}
    seen = (obj.get("status") or {}).get("observedGeneration")
    return obj if isinstance(seen, int) and seen >= generation else None


def _release_values(cluster: LocalCluster) -> dict[str, Any]:
    return dict(((helm_release(cluster) or {}).get("spec") or {}).get("values") or {})


def _driver_daemonsets(cluster: LocalCluster) -> dict[str, int]:
    return {d["metadata"]["name"]: d["metadata"]["generation"]
            for d in cluster.list_objects("daemonsets", TARGET_NAMESPACE)
            if d["metadata"]["name"].startswith("nvidia-driver")}  # fmt: skip


def test_a_pruned_key_loses_no_planned_value(
    local_cluster: LocalCluster, flux_stack: FluxStack, ready: OperatorProcess
) -> None:
    values_before = _release_values(local_cluster)
    release_before = (helm_release(local_cluster) or {})["metadata"]["generation"]
    drivers_before = _driver_daemonsets(local_cluster)
    assert values_before["driver"]["usePrecompiled"] is True, values_before
    assert drivers_before, "the NVIDIA controller runs a driver DaemonSet"
    writes_before = len(operator_writes(local_cluster))
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    patch = {"spec": {"values": {"driver": {"env": env}, "toolkit": {"env": env}}}}
    said = local_cluster.kubectl("patch", GPUS, "gpu", "--type=merge", "-p", json.dumps(patch))
    assert "unknown field" in said.stderr, said.stderr  # the API server's warning: pruned
    stored = gpu(local_cluster) or {}
    assert stored["spec"]["values"] == {"driver": {}, "toolkit": {}}, stored["spec"]
    wait_until(lambda: _observed(local_cluster, stored["metadata"]["generation"]), 60,
               "the manager's decision on the patched Gpu")  # fmt: skip
    release = helm_release(local_cluster) or {}
    assert release["metadata"]["generation"] == release_before, "the release was written"
    assert _release_values(local_cluster) == values_before
    assert _driver_daemonsets(local_cluster) == drivers_before
    writes = operator_writes(local_cluster)[writes_before:]
    assert not [w for w in writes if w["resource"] == "helmreleases"], writes
    assert (gpu(local_cluster) or {})["status"]["state"] == "Ready"


def _events(cluster: LocalCluster, reason: str) -> list[dict[str, Any]]:
    uid = ((gpu(cluster) or {}).get("metadata") or {}).get("uid")
    out = cluster.kubectl("events", "-n", MODULE_NAMESPACE, "--for", "gpu/gpu", "-o", "json")
    items = json.loads(out.stdout).get("items") or []
    return [e for e in items if (e.get("involvedObject") or {}).get("uid") == uid
            and e.get("reason") == reason]  # fmt: skip


FOREIGN = {
    "spec": {
        "values": {"validator": {"repository": "evil.example", "image": "validator",
                                 "version": "v1"}},
        "valuesFrom": [{"kind": "ConfigMap", "name": "intruder-values"}],
        "postRenderers": [{"kustomize": {"images": [{"name": "nvcr.io/nvidia/k8s-device-plugin",
                                                     "newName": EVIL}]}}],
    }
}  # fmt: skip
"""What a writer in kyma-system added to the release: the validator's image, values from a
ConfigMap of theirs, and a post-renderer that swaps an operand's image."""


def _reclaimed(cluster: LocalCluster, renderers: Any) -> dict[str, Any] | None:
    """The release's spec once the writer's fields are gone and its post-renderers are the
    module's again (the plan sets some: the writer's list replaced them, the manager's forced
    apply takes them back)."""
    spec = (helm_release(cluster) or {}).get("spec") or {}
    gone = "validator" not in (spec.get("values") or {}) and "valuesFrom" not in spec
    return spec if gone and spec.get("postRenderers") == renderers else None


def _images(cluster: LocalCluster) -> set[str]:
    return {c["image"] for d in cluster.list_objects("daemonsets", TARGET_NAMESPACE)
            for c in d["spec"]["template"]["spec"]["containers"]}  # fmt: skip


def test_what_another_writer_adds_to_the_release_goes(
    local_cluster: LocalCluster, flux_stack: FluxStack, ready: OperatorProcess
) -> None:
    local_cluster.apply({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "intruder-values", "namespace": MODULE_NAMESPACE},
                         "data": {"values.yaml": "dcgmExporter:\n  enabled: false\n"}})  # fmt: skip
    seen = {e["metadata"]["name"] for e in _events(local_cluster, FOREIGN_REMOVED)}
    renderers = (helm_release(local_cluster) or {})["spec"].get("postRenderers")
    intruder = ("--type=merge", "--field-manager=intruder", "-p", json.dumps(FOREIGN))
    local_cluster.kubectl("patch", HELM_RELEASES, "gpu-operator", "-n", MODULE_NAMESPACE,
                          *intruder)  # fmt: skip
    spec = wait_until(lambda: _reclaimed(local_cluster, renderers), 60,
                      "the foreign fields removed")  # fmt: skip
    assert spec["values"]["driver"]["usePrecompiled"] is True  # the module's stay
    (event,) = wait_until(
        lambda: [e for e in _events(local_cluster, FOREIGN_REMOVED)
                 if e["metadata"]["name"] not in seen] or None,
        30, "the Warning Event",
    )  # fmt: skip
    assert event["type"] == "Warning"
    for field in ("spec.values.validator.image", "spec.valuesFrom"):
        assert f"{field} (by intruder)" in event["message"], event["message"]
    release = helm_release(local_cluster) or {}
    managers = {e["manager"] for e in release["metadata"]["managedFields"]
                if not e.get("subresource")}  # fmt: skip
    assert "intruder" not in managers, managers  # nothing of theirs left
    # helm-controller settles on the module's values: Ready for the last generation, and no
    # operand runs an image of the writer's
    wait_until(lambda: _ready(local_cluster, flux_stack, ready), 300, "Gpu Ready again")
    wait_until(lambda: not any(EVIL in i or "evil.example" in i for i in _images(local_cluster))
               or None, 120, "no operand with the writer's image")  # fmt: skip
    wait_until(lambda: _ready(local_cluster, flux_stack, ready), 300, "Gpu Ready, settled")


def test_suspend_and_resume_stay_the_users(
    local_cluster: LocalCluster, flux_stack: FluxStack, ready: OperatorProcess, flux: Path
) -> None:
    flux_cli(local_cluster, "suspend", "helmrelease", "gpu-operator", "-n", MODULE_NAMESPACE)
    assert (helm_release(local_cluster) or {})["spec"]["suspend"] is True
    patch = {"spec": {"values": {"operator": {"logging": {"level": "debug"}}}}}
    local_cluster.kubectl("patch", GPUS, "gpu", "--type=merge", "-p", json.dumps(patch))
    wait_until(lambda: _release_values(local_cluster).get("operator", {}).get("logging"), 60,
               "the manager's apply of the new value")  # fmt: skip
    assert (helm_release(local_cluster) or {})["spec"]["suspend"] is True
    flux_cli(local_cluster, "resume", "helmrelease", "gpu-operator", "-n", MODULE_NAMESPACE)
    assert (helm_release(local_cluster) or {})["spec"].get("suspend") in (None, False)
    wait_until(lambda: _ready(local_cluster, flux_stack, ready), 300, "Gpu Ready after resume")
