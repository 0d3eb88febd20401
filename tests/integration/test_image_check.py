"""`kyma-gpu images --check` against a real registry (distribution's, tools/registry): it names
the one image a mirror lacks, exits 1, and exits 0 once the mirror holds everything. Nothing is
pulled: the check sends one HEAD request for each manifest (kyma_gpu_tools/registry.py).

The images are stand-ins (an empty config, no layers) under the real references of a plan: the
check reads manifests, never content.
"""

from __future__ import annotations

import hashlib
import io
import urllib.request
from pathlib import Path

import pytest

from kyma_gpu_tools.cli import main
from kyma_gpu_tools.registry import Presence, manifest_digest, presence
from tests.harness.cluster import LocalCluster
from tests.harness.klm import Registry

pytestmark = pytest.mark.integration

SCENARIO = Path(__file__).resolve().parents[1] / "golden" / "scenarios" / "sovereign-mirror"


def images(*extra: str) -> tuple[int, str]:
    out = io.StringIO()
    args = ["images", "-f", str(SCENARIO / "gpu.yaml"), "--nodes", str(SCENARIO / "nodes.yaml"),
            "--sources", str(SCENARIO / "sources.yaml"), *extra]  # fmt: skip
    code = main(args, stdin=io.StringIO(), stdout=out, stderr=io.StringIO())
    return code, out.getvalue()


@pytest.fixture(scope="module")
def registry(local_cluster: LocalCluster) -> Registry:
    return Registry(local_cluster).start()


def test_the_check_names_what_the_mirror_lacks(registry: Registry) -> None:
    mirror = f"{registry.host}/sovereign"
    code, listed = images("--mirror", mirror)
    assert code == 0, listed
    references = listed.split()
    assert len(references) >= 8, references  # the plan's operands, driver, manager, Flux
    assert all(r.startswith(f"{mirror}/") for r in references), references
    lacking, *held = references
    for reference in held:
        registry.push_stand_in(reference)

    code, report = images("--mirror", mirror, "--check", "--insecure")
    assert code == 1, report
    rows = [line.split("\t") for line in report.splitlines()[:-1]]
    assert [r[:2] for r in rows if r[0] != Presence.PRESENT] == [[Presence.MISSING, lacking]]
    assert report.count(str(Presence.PRESENT)) == len(held), report
    assert report.splitlines()[-1] == f"{len(references)} images, 1 missing or unreachable"

    registry.push_stand_in(lacking)
    code, report = images("--mirror", mirror, "--check", "--insecure")
    assert code == 0, report
    assert report.count(str(Presence.PRESENT)) == len(references), report


def test_an_unreachable_registry_is_not_present(registry: Registry) -> None:
    found, why = presence("127.0.0.1:9/nothing/here:v1", insecure=True)
    assert found is Presence.UNREACHABLE, why
    assert presence(f"{registry.host}/a/placeholder:590-<kernel>-gardenlinux0")[0] == (
        Presence.UNKNOWN
    )


def test_a_release_pins_the_manifest_the_registry_holds(registry: Registry) -> None:
    """What hack/module.py release records per operand: the digest of exactly that manifest."""
    one, two = f"{registry.host}/pin/one:v1", f"{registry.host}/pin/two:v1"
    for reference in (one, two):
        registry.push_stand_in(reference)
    digest, why = manifest_digest(one, insecure=True)
    assert digest is not None, why
    with urllib.request.urlopen(urllib.request.Request(
        f"{registry.url}/v2/pin/one/manifests/v1",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    ), timeout=10) as answer:  # fmt: skip
        assert digest == "sha256:" + hashlib.sha256(answer.read()).hexdigest()
    assert manifest_digest(two, insecure=True)[0] not in (None, digest), "a digest per image"
    assert presence(f"{one}@{digest}", insecure=True)[0] is Presence.PRESENT
    assert manifest_digest(f"{registry.host}/pin/three:v1", insecure=True) == (
        None, "the registry has no such manifest"
    )  # fmt: skip
