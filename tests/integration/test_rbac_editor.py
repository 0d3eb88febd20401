"""Issue 20's doors tried as a Gpu editor, on the real API server: a user bound to the
module's edit role only (ClusterRole kyma-gpu-edit, config/rbac/aggregate_user_roles.yaml)
writes hostile Gpus, and the CRD's rules and its schema for spec.values (generated from
values-rules/values-allowlist.yaml) refuse each, naming the key. Every write is
`--dry-run=server`: admission runs, nothing is stored.
tests/integration/test_rbac_release.py tries the doors as the release account.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kyma_gpu.api.selectors import LABEL_SELECTOR_MESSAGE
from tests.harness.cluster import LocalCluster
from tests.harness.module import ROOT, install_crds, wait_until

pytestmark = pytest.mark.integration

EDITOR = "gpu-door-editor"
BINDING: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": f"test-{EDITOR}"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "kyma-gpu-edit"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": EDITOR}],
}  # fmt: skip
SHIPPED_ROLES = ROOT / "config" / "rbac" / "aggregate_user_roles.yaml"
ADMIN_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
    "metadata": {"name": "mallory-admin"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "cluster-admin"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}],
}  # fmt: skip
TEMPLATE = "{{ .Values.p | b64dec }}"


def _deep(levels: int) -> Any:
    node: Any = "x"
    for _ in range(levels):
        node = {"a": node}
    return node


def _unknown(path: str) -> str:
    """kubectl's strict field validation, on the CRD's schema generated from the allowlist."""
    return f'unknown field "{path}"'


DOORS: list[tuple[str, dict[str, Any], str]] = [
    # door 2: text that Helm would read as structure, or run as template code
    ("document-in-unquoted-value",
     {"values": {"kataSandboxDevicePlugin": {"imagePullPolicy":
                                             "IfNotPresent\n---\n" + json.dumps(ADMIN_BINDING)}}},
     _unknown("spec.values.kataSandboxDevicePlugin.imagePullPolicy")),
    ("document-in-a-listed-value",
     {"values": {"driver": {"imagePullPolicy": "IfNotPresent\n---\n" + json.dumps(ADMIN_BINDING)}}},
     "spec.values.driver.imagePullPolicy: Unsupported value"),
    ("extra-objects", {"values": {"extraObjects": [ADMIN_BINDING]}},
     _unknown("spec.values.extraObjects")),
    ("template-in-selector",
     {"driver": {"upgradePolicy": {"waitForCompletion": {"podSelector": TEMPLATE}}}},
     LABEL_SELECTOR_MESSAGE),
    ("nfd-rename", {"values": {"node-feature-discovery": {"fullnameOverride": "x"}}},
     _unknown("spec.values.node-feature-discovery.fullnameOverride")),
    ("nfd-service-account",
     {"values": {"node-feature-discovery": {"worker": {"serviceAccount": {"name": "default"}}}}},
     _unknown("spec.values.node-feature-discovery.worker.serviceAccount")),
    ("config-map-name", {"values": {"migManager": {"config": {"name": "x\n---"}}}},
     "spec.values.migManager.config.name: Invalid value"),
    # door 5: values too deep to read and write
    ("deep-values", {"values": _deep(300)}, _unknown("spec.values.a")),
    # door 6: a selector the upgrade library would answer with a 400 at the next rollout
    ("selector-unparsed",
     {"driver": {"upgradePolicy": {"drain": {"podSelector": "app in (batch,train"}}}},
     LABEL_SELECTOR_MESSAGE),
    # issue 31: the images (and the commands) are the platform's choice. Each of these ran
    # under the NVIDIA operator's or a privileged operand's account before.
    ("operator-image", {"values": {"operator": {"repository": "evil.example/nvidia"}}},
     _unknown("spec.values.operator.repository")),
    ("driver-version", {"values": {"driver": {"version": "latest"}}},
     _unknown("spec.values.driver.version")),
    ("driver-manager-image", {"values": {"driver": {"manager": {"image": "evil"}}}},
     _unknown("spec.values.driver.manager")),
    ("nfd-image", {"values": {"node-feature-discovery": {"image": {"tag": "evil"}}}},
     _unknown("spec.values.node-feature-discovery.image")),
    ("validator-args", {"values": {"validator": {"args": ["--evil"]}}},
     _unknown("spec.values.validator.args")),
    ("nfd-init-containers",
     {"values": {"node-feature-discovery": {"worker": {"initContainers": [{"name": "x"}]}}}},
     _unknown("spec.values.node-feature-discovery.worker.initContainers")),
    ("driver-package-repositories",
     {"values": {"driver": {"repoConfig": {"configMapName": "evil-apt"}}}},
     _unknown("spec.values.driver.repoConfig")),
    ("kata-artifacts", {"values": {"kataManager": {"config": {"artifactsDir": "/x"}}}},
     _unknown("spec.values.kataManager.config")),
    # issue 43: env entries, host paths and NFD's rules, which no key name gave away
    ("validator-image-env",
     {"values": {"validator": {"cuda": {"env": [{"name": "VALIDATOR_IMAGE",
                                                 "value": "evil.example/v:1"}]}}}},
     _unknown("spec.values.validator.cuda")),
    ("driver-manager-image-env",
     {"values": {"operator": {"env": [{"name": "DRIVER_MANAGER_IMAGE", "value": "evil"}]}}},
     _unknown("spec.values.operator.env")),
    ("dra-driver-env", {"values": {"draDriver": {"env": [{"name": "A", "value": "b"}]}}},
     _unknown("spec.values.draDriver.env")),
    ("toolkit-install-dir", {"values": {"toolkit": {"installDir": "/tmp/evil"}}},
     _unknown("spec.values.toolkit.installDir")),
    ("dcgm-job-mapping-host-path",
     {"values": {"dcgmExporter": {"hpcJobMapping": {"directory": "/etc"}}}},
     _unknown("spec.values.dcgmExporter.hpcJobMapping")),
    ("nfd-custom-rules-mark-cpu-nodes",
     {"values": {"node-feature-discovery": {"worker": {"config": {"sources": {"custom": [
         {"name": "fake-gpu", "labels": {"nvidia.com/gpu.present": "true"},
          "matchFeatures": [{"feature": "kernel.version", "matchExpressions": {
              "major": {"op": "Exists"}}}]}]}}}}}},
     _unknown("spec.values.node-feature-discovery.worker.config")),
    ("nfd-extra-label-namespaces",
     {"values": {"node-feature-discovery": {"master": {"extraLabelNs": ["nvidia.com"]}}}},
     _unknown("spec.values.node-feature-discovery.master.extraLabelNs")),
    ("istio-injection-annotation",
     {"values": {"daemonsets": {"annotations": {"sidecar.istio.io/inject": "true"}}}},
     _unknown("spec.values.daemonsets.annotations")),
    ("device-plugin-cdi-hook",
     {"values": {"devicePlugin": {"config": {"create": True, "name": "x", "data": {
         "x": "version: v1\nflags:\n  plugin:\n    nvidiaCTKPath: /tmp/evil\n"}}}}},
     _unknown("spec.values.devicePlugin.config")),
    # spec.source.imageRegistry and spec.components.vgpuManagerImage:
    # tests/integration/test_image_registries.py (they need the administrator's ConfigMap)
]  # fmt: skip


def _gpu(spec: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                       "metadata": {"name": "gpu"}, "spec": spec})  # fmt: skip


def _as_editor(cluster: LocalCluster, spec: dict[str, Any]) -> tuple[int, str]:
    result = cluster.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-",
                             f"--as={EDITOR}", input=_gpu(spec), check=False)  # fmt: skip
    return result.returncode, result.stdout + result.stderr


@pytest.fixture(scope="module")
def cluster(local_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The CRD and the values policy in force, and one user bound to the module's edit role
    as the shipped file defines it (bound directly: no aggregation into the stock roles)."""
    install_crds(local_cluster)
    shipped = yaml.safe_load_all(SHIPPED_ROLES.read_text(encoding="utf-8"))
    edit = next(r for r in shipped if r and r["metadata"]["name"] == "kyma-gpu-edit")
    local_cluster.apply(edit, BINDING)
    wait_until(lambda: _as_editor(local_cluster, {"driver": {"version": "580"}})[0] == 0
               or "already exists" in _as_editor(local_cluster, {})[1],
               30, "the editor's role in force")  # fmt: skip
    yield local_cluster
    local_cluster.kubectl("delete", "clusterrolebinding", BINDING["metadata"]["name"],
                          "--ignore-not-found")  # fmt: skip


@pytest.mark.parametrize(("door", "spec", "words"), DOORS, ids=[d[0] for d in DOORS])
def test_the_editor_is_refused_in_the_modules_words(
    cluster: LocalCluster, door: str, spec: dict[str, Any], words: str
) -> None:
    code, out = _as_editor(cluster, spec)
    assert code != 0, (door, out)
    assert words in out, (door, out)


def test_the_editor_may_write_a_plain_gpu(cluster: LocalCluster) -> None:
    """The refusals above are the spec's, not the editor's rights: a plain Gpu passes
    admission (it may exist already on this cluster; then only storage says so)."""
    code, out = _as_editor(cluster, {"driver": {"version": "580"}})
    assert code == 0 or "already exists" in out, out


def test_the_editor_has_no_other_rights(cluster: LocalCluster) -> None:
    denied = [("create", "clusterrolebindings"), ("create", "helmreleases.helm.toolkit.fluxcd.io"),
              ("get", "secrets"), ("create", "pods")]  # fmt: skip
    for verb, what in denied:
        answer = cluster.kubectl("auth", "can-i", verb, what, f"--as={EDITOR}",
                                 "--all-namespaces", check=False)  # fmt: skip
        assert answer.stdout.strip() == "no", (verb, what, answer.stdout)
    status = cluster.kubectl("auth", "can-i", "patch", "gpus.gpu.kyma-project.io",
                             "--subresource=status", f"--as={EDITOR}", check=False)  # fmt: skip
    assert status.stdout.strip() == "no", status.stdout
