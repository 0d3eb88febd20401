"""Which Flux the module relies on (plan/provision.py): the table of which Flux; and of the
module's own Flux (extensions/own_flux/: bundle.py, the bundle; machine.py), the sharding of
the module's objects and the removal decision."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from kyma_gpu.extensions.own_flux.bundle import (
    IMAGE_ENV,
    MARKER_CRD,
    MIRROR_LABEL,
    MIRROR_VALUE,
    SHARD,
    SHARD_LABEL,
    FluxBundle,
    FluxImages,
)
from kyma_gpu.extensions.own_flux.machine import Leftover, Removal, removal, shard
from kyma_gpu.plan.provision import (
    BUNDLE_HASH,
    PROVIDED,
    PROVIDED_LABEL,
    REQUIRED_APIS,
    Api,
    CrdFacts,
    FluxApi,
    FluxMode,
    crd_facts,
    which_flux,
)


def bundle_images(images: FluxImages | None = None) -> dict[str, str]:
    """Controller -> the image the Flux bundle deploys it with."""
    return {
        c["image"].rsplit("@", 1)[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]: c["image"]
        for o in FluxBundle(images or FluxImages()).objects()
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    }


HR, REPO, OCI = REQUIRED_APIS


def api(crds: dict[str, CrdFacts], **apis: Api) -> FluxApi:
    states = {name: apis.get(name.split(".")[0], Api.SERVED) for name in REQUIRED_APIS}
    return FluxApi(crds=crds, apis=states)


def foreign(*names: str) -> dict[str, CrdFacts]:
    return {name: CrdFacts(uid=name) for name in names}


def ours(*names: str, digest: str | None = None) -> dict[str, CrdFacts]:
    return {name: CrdFacts(uid=name, provided=True, bundle_hash=digest) for name in names}


@pytest.mark.parametrize(
    ("flux", "mode", "served", "says"),
    [
        pytest.param(FluxApi(synced=False), FluxMode.UNKNOWN, False, "not observed", id="unsynced"),
        pytest.param(
            api(
                {}, helmreleases=Api.ABSENT, helmrepositories=Api.ABSENT, ocirepositories=Api.ABSENT
            ),
            FluxMode.ABSENT,
            False,
            "installs its own",
            id="no-flux",
        ),
        pytest.param(
            api(foreign(HR, REPO, OCI)), FluxMode.EXTERNAL, True, "cluster's Flux", id="compatible"
        ),
        pytest.param(
            api(foreign(HR, REPO, OCI), helmreleases=Api.UNKNOWN),
            FluxMode.EXTERNAL,
            False,
            "cluster's Flux",
            id="compatible-not-listed-yet",
        ),
        pytest.param(
            api(foreign(HR, REPO, OCI), helmreleases=Api.NOT_SERVED),
            FluxMode.INCOMPATIBLE,
            False,
            f"{HR} at helm.toolkit.fluxcd.io/v2",
            id="too-old",
        ),
        pytest.param(
            api(foreign(HR)), FluxMode.INCOMPATIBLE, False, f"lacks the CRDs {REPO}", id="partial"
        ),
        pytest.param(
            api(ours(HR, REPO, OCI)), FluxMode.PROVIDED, True, "module's own Flux", id="ours"
        ),
        pytest.param(
            api(ours(HR), helmrepositories=Api.ABSENT),
            FluxMode.PROVIDED,
            False,
            "installing",
            id="ours-partly-there",
        ),
    ],
)
def test_which_flux(flux: FluxApi, mode: FluxMode, served: bool, says: str) -> None:
    found = which_flux(flux)
    assert (found.mode, found.served) == (mode, served)
    assert says in found.message


def test_the_bundle_is_the_rendered_flux_base_with_its_hash_and_the_marker_last() -> None:
    objects = FluxBundle().objects()
    assert objects[-1]["metadata"]["name"] == MARKER_CRD
    assert {o["metadata"]["annotations"][BUNDLE_HASH] for o in objects} == {FluxBundle().hash}
    assert all(o["metadata"]["labels"][PROVIDED_LABEL] == PROVIDED for o in objects)
    assert len(FluxBundle().crds()) == 7
    assert set(REQUIRED_APIS) <= set(FluxBundle().crds())
    kinds = sorted({o["kind"] for o in FluxBundle().workloads()})
    assert kinds == ["Deployment"]  # the rest ships with the module (flux/access, issue 32)
    namespaces = {o["metadata"].get("namespace") for o in FluxBundle().workloads()}
    assert namespaces == {"kyma-system"}
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]


def test_the_bundle_controllers_see_only_the_module_shard_in_kyma_system() -> None:
    for dep in (o for o in FluxBundle().objects() if o["kind"] == "Deployment"):
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--watch-all-namespaces=false" in args
        assert f"--watch-label-selector={SHARD_LABEL}={SHARD}" in args


def test_bundle_current_reads_the_marker_crd() -> None:
    assert FluxBundle().current(api(ours(HR, digest=FluxBundle().hash)))
    assert not FluxBundle().current(api(ours(HR, digest="older")))
    assert not FluxBundle().current(api({}))


def test_localised_flux_images_are_deployed_and_change_the_hash() -> None:
    """The manager's environment names the controllers' images (what KLM localises)."""
    mirror = "registry.example.internal/mirror/fluxcd"
    env = {IMAGE_ENV["helm-controller"]: f"{mirror}/helm-controller:v1.6.4"}
    images = FluxImages.from_env(env)
    deployed = bundle_images(images)
    assert deployed["helm-controller"] == f"{mirror}/helm-controller:v1.6.4"
    assert deployed["source-controller"] == bundle_images()["source-controller"]
    assert FluxBundle(images).hash != FluxBundle().hash
    assert {o["metadata"]["annotations"][BUNDLE_HASH] for o in FluxBundle(images).objects()} == {
        FluxBundle(images).hash
    }
    assert not FluxBundle(images).current(api(ours(HR, digest=FluxBundle().hash)))
    assert FluxBundle(images).current(api(ours(HR, digest=FluxBundle(images).hash)))
    assert FluxImages.from_env({}) == FluxImages()
    assert FluxBundle(FluxImages.from_env({})).objects() == FluxBundle().objects()


def test_a_mirrored_controller_is_labelled_for_the_mirror_policy() -> None:
    """Issue 32: the admission policy kyma-gpu-manager-mirrors holds a Deployment whose image
    is not the bundle's to a registry mirror an administrator lists; the label selects it."""
    mirror = "registry.example.internal/mirror/fluxcd/helm-controller:v1.6.4"
    images = FluxImages.from_env({IMAGE_ENV["helm-controller"]: mirror})
    labels = {
        o["metadata"]["name"]: o["metadata"].get("labels", {}) for o in FluxBundle(images).objects()
    }
    assert labels["gpu-flux-helm-controller"][MIRROR_LABEL] == MIRROR_VALUE
    assert MIRROR_LABEL not in labels["gpu-flux-source-controller"]
    same = FluxImages.from_env({IMAGE_ENV["helm-controller"]: bundle_images()["helm-controller"]})
    assert all(
        MIRROR_LABEL not in o["metadata"].get("labels", {}) for o in FluxBundle(same).objects()
    )
    assert all(MIRROR_LABEL not in o["metadata"].get("labels", {}) for o in FluxBundle().objects())


def test_crd_facts_from_metadata() -> None:
    meta = {
        "uid": "u",
        "labels": {PROVIDED_LABEL: PROVIDED},
        "annotations": {BUNDLE_HASH: "h"},
        "deletionTimestamp": "2026-12-01T00:00:00Z",
    }
    assert crd_facts(meta) == CrdFacts("u", provided=True, bundle_hash="h", deleting=True)
    assert crd_facts({"uid": "u"}) == CrdFacts("u")


def test_shard_labels_sources_releases_and_their_helmcharts_without_changing_the_plan() -> None:
    release: dict[str, Any] = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
               "metadata": {"name": "r", "labels": {"a": "b"}},
               "spec": {"chart": {"spec": {"chart": "c"}}}}  # fmt: skip
    source: dict[str, Any] = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
              "metadata": {"name": "s"}, "spec": {}}  # fmt: skip
    sharded_release, sharded_source = shard([release, source])
    assert sharded_release["metadata"]["labels"] == {"a": "b", SHARD_LABEL: SHARD}
    assert sharded_release["spec"]["chart"]["metadata"]["labels"] == {SHARD_LABEL: SHARD}
    assert sharded_source["metadata"]["labels"] == {SHARD_LABEL: SHARD}
    assert "metadata" not in release["spec"]["chart"]  # the input is not changed
    assert release["metadata"]["labels"] == {"a": "b"}


@pytest.mark.parametrize(
    ("leftovers", "expected"),
    [
        pytest.param([], Removal.DELETE_CRDS, id="nothing-left"),
        pytest.param(
            [Leftover("HelmRelease", "team/app", False)], Removal.HAND_OVER, id="a-users-release"
        ),
        pytest.param(
            [Leftover("HelmRelease", "team/app", True)],
            Removal.HAND_OVER,
            id="a-users-release-terminating",
        ),
        pytest.param(
            [
                Leftover("HelmChart", "kyma-system/kyma-system-gpu-operator", True),
                Leftover("HelmRelease", "team/app", False),
            ],
            Removal.WAIT,
            id="ours-terminating",
        ),
    ],
)
def test_removal(leftovers: list[Leftover], expected: Removal) -> None:
    assert removal(leftovers, "kyma-system") is expected


_READS = """
import importlib, pkgutil, sys

opened = []
sys.addaudithook(lambda event, args: opened.append(args[0]) if event == "open"
                 and str(args[0]).endswith("own_flux/flux.yaml") else None)
import kyma_gpu
for info in pkgutil.walk_packages(kyma_gpu.__path__, "kyma_gpu."):
    importlib.import_module(info.name)
from kyma_gpu.extensions import EXTENSIONS
from kyma_gpu.plan.provision import FluxApi

configs = [e.config({}) for e in EXTENSIONS if e.config is not None]
print(len(opened))
bundle = configs[0].bundle
bundle.current(FluxApi())
bundle.objects(), bundle.crds(), bundle.workloads(), bundle.hash
print(len(opened))
"""


def test_the_bundle_is_read_when_first_needed_not_at_import() -> None:
    """Issue 50, point 5: importing every module of the manager and building the extensions'
    configurations reads no bundle (a cluster with a Flux of its own never needs it); the
    first question to the bundle reads it, and the answers after it read nothing again."""
    ran = subprocess.run([sys.executable, "-c", _READS], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    assert ran.stdout.split() == ["0", "1"], ran.stderr
