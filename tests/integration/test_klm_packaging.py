"""The rendered ModuleTemplate and ModuleReleaseMeta (config/module/, written by
hack/render-module-template.sh) against Kyma Lifecycle Manager's real CRDs.

The CRDs are lifecycle-manager's own (../shared/reference/klm-crds, see its README), installed
on the local API server. The objects are APPLIED, not dry-run: the API server validates them
against the OpenAPI schemas and CEL rules, prunes what the schema does not know, defaults
fields, and stores them; the test reads them back and compares field by field, so a field the
schema drops or renames fails here. A deliberately broken copy is refused, which shows the
validation is live. The default CR inside the template is checked against the Gpu CRD, as
modulectl does.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
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


def _render_script() -> ModuleType:
    """hack/render_module_template.py, for its placeholder rules and header."""
    path = ROOT / "hack" / "render_module_template.py"
    spec = importlib.util.spec_from_file_location("render_module_template", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_module_template_fields(klm: dict[str, dict[str, Any]]) -> None:
    config = yaml.safe_load((MODULE / "module-config.yaml").read_text())
    spec = klm["template"]["spec"]
    meta = klm["template"]["metadata"]
    assert meta["name"] == f"gpu-{config['version']}"
    assert meta["labels"]["operator.kyma-project.io/module-name"] == "gpu"
    # The Gpu is cluster-scoped; KLM creates and deletes the default CR accordingly.
    assert meta["annotations"]["operator.kyma-project.io/is-cluster-scoped"] == "true"
    assert spec["moduleName"] == "gpu"
    assert spec["version"] == config["version"]
    assert "channel" not in spec, "channels belong to the ModuleReleaseMeta"
    assert spec["mandatory"] is False
    assert spec["info"]["repository"] == config["repository"]
    assert spec["info"]["documentation"] == config["documentation"]
    assert spec["info"]["icons"] == config["icons"]
    assert spec["resources"] == [{"name": "rawManifest", "link": config["manifest"]}]
    assert spec["manager"] == {
        "name": "gpu-manager",
        "namespace": "kyma-system",
        "group": "apps",
        "version": "v1",
        "kind": "Deployment",
    }
    assert {(r["group"], r["kind"]) for r in spec["associatedResources"]} >= {
        ("gpu.kyma-project.io", "Gpu"),
        ("helm.toolkit.fluxcd.io", "HelmRelease"),
    }
    assert spec["data"] == yaml.safe_load((ROOT / "config" / "samples" / "gpu.yaml").read_text())
    component = spec["descriptor"]["component"]
    assert component["name"] == config["name"]
    assert component["version"] == config["version"]


def test_descriptor_is_bound_to_the_manifest_and_its_images(
    klm: dict[str, dict[str, Any]],
) -> None:
    script = _render_script()
    text = (MODULE / "manifest.yaml").read_text()
    header_lines = script.HEADER.count("\n")
    manifest = text.split("\n", header_lines)[header_lines]
    component = klm["template"]["spec"]["descriptor"]["component"]
    resources = {r["name"]: r for r in component["resources"]}
    raw = resources.pop("raw-manifest")
    digest = hashlib.sha256(manifest.encode()).hexdigest()
    assert raw["access"]["localReference"] == f"sha256:{digest}"
    # Every image the module runs: the manifest's (pinned by digest in a release render) and
    # the third-party ones the manager installs (the Flux controllers), as the scanners list.
    images = {r["access"]["imageReference"] for r in resources.values()}
    objects = [o for o in yaml.safe_load_all(manifest) if o]
    assert set(script.images_of(objects)) <= images
    security = yaml.safe_load((MODULE / "sec-scanners-config.yaml").read_text())
    assert {i.split("@", 1)[0] for i in images} == set(security["bdba"])


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
    assert spec["ocmComponentName"] == klm["template"]["spec"]["descriptor"]["component"]["name"]
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


def test_no_placeholders() -> None:
    script = _render_script()
    for name in ("moduletemplate.yaml", "modulereleasemeta.yaml"):
        text = (MODULE / name).read_text()
        body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        assert script.placeholders(body) == [], name
    template = _load("moduletemplate.yaml")
    links = [template["spec"]["info"]["repository"], template["spec"]["info"]["documentation"]]
    links += [i["link"] for i in template["spec"]["info"]["icons"]]
    links += [r["link"] for r in template["spec"]["resources"]]
    for link in links:
        assert link.startswith("https://"), link
    # The placeholder rules do catch what they are for.
    assert script.placeholders("sha256:" + "0" * 64)
    assert script.placeholders("link: https://example.com/icon.svg")


def test_default_cr_is_valid_for_the_gpu_crd(local_cluster: LocalCluster) -> None:
    """What modulectl checks too: the default CR passes the module's own CRD."""
    install_crds(local_cluster)
    data = _load("moduletemplate.yaml")["spec"]["data"]
    local_cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(data))
