"""Bad Gpu specs: the real API server refuses each one at admission (OpenAPI and CEL rules of
the generated CRD), and `kyma-gpu plan` refuses the same spec with the same message.

One row per spec: the spec and the message a user sees. The API server's side is a server-side
dry run (`kubectl create --dry-run=server`), so admission runs in full and nothing is stored.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyma_gpu.api.base import DNS_NAME_PATTERN
from kyma_gpu.api.models import (
    CHART_REPOSITORY_PATTERN,
    CHART_VERSION_PATTERN,
    IMAGE_REGISTRY_PATTERN,
    INSTALLER_RELEASE_PATTERN,
    MAX_MARKED_PERCENT,
    VGPU_NEEDS_IMAGE,
)
from kyma_gpu.api.models import DRIVER_VERSION_PATTERN as DRIVER
from kyma_gpu.api.operations import (
    IMAGE_PATTERN,
    MAX_UNAVAILABLE_PATTERN,
    PROFILE_NAME_RESERVED,
    REPLICAS_NEEDED,
    TIME_SLICING_ONLY,
)
from kyma_gpu.api.selectors import LABEL_SELECTOR_MESSAGE
from kyma_gpu.api.values import LABELS_RULE, MAX_LIST, MAX_TEXT, QUANTITY_PATTERN
from kyma_gpu_tools.cli import main
from tests.harness.chart_sources import NVIDIA, chart_sources_config_map, local_source
from tests.harness.cluster import LocalCluster
from tests.harness.module import CRD

pytestmark = pytest.mark.integration
# The harness applies the CRD and the policy on the shared per-worker cluster as this field
# manager (tests/harness/module.py); applying them as kubectl's default manager conflicts.
FIELD_MANAGER = ("--field-manager=kyma-gpu-tests", "--force-conflicts")

MODES = 'supported values: "Auto", "Precompiled", "Preinstalled", "Upstream"'
VALIDATOR_IMAGE = {"cuda": {"env": [{"name": "VALIDATOR_IMAGE", "value": "evil.example/v:1"}]}}
"""Issue 43: NVIDIA's controller ran this image, privileged, as the CUDA validator."""
HOSTILE_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "me-cluster-admin"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "cluster-admin"},
    "subjects": [{"kind": "User", "name": "mallory"}],
}  # fmt: skip


INJECTED = "IfNotPresent\n---\n" + json.dumps(HOSTILE_BINDING)
"""A document separator and a second object, as the chart would print them unquoted."""


def _deep(levels: int) -> Any:
    node: Any = "x"
    for _ in range(levels):
        node = {"a": node}
    return node


def _pattern(path: str, value: str, pattern: str) -> str:
    return f"{path}: Invalid value: {json.dumps(value)}: {path} in body should match '{pattern}'"


def _type(path: str, got: str, want: str) -> str:
    return f'{path}: Invalid value: "{got}": {path} in body must be of type {want}: "{got}"'


# (id, spec, the message a user sees)
ROWS: list[tuple[str, dict[str, Any], str]] = [
    ("mode-unknown", {"driver": {"mode": "Foo"}},
     f'spec.driver.mode: Unsupported value: "Foo": {MODES}'),
    ("mode-lowercase", {"driver": {"mode": "auto"}},
     f'spec.driver.mode: Unsupported value: "auto": {MODES}'),
    ("mode-empty", {"driver": {"mode": ""}},
     f'spec.driver.mode: Unsupported value: "": {MODES}'),
    ("mode-number", {"driver": {"mode": 1}},
     _type("spec.driver.mode", "integer", "string")),
    ("version-number", {"driver": {"version": 590}},
     _type("spec.driver.version", "integer", "string")),
    ("version-short", {"driver": {"version": "5"}},
     _pattern("spec.driver.version", "5", DRIVER)),
    ("version-four-parts", {"driver": {"version": "590.48.01.1"}},
     _pattern("spec.driver.version", "590.48.01.1", DRIVER)),
    ("version-letters", {"driver": {"version": "latest"}},
     _pattern("spec.driver.version", "latest", DRIVER)),
    ("installer-two-parts", {"driver": {"installerRelease": "1.17"}},
     _pattern("spec.driver.installerRelease", "1.17", INSTALLER_RELEASE_PATTERN)),
    ("driver-not-object", {"driver": "590"},
     _type("spec.driver", "string", "object")),
    ("driver-unknown-field", {"driver": {"branch": "590"}},
     'unknown field "spec.driver.branch"'),
    ("chart-version-words", {"operatorVersion": "latest"},
     _pattern("spec.operatorVersion", "latest", CHART_VERSION_PATTERN)),
    ("chart-version-empty", {"operatorVersion": ""},
     _pattern("spec.operatorVersion", "", CHART_VERSION_PATTERN)),
    ("chart-version-too-long", {"operatorVersion": "v1.2.3-" + "a" * 64},
     "spec.operatorVersion: Too long: may not be more than 64 bytes"),
    ("repository-ftp", {"source": {"chartRepository": "ftp://charts.example"}},
     _pattern("spec.source.chartRepository", "ftp://charts.example", CHART_REPOSITORY_PATTERN)),
    ("repository-http", {"source": {"chartRepository": "http://charts.example"}},
     'spec.source: Invalid value: spec.source.chartRepository is plain http://; '
     "use https:// or oci://, or set spec.source.insecure: true"),
    ("repository-http-insecure-false",
     {"source": {"chartRepository": "http://charts.example", "insecure": False}},
     'spec.source: Invalid value: spec.source.chartRepository is plain http://'),
    ("insecure-string", {"source": {"insecure": "yes"}},
     _type("spec.source.insecure", "string", "boolean")),
    ("secret-ref-uppercase", {"source": {"secretRef": "Chart_Auth"}},
     _pattern("spec.source.secretRef", "Chart_Auth", DNS_NAME_PATTERN)),
    ("registry-with-scheme", {"source": {"imageRegistry": "https://mirror.example"}},
     _pattern("spec.source.imageRegistry", "https://mirror.example", IMAGE_REGISTRY_PATTERN)),
    ("registry-uppercase", {"source": {"imageRegistry": "Mirror.Example"}},
     _pattern("spec.source.imageRegistry", "Mirror.Example", IMAGE_REGISTRY_PATTERN)),
    ("pull-secrets-too-many", {"source": {"imagePullSecrets": [f"s{i}" for i in range(9)]}},
     "spec.source.imagePullSecrets: Too many: 9: must have at most 8 items"),
    ("pull-secret-bad-name", {"source": {"imagePullSecrets": ["pull", "Bad Name"]}},
     _pattern("spec.source.imagePullSecrets[1]", "Bad Name", DNS_NAME_PATTERN)),
    ("pull-secrets-not-list", {"source": {"imagePullSecrets": "pull"}},
     _type("spec.source.imagePullSecrets", "string", "array")),
    ("source-unknown-field", {"source": {"chart": "gpu-operator"}},
     'unknown field "spec.source.chart"'),
    ("dcgm-string", {"components": {"dcgmExporter": "true"}},
     _type("spec.components.dcgmExporter", "string", "boolean")),
    ("mig-number", {"components": {"migManager": 1}},
     _type("spec.components.migManager", "integer", "boolean")),
    ("components-list", {"components": ["dcgmExporter"]},
     _type("spec.components", "array", "object")),
    ("component-unknown", {"components": {"kataManager": True}},
     'unknown field "spec.components.kataManager"'),
    ("vgpu-without-image", {"components": {"vgpuManager": True}},
     f"spec.components: Invalid value: {VGPU_NEEDS_IMAGE}"),
    ("vgpu-image-without-tag", {"components": {"vgpuManagerImage": "r.corp/nv/vgpu-manager"}},
     _pattern("spec.components.vgpuManagerImage", "r.corp/nv/vgpu-manager", IMAGE_PATTERN)),
    ("nfd-unknown", {"components": {"nodeFeatureDiscovery": "CpuNodes"}},
     'spec.components.nodeFeatureDiscovery: Unsupported value: "CpuNodes": supported values: '
     '"GpuNodes", "AllNodes"'),
    ("sandbox-unknown", {"components": {"sandboxWorkloads": "Docker"}},
     'spec.components.sandboxWorkloads: Unsupported value: "Docker": supported values: '
     '"Off", "KubeVirt", "Kata"'),
    ("mig-strategy-lowercase", {"components": {"migStrategy": "mixed"}},
     'spec.components.migStrategy: Unsupported value: "mixed": supported values: '
     '"None", "Single", "Mixed"'),
    ("upgrade-unavailable-150", {"driver": {"upgradePolicy": {"maxUnavailable": "150%"}}},
     _pattern("spec.driver.upgradePolicy.maxUnavailable", "150%", MAX_UNAVAILABLE_PATTERN)),
    ("upgrade-parallel-negative", {"driver": {"upgradePolicy": {"maxParallelUpgrades": -1}}},
     "spec.driver.upgradePolicy.maxParallelUpgrades: Invalid value: -1: "
     "spec.driver.upgradePolicy.maxParallelUpgrades in body should be greater than or equal to 0"),
    ("upgrade-drain-timeout-string",
     {"driver": {"upgradePolicy": {"drain": {"timeoutSeconds": "5m"}}}},
     _type("spec.driver.upgradePolicy.drain.timeoutSeconds", "string", "integer")),
    ("sharing-without-replicas", {"sharing": {"mode": "TimeSlicing"}},
     f"spec.sharing: Invalid value: {REPLICAS_NEEDED}"),
    ("sharing-one-replica", {"sharing": {"mode": "MPS", "replicas": 1}},
     "spec.sharing.replicas: Invalid value: 1: "
     "spec.sharing.replicas in body should be greater than or equal to 2"),
    ("sharing-mps-fail-requests",
     {"sharing": {"mode": "MPS", "replicas": 2, "failRequestsGreaterThanOne": True}},
     f"spec.sharing: Invalid value: {TIME_SLICING_ONLY}"),
    ("sharing-profile-default", {"sharing": {"profiles": [{"name": "default"}]}},
     f"spec.sharing: Invalid value: {PROFILE_NAME_RESERVED}"),
    ("sharing-profile-without-replicas",
     {"sharing": {"profiles": [{"name": "mps", "mode": "MPS"}]}},
     f"spec.sharing.profiles[0]: Invalid value: {REPLICAS_NEEDED}"),
    ("sharing-mode-unknown", {"sharing": {"mode": "Fractional", "replicas": 2}},
     'spec.sharing.mode: Unsupported value: "Fractional": supported values: '
     '"None", "TimeSlicing", "MPS"'),
    ("stack-unknown", {"stack": "Both"},
     'spec.stack: Unsupported value: "Both": supported values: "DevicePlugin", "DRA"'),
    ("spec-unknown-field", {"colour": "blue"}, 'unknown field "spec.colour"'),
    ("values-not-object", {"values": "driver: {}"},
     _type("spec.values", "string", "object")),
    # spec.values: only the listed values (values-rules/values-allowlist.yaml), typed
    ("values-validator-image-env", {"values": {"validator": VALIDATOR_IMAGE}},
     'unknown field "spec.values.validator.cuda"'),
    ("values-operator-env", {"values": {"operator": {"env": [{"name": "DRIVER_MANAGER_IMAGE",
                                                              "value": "evil"}]}}},
     'unknown field "spec.values.operator.env"'),
    ("values-extra-objects", {"values": {"extraObjects": [HOSTILE_BINDING]}},
     'unknown field "spec.values.extraObjects"'),
    ("values-extra-objects-empty", {"values": {"extraObjects": []}},
     'unknown field "spec.values.extraObjects"'),
    ("values-nfd-namespace", {"values": {"node-feature-discovery": {"namespaceOverride": "x"}}},
     'unknown field "spec.values.node-feature-discovery.namespaceOverride"'),
    ("values-nfd-rules", {"values": {"node-feature-discovery": {"worker": {"config": {}}}}},
     'unknown field "spec.values.node-feature-discovery.worker.config"'),
    ("values-host-path", {"values": {"hostPaths": {"rootFS": "/tmp"}}},
     'unknown field "spec.values.hostPaths"'),
    ("values-pod-annotations", {"values": {"daemonsets": {"annotations": {"a": "b"}}}},
     'unknown field "spec.values.daemonsets.annotations"'),
    ("values-operator-image", {"values": {"operator": {"repository": "evil.example"}}},
     'unknown field "spec.values.operator.repository"'),
    ("values-document-separator",
     {"values": {"kataSandboxDevicePlugin": {"imagePullPolicy": INJECTED}}},
     'unknown field "spec.values.kataSandboxDevicePlugin.imagePullPolicy"'),
    ("values-pull-policy-injected", {"values": {"driver": {"imagePullPolicy": INJECTED}}},
     "spec.values.driver.imagePullPolicy: Unsupported value: "),
    ("values-gpu-request", {"values": {"operator": {"resources": {"limits": {
        "nvidia.com/gpu": 1}}}}},
     'unknown field "spec.values.operator.resources.limits.nvidia.com/gpu"'),
    ("values-quantity", {"values": {"operator": {"resources": {"requests": {"cpu": "lots"}}}}},
     _pattern("spec.values.operator.resources.requests.cpu", "lots", QUANTITY_PATTERN)),
    ("values-config-map-name", {"values": {"migManager": {"config": {"name": "Not A Name"}}}},
     _pattern("spec.values.migManager.config.name", "Not A Name", DNS_NAME_PATTERN)),
    ("values-priority-line-separator",
     {"values": {"operator": {"priorityClassName": "a\u2028b"}}},
     "spec.values.operator.priorityClassName: Invalid value: "),
    ("values-carriage-return-in-text",
     {"values": {"dcgmExporter": {"config": {"data": "a\r\nb"}}}},
     "spec.values.dcgmExporter.config.data: Invalid value: "),
    ("values-mig-hooks", {"values": {"migManager": {"config": {"data": {
        "config.yaml": "version: v1\nhooks: {apply-start: [sh]}\n"}}}}},
     "spec.values.migManager.config.data.config.yaml: Invalid value: "),
    ("values-label-key", {"values": {"dcgmExporter": {"serviceMonitor": {
        "additionalLabels": {"a\nb": "c"}}}}},
     "spec.values.dcgmExporter.serviceMonitor.additionalLabels: Invalid value: "
     f"{LABELS_RULE['message']}"),
    ("values-feature-gate-name", {"values": {"draDriver": {"featureGates": {"A=b": True}}}},
     "spec.values.draDriver.featureGates: Invalid value: feature gate names are letters and "
     "digits"),
    ("values-too-many-tolerations",
     {"values": {"daemonsets": {"tolerations": [{"operator": "Exists"}] * (MAX_LIST + 1)}}},
     f"spec.values.daemonsets.tolerations: Too many: {MAX_LIST + 1}: must have at most "
     f"{MAX_LIST} items"),
    ("values-text-too-long", {"values": {"dcgmExporter": {"config": {"data": "#" * MAX_TEXT
                                                                             + "#"}}}},
     f"spec.values.dcgmExporter.config.data: Too long: may not be more than {MAX_TEXT} bytes"),
    ("values-too-deep", {"values": _deep(300)}, 'unknown field "spec.values.a"'),
    ("health-marks-over-half", {"health": {"maxMarkedPercent": 100}},
     "spec.health.maxMarkedPercent: Invalid value: 100: spec.health.maxMarkedPercent in body "
     f"should be less than or equal to {MAX_MARKED_PERCENT}"),
    ("selector-unclosed",
     {"driver": {"upgradePolicy": {"waitForCompletion": {"podSelector": "app in (batch,train"}}}},
     'spec.driver.upgradePolicy.waitForCompletion.podSelector: Invalid value: '
     f'"app in (batch,train": {LABEL_SELECTOR_MESSAGE}'),
    ("selector-template", {"driver": {"upgradePolicy": {"waitForCompletion": {
        "podSelector": "{{ .Values.p | b64dec }}"}}}},
     'spec.driver.upgradePolicy.waitForCompletion.podSelector: Invalid value: '
     f'"{{{{ .Values.p | b64dec }}}}": {LABEL_SELECTOR_MESSAGE}'),
    ("selector-two-equals",
     {"driver": {"upgradePolicy": {"drain": {"podSelector": "team=ml=gpu"}}}},
     'spec.driver.upgradePolicy.drain.podSelector: Invalid value: '
     f'"team=ml=gpu": {LABEL_SELECTOR_MESSAGE}'),
]  # fmt: skip


def _manifest(spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpu.kyma-project.io/v1beta1",
        "kind": "Gpu",
        "metadata": {"name": "gpu"},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def gpu_crd(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The generated CRD on the API server (its schema holds spec.values too); removed again if
    this test brought it."""
    existed = local_cluster.get_object("crd", "gpus.gpu.kyma-project.io") is not None
    local_cluster.kubectl("apply", "--server-side", *FIELD_MANAGER, "-f", str(CRD))
    local_cluster.wait_crds_established("gpus.gpu.kyma-project.io")
    yield local_cluster
    if not existed:
        local_cluster.kubectl("delete", "-f", str(CRD), "--wait=true", check=False)


def _admission(cluster: LocalCluster, spec: Any) -> tuple[int, str]:
    result = cluster.kubectl(
        "create", "--dry-run=server", "-o", "name", "-f", "-",
        input=json.dumps(_manifest(spec)), check=False,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def _plan(tmp_path: Path, spec: Any, *sources: dict[str, Any]) -> tuple[int, str]:
    """`kyma-gpu plan` on the spec; `sources`: chart sources an administrator allows."""
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(_manifest(spec)), encoding="utf-8")
    allowed = tmp_path / "sources.json"
    allowed.write_text(json.dumps(chart_sources_config_map(NVIDIA, *sources)), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = main(["plan", "-f", str(path), "--sources", str(allowed)],
                stdin=io.StringIO(), stdout=out, stderr=err)  # fmt: skip
    return code, err.getvalue()


def test_the_table_is_big_enough() -> None:
    assert len(ROWS) >= 30
    assert len({row[0] for row in ROWS}) == len(ROWS)


def test_a_valid_spec_passes_both(gpu_crd: LocalCluster, tmp_path: Path) -> None:
    """The control: the same path accepts a good spec, so a refusal below means something."""
    spec = {
        "driver": {"mode": "Precompiled", "version": "590"},
        "source": {"chartRepository": "http://charts.example", "insecure": True},
        "components": {"migManager": True},
        "values": {
            "operator": {"resources": {"requests": {"cpu": 1, "memory": "256Mi"}}},
            "daemonsets": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]},
            "dcgmExporter": {"serviceMonitor": {"additionalLabels": {"release": "prom"}}},
            "migManager": {"config": {"data": {"config.yaml": "version: v1\nmig-configs: {}\n"}}},
        },
    }
    code, out = _admission(gpu_crd, spec)
    assert code == 0, out
    assert _plan(tmp_path, spec, local_source("http://charts.example"))[0] == 0


def test_duplicate_profile_names_are_refused_by_both(gpu_crd: LocalCluster, tmp_path: Path) -> None:
    """The API server refuses them as duplicate keys of a list-map, the model in its own words."""
    spec = {"sharing": {"profiles": [{"name": "a"}, {"name": "a"}]}}
    code, said = _admission(gpu_crd, spec)
    assert code != 0
    assert "spec.sharing.profiles[1]: Duplicate value" in said, said
    code, said = _plan(tmp_path, spec)
    assert code == 2
    assert "the names of the sharing profiles must be unique" in said


@pytest.mark.parametrize(("spec", "message"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_refused_with_the_same_message(
    gpu_crd: LocalCluster, tmp_path: Path, spec: dict[str, Any], message: str
) -> None:
    code, said = _admission(gpu_crd, spec)
    assert code != 0, f"the API server admitted {spec}"
    assert message in said, f"API server said:\n{said}"
    code, said = _plan(tmp_path, spec)
    assert code == 2, f"kyma-gpu plan accepted {spec}"
    assert message in said, f"kyma-gpu plan said:\n{said}"
