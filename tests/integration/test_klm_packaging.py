"""The committed ModuleTemplate and ModuleReleaseMeta (config/module/, what `modulectl create`
writes for the committed module-config: hack/module.py render) against Kyma Lifecycle Manager's
real CRDs, and the component constructor modulectl makes from the same config.

The CRDs are lifecycle-manager's own (../shared/reference/klm-crds, see its README), installed
on the local API server. The objects are APPLIED, not dry-run: the API server validates them
against the OpenAPI schemas and CEL rules, prunes what the schema does not know, defaults
fields, and stores them; the test reads them back and compares field by field, so a field the
schema drops or renames fails here. A deliberately broken copy is refused, which shows the
validation is live. The default CR inside the template is checked against the Gpu CRD, as
modulectl does. That KLM installs, upgrades and removes the module from the component pushed
to a registry is tests/e2e/test_klm.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.cluster import LocalCluster
from tests.harness.module import ROOT, install_crds

pytestmark = pytest.mark.integration

KLM_CRDS = Path(
    os.environ.get("KYMA_GPU_KLM_CRDS", str(ROOT.parent / "shared" / "reference" / "klm-crds"))
)
MODULE = ROOT / "config" / "module"
NAMESPACE = "kcp-system"
TEMPLATES = "moduletemplates.operator.kyma-project.io"
RELEASE_METAS = "modulereleasemetas.operator.kyma-project.io"


def _load(name: str) -> dict[str, Any]:
    obj = yaml.safe_load((MODULE / name).read_text())
    assert isinstance(obj, dict)
    return obj


@pytest.fixture(scope="module")
def klm(local_cluster: LocalCluster) -> Iterator[dict[str, dict[str, Any]]]:
    """KLM's CRDs on the cluster, the rendered objects applied; yields them as read back."""
    crds = sorted(KLM_CRDS.glob("operator.kyma-project.io_*.yaml"))
    names = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in crds}
    assert {TEMPLATES, RELEASE_METAS} <= names, f"KLM CRDs missing in {KLM_CRDS}"
    args = ["apply", "--server-side", "--field-manager=kyma-gpu-tests"]
    for path in crds:
        args += ["-f", str(path)]
    local_cluster.kubectl(*args)
    local_cluster.wait_crds_established(*sorted(names))
    if local_cluster.get_object("namespace", NAMESPACE) is None:
        local_cluster.create_namespace(NAMESPACE)
    template, release_meta = _load("moduletemplate.yaml"), _load("modulereleasemeta.yaml")
    # modulectl writes `namespace: ""`; the templates of a KLM landscape live in kcp-system.
    assert template["metadata"]["namespace"] in ("", NAMESPACE)
    template["metadata"]["namespace"] = NAMESPACE
    local_cluster.apply(template, release_meta)
    try:
        stored_template = local_cluster.get_object(
            TEMPLATES, template["metadata"]["name"], NAMESPACE
        )
        stored_meta = local_cluster.get_object(
            RELEASE_METAS, release_meta["metadata"]["name"], NAMESPACE
        )
        yield {"template": stored_template or {}, "release_meta": stored_meta or {}}
    finally:
        for resource, obj in ((TEMPLATES, template), (RELEASE_METAS, release_meta)):
            local_cluster.kubectl("delete", resource, obj["metadata"]["name"], "-n", NAMESPACE,
                                  "--ignore-not-found")  # fmt: skip


def test_module_template_is_stored_as_rendered(klm: dict[str, dict[str, Any]]) -> None:
    want = _load("moduletemplate.yaml")
    got = klm["template"]
    assert got, "the ModuleTemplate was not stored"
    # Nothing pruned, renamed or defaulted away: the schema knows every field we set.
    assert got["spec"] == want["spec"]
    for key in ("labels", "annotations"):
        assert want["metadata"][key].items() <= got["metadata"][key].items()


@pytest.fixture
def template(klm: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ModuleTemplate as the API server stored it."""
    return klm["template"]


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    """The committed module-config.yaml modulectl renders the template from."""
    loaded: dict[str, Any] = yaml.safe_load((MODULE / "module-config.yaml").read_text())
    return loaded


def test_the_template_is_named_for_its_version(
    template: dict[str, Any], config: dict[str, Any]
) -> None:
    assert template["metadata"]["name"] == f"gpu-{config['version']}"


def test_the_template_is_labelled_with_the_module_name(template: dict[str, Any]) -> None:
    assert template["metadata"]["labels"]["operator.kyma-project.io/module-name"] == "gpu"


def test_the_template_says_the_gpu_is_cluster_scoped(template: dict[str, Any]) -> None:
    # The Gpu is cluster-scoped; KLM creates and deletes the default CR accordingly.
    annotations = template["metadata"]["annotations"]
    assert annotations["operator.kyma-project.io/is-cluster-scoped"] == "true"


def test_the_template_names_the_module(template: dict[str, Any]) -> None:
    assert template["spec"]["moduleName"] == "gpu"


def test_the_template_carries_the_configs_version(
    template: dict[str, Any], config: dict[str, Any]
) -> None:
    assert template["spec"]["version"] == config["version"]


def test_the_template_names_no_channel(template: dict[str, Any]) -> None:
    assert "channel" not in template["spec"], "channels belong to the ModuleReleaseMeta"


def test_the_module_is_not_mandatory(template: dict[str, Any]) -> None:
    assert template["spec"].get("mandatory", False) is False


@pytest.mark.parametrize("field", ["repository", "documentation", "icons"])
def test_the_templates_info_is_the_configs(
    template: dict[str, Any], config: dict[str, Any], field: str
) -> None:
    assert template["spec"]["info"][field] == config[field]


def test_the_manifest_is_local(template: dict[str, Any]) -> None:
    # A local manifest: KLM takes it from the component version, not from a link.
    assert "resources" not in template["spec"]


def test_the_template_names_the_managers_deployment(template: dict[str, Any]) -> None:
    assert template["spec"]["manager"] == {
        "name": "gpu-manager",
        "namespace": "kyma-system",
        "group": "apps",
        "version": "v1",
        "kind": "Deployment",
    }


def test_the_gpu_and_the_helmrelease_are_associated_resources(template: dict[str, Any]) -> None:
    associated = template["spec"]["associatedResources"]
    assert {(r["group"], r["kind"]) for r in associated} >= {
        ("gpu.kyma-project.io", "Gpu"),
        ("helm.toolkit.fluxcd.io", "HelmRelease"),
    }


def test_the_default_cr_is_the_sample_gpu(template: dict[str, Any]) -> None:
    sample = yaml.safe_load((ROOT / "config" / "samples" / "gpu.yaml").read_text())
    assert template["spec"]["data"] == sample


def test_the_descriptor_is_left_empty(template: dict[str, Any]) -> None:
    # modulectl leaves the descriptor empty: KLM reads the component from the registry.
    assert template["spec"].get("descriptor") in (None, {})


def test_the_component_carries_the_manifest_the_default_cr_and_every_image(
    tmp_path: Path,
) -> None:
    """modulectl's constructor for the committed config: the raw manifest, the default CR and
    every image the module deploys, the Flux controllers' included (from the manager's env)."""
    modulectl = ROOT / "tools" / "bin" / "modulectl"
    subprocess.run(
        [str(modulectl), "create", "--config-file", str(MODULE / "module-config.yaml"),
         "--output", str(tmp_path / "template.yaml"),
         "--output-constructor-file", str(tmp_path / "cc.yaml"),
         "--module-sources-git-directory", str(ROOT)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    component = yaml.safe_load((tmp_path / "cc.yaml").read_text())["components"][0]
    config = yaml.safe_load((MODULE / "module-config.yaml").read_text())
    assert (component["name"], component["version"]) == (config["name"], config["version"])
    resources = {r["name"]: r for r in component["resources"]}
    assert {"raw-manifest", "default-cr"} <= set(resources)
    images = {r["access"]["imageReference"] for r in resources.values()
              if r["type"] == "ociArtifact"}  # fmt: skip
    security = yaml.safe_load((MODULE / "sec-scanners-config.yaml").read_text())
    assert images == set(security["bdba"])
    assert any("fluxcd/helm-controller" in i for i in images)
    assert any("fluxcd/source-controller" in i for i in images)
    labels = {label["name"]: label["value"] for label in component["labels"]}
    assert labels["operator.kyma-project.io/is-cluster-scoped"] == "true"


def test_module_release_meta_is_stored_as_rendered(klm: dict[str, dict[str, Any]]) -> None:
    want = _load("modulereleasemeta.yaml")
    got = klm["release_meta"]
    assert got, "the ModuleReleaseMeta was not stored"
    spec = dict(got["spec"])
    # Deprecated fields the server defaults; we set neither.
    assert spec.pop("beta", False) is False
    assert spec.pop("internal", False) is False
    assert spec == want["spec"]
    assert spec["moduleName"] == klm["template"]["spec"]["moduleName"]
    config = yaml.safe_load((MODULE / "module-config.yaml").read_text())
    assert spec["ocmComponentName"] == config["name"]
    assert spec["channels"] == [
        {"channel": "regular", "version": klm["template"]["spec"]["version"]}
    ]
    assert "mandatory" not in spec


@pytest.mark.parametrize(
    ("name", "breakage", "message"),
    [
        ("moduletemplate.yaml", {"version": "0.1"}, "spec.version"),
        ("moduletemplate.yaml", {"moduleName": "GPU"}, "spec.moduleName"),
        ("moduletemplate.yaml", {"info": {"repository": "https://github.com/kyma-project/gpu"}},
         "spec.info.documentation"),
        ("modulereleasemeta.yaml", {"mandatory": {"version": "0.1.0"}},
         "exactly one of 'mandatory' or 'channels'"),
    ],
)  # fmt: skip
def test_the_schemas_are_enforced(
    local_cluster: LocalCluster,
    klm: dict[str, dict[str, Any]],
    name: str,
    breakage: dict[str, Any],
    message: str,
) -> None:
    """A broken copy is refused: the objects above passed a live validation."""
    obj = copy.deepcopy(_load(name))
    obj["metadata"]["name"] = "gpu-broken"
    obj["spec"].update(breakage)
    # --validate=false: the API server refuses it, not kubectl's client-side check.
    result = local_cluster.kubectl(
        "apply", "--server-side", "--validate=false", "--field-manager=kyma-gpu-tests", "-f", "-",
        input=json.dumps(obj), check=False,
    )  # fmt: skip
    assert result.returncode != 0, f"the API server accepted a broken {obj['kind']}"
    assert "is invalid" in result.stderr
    assert message in result.stderr


def test_default_cr_is_valid_for_the_gpu_crd(local_cluster: LocalCluster) -> None:
    """What modulectl checks too: the default CR passes the module's own CRD."""
    install_crds(local_cluster)
    data = _load("moduletemplate.yaml")["spec"]["data"]
    local_cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(data))
