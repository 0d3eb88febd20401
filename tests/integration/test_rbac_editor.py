"""Issue 20's doors tried as a Gpu editor, on the real API server: a user bound to the
module's edit role only (ClusterRole kyma-gpu-edit, config/rbac/aggregate_user_roles.yaml)
writes hostile Gpus, and the CRD's rules and the values policy refuse each with the module's
own words. Every write is `--dry-run=server`: admission runs, nothing is stored.
tests/integration/test_rbac_release.py tries the doors as the release account.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kyma_gpu.api.models import REFUSED_VALUES
from kyma_gpu.api.selectors import LABEL_SELECTOR_MESSAGE
from kyma_gpu.api.values import DEPTH_MESSAGE, IMAGE_MESSAGE, NAME_MESSAGE
from kyma_gpu.api.values import REASON as LINE_BREAKS
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
REFUSED = {r.path: r.message for r in REFUSED_VALUES}
TEMPLATE = "{{ .Values.p | b64dec }}"


def _deep(levels: int) -> Any:
    node: Any = "x"
    for _ in range(levels):
        node = {"a": node}
    return node


DOORS: list[tuple[str, dict[str, Any], str]] = [
    # door 2: text that Helm would read as structure, or run as template code
    ("document-in-unquoted-value",
     {"values": {"kataSandboxDevicePlugin": {"imagePullPolicy":
                                             "IfNotPresent\n---\n" + json.dumps(ADMIN_BINDING)}}},
     LINE_BREAKS),
    ("extra-objects", {"values": {"extraObjects": [ADMIN_BINDING]}}, REFUSED[("extraObjects",)]),
    ("template-in-selector",
     {"driver": {"upgradePolicy": {"waitForCompletion": {"podSelector": TEMPLATE}}}},
     LABEL_SELECTOR_MESSAGE),
    ("nfd-rename", {"values": {"node-feature-discovery": {"fullnameOverride": "x"}}},
     REFUSED[("node-feature-discovery", "fullnameOverride")]),
    ("nfd-service-account",
     {"values": {"node-feature-discovery": {"worker": {"serviceAccount": {"name": "default"}}}}},
     REFUSED[("node-feature-discovery", "worker", "serviceAccount", "name")]),
    ("config-map-name", {"values": {"migManager": {"config": {"name": "x\n---"}}}}, LINE_BREAKS),
    ("config-map-name-not-dns", {"values": {"migManager": {"config": {"name": "X Y"}}}},
     NAME_MESSAGE),
    # door 5: values too deep to read and write
    ("deep-values", {"values": _deep(300)}, DEPTH_MESSAGE),
    # door 6: a selector the upgrade library would answer with a 400 at the next rollout
    ("selector-unparsed",
     {"driver": {"upgradePolicy": {"drain": {"podSelector": "app in (batch,train"}}}},
     LABEL_SELECTOR_MESSAGE),
    # issue 31: the images (and the commands) are the platform's choice. Each of these ran
    # under the NVIDIA operator's or a privileged operand's account before.
    ("operator-image", {"values": {"operator": {"repository": "evil.example/nvidia"}}},
     f"spec.values.operator.repository: Invalid value: {IMAGE_MESSAGE}"),
    ("driver-version", {"values": {"driver": {"version": "latest"}}},
     f"spec.values.driver.version: Invalid value: {IMAGE_MESSAGE}"),
    ("driver-manager-image", {"values": {"driver": {"manager": {"image": "evil"}}}},
     f"spec.values.driver.manager.image: Invalid value: {IMAGE_MESSAGE}"),
    ("nfd-image", {"values": {"node-feature-discovery": {"image": {"tag": "evil"}}}},
     f"spec.values.node-feature-discovery.image: Invalid value: {IMAGE_MESSAGE}"),
    ("validator-args", {"values": {"validator": {"args": ["--evil"]}}},
     f"spec.values.validator.args: Invalid value: {IMAGE_MESSAGE}"),
    ("nfd-init-containers",
     {"values": {"node-feature-discovery": {"worker": {"initContainers": [{"name": "x"}]}}}},
     f"spec.values.node-feature-discovery.worker.initContainers: Invalid value: {IMAGE_MESSAGE}"),
    ("driver-package-repositories",
     {"values": {"driver": {"repoConfig": {"configMapName": "evil-apt"}}}},
     f"spec.values.driver.repoConfig: Invalid value: {IMAGE_MESSAGE}"),
    ("kata-artifacts", {"values": {"kataManager": {"config": {"artifactsDir": "/x"}}}},
     f"spec.values.kataManager.config: Invalid value: {IMAGE_MESSAGE}"),
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
    wait_until(lambda: DEPTH_MESSAGE in _as_editor(local_cluster, {"values": _deep(300)})[1],
               30, "the values policy in force for the editor")  # fmt: skip
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
