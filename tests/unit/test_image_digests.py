"""A release's operand digests (values-rules/image-digests.yaml): the plan names each chart
image it lists by tag and digest, before the mirror, and nothing else; a bad file stops the
start with its name and line."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.api import GpuSpec
from kyma_gpu.plan import Plan, make_plan
from kyma_gpu.rules.catalog import IMAGE_DIGESTS, Catalog
from kyma_gpu.rules.chart import image_reference
from kyma_gpu.rules.engine import RuleError
from kyma_gpu_tools.inventory import plan_images
from tests.unit.builders import facts_of, node, ubuntu_node

CHART = "v26.7.0"
MIRROR = "mirror.example:5000"


def _digest(n: int) -> str:
    return f"sha256:{n:064x}"


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Catalog, dict[str, str]]:
    """A copy of values-rules/ with a digest for every image of the chart but the toolkit's."""
    root = tmp_path_factory.mktemp("rules") / "values-rules"
    shutil.copytree(Catalog().root, root)
    chart = Catalog(root).chart(CHART)
    assert chart is not None
    digests = {
        image_reference(i.model_dump()): _digest(n)
        for n, i in enumerate(chart.images, start=1)
        if i.path != "toolkit" and i.version
    }
    (root / IMAGE_DIGESTS).write_text(yaml.safe_dump({"images": digests}), encoding="utf-8")
    return Catalog(root), digests


def _plan(catalog: Catalog, spec: Mapping[str, Any] | None = None, *bodies: Any) -> Plan:
    facts = facts_of(catalog.machine_types, *(bodies or (node(),)))
    return make_plan(GpuSpec.model_validate(spec or {}), facts, catalog)


def _at(values: Mapping[str, Any], path: str) -> Any:
    found: Any = values
    for key in path.split("."):
        found = found[key]
    return found


def test_a_listed_image_is_named_by_tag_and_digest(pinned: tuple[Catalog, dict[str, str]]) -> None:
    catalog, digests = pinned
    plan = _plan(catalog)
    validator = _at(plan.values, "validator")
    reference = _original(catalog, "validator")
    assert validator["version"] == f"{reference.rsplit(':', 1)[1]}@{digests[reference]}"
    assert plan.provenance["validator.version"] == "image-digests"
    assert "image-digests" in plan.rules_applied


def test_nfd_keeps_its_tag_key(pinned: tuple[Catalog, dict[str, str]]) -> None:
    catalog, digests = pinned
    image = _at(_plan(catalog).values, "node-feature-discovery.image")
    (reference,) = [r for r in digests if "/nfd/" in r]
    tag = reference.rsplit(":", 1)[1]
    assert image["tag"] == f"{tag}@{digests[reference]}", image


def test_an_image_the_release_did_not_list_keeps_its_tag(
    pinned: tuple[Catalog, dict[str, str]],
) -> None:
    catalog, _ = pinned
    values = _plan(catalog).values
    assert "@" not in str(_at(values, "toolkit").get("version", "")), values["toolkit"]


def test_the_drivers_stay_by_tag(pinned: tuple[Catalog, dict[str, str]]) -> None:
    """NVIDIA's controller appends kernel and OS to the driver's tag: a digest cannot name it."""
    catalog, _ = pinned
    for body in (node(), ubuntu_node()):
        driver = _plan(catalog, None, body).values.get("driver", {})
        assert "@" not in str(driver.get("version", "")), driver


def test_the_mirror_keeps_the_digest(pinned: tuple[Catalog, dict[str, str]]) -> None:
    catalog, digests = pinned
    plan = _plan(catalog, {"source": {"imageRegistry": MIRROR}})
    operator = _at(plan.values, "operator")
    assert operator["repository"].startswith(f"{MIRROR}/"), operator
    assert operator["version"].endswith(f"@{digests[_original(catalog, 'operator')]}")
    assert plan.rules_applied[-2:] == ("image-digests", "image-mirror")


def _original(catalog: Catalog, path: str) -> str:
    chart = catalog.chart(CHART)
    assert chart is not None
    (image,) = [i for i in chart.images if i.path == path]
    return image_reference(image.model_dump())


def test_without_the_file_every_image_keeps_its_tag(catalog: Catalog) -> None:
    """A source checkout: no image-digests.yaml, and the values the golden files hold."""
    assert catalog.image_digests == {}
    plan = _plan(catalog)
    assert "image-digests" not in plan.rules_applied
    assert "image-digests" not in plan.provenance.values()


@pytest.mark.parametrize(
    ("images", "said"),
    [
        ({"nvcr.io/nvidia/gpu-operator:v26.7.0": "sha256:abc"}, "String should match pattern"),
        ({"nvcr.io/nvidia/gpu-operator@sha256:" + "0" * 64: _digest(1)}, "pattern"),
        ({"gpu-operator:v26.7.0": _digest(1)}, "pattern"),
    ],
)
def test_a_bad_digest_file_stops_the_start_naming_it(
    tmp_path: Path, images: dict[str, str], said: str
) -> None:
    root = tmp_path / "values-rules"
    shutil.copytree(Catalog().root, root)
    (root / IMAGE_DIGESTS).write_text(yaml.safe_dump({"images": images}), encoding="utf-8")
    with pytest.raises(RuleError) as err:
        Catalog(root).check()
    assert IMAGE_DIGESTS in str(err.value), err.value
    assert said in str(err.value), err.value


def test_kyma_gpu_images_lists_the_pinned_references(
    pinned: tuple[Catalog, dict[str, str]],
) -> None:
    """`kyma-gpu images` of the plan: what the kubelet will pull, NFD's tag and digest too."""
    catalog, digests = pinned
    plan = _plan(catalog, {"source": {"imageRegistry": MIRROR}})
    listed = {i.component: i.reference for i in plan_images(plan, catalog)}
    nfd = listed["node-feature-discovery.image"]
    assert nfd.startswith(f"{MIRROR}/nfd/"), nfd
    assert nfd.endswith(f"@{digests[_original(catalog, 'node-feature-discovery.image')]}"), nfd
    assert "@" not in listed["toolkit"], listed["toolkit"]
