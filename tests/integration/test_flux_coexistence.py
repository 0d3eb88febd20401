"""The cluster's own Flux: used when compatible, refused with an Error when not, and in both
cases never written to. The audit log of the real API server is the witness.

(Without any Flux the manager installs its own: tests/e2e/test_flux_provided.py.)
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.harness.cluster import LocalCluster
from tests.harness.flux import flux_crd_files
from tests.harness.module import (
    OperatorProcess,
    condition,
    gpu,
    helm_release,
    install_crds,
    module_on,
    operator_writes,
    remove_flux_crds,
    wait_until,
)

pytestmark = pytest.mark.integration

SAMPLE = {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu", "metadata": {"name": "gpu"},
          "spec": {}}  # fmt: skip


def _flux_crds() -> dict[str, dict[str, Any]]:
    crds = [yaml.safe_load(path.read_text()) for path in flux_crd_files()]
    return {crd["metadata"]["name"]: crd for crd in crds}


def _old_helmrelease_crd() -> dict[str, Any]:
    """helmreleases of a Flux before 2.3: v2beta1 only, no v2."""
    crd = copy.deepcopy(_flux_crds()["helmreleases.helm.toolkit.fluxcd.io"])
    for version in crd["spec"]["versions"]:
        version["name"] = "v2beta1"
    return crd


def _foreign_writes(cluster: LocalCluster, since: int) -> list[dict[str, Any]]:
    """The operator's writes (after the first `since` of the session) to anything but its
    Gpu and its own Flux objects."""
    own = {"gpus", "events", "leases", "helmreleases", "helmrepositories", "ocirepositories"}
    return [w for w in operator_writes(cluster)[since:] if w["resource"] not in own]


@pytest.fixture
def foreign_flux(local_cluster: LocalCluster) -> Iterator[int]:
    """No Flux yet (the test installs its kind of Flux); yields the operator writes so far."""
    remove_flux_crds(local_cluster)
    install_crds(local_cluster, flux=False)
    yield len(operator_writes(local_cluster))
    remove_flux_crds(local_cluster)


def _error_of(cluster: LocalCluster) -> dict[str, Any]:
    def ready_error() -> dict[str, Any] | None:
        cond = condition(gpu(cluster), "Ready")
        return cond if cond and cond["reason"] == "FluxIncompatible" else None

    found = wait_until(ready_error, 60, "Ready=False FluxIncompatible")
    assert (gpu(cluster) or {})["status"]["state"] == "Error"
    return found


@contextlib.contextmanager
def _running(cluster: LocalCluster, name: str) -> Iterator[OperatorProcess]:
    with module_on(cluster, name=name, flux_crds=False) as process:
        cluster.apply(copy.deepcopy(SAMPLE))
        yield process
        # Released by this operator (a Gpu left with its finalizer would greet the next test).
        cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
        wait_until(lambda: gpu(cluster) is None, 60, "the Gpu released")


def test_a_flux_too_old_is_an_error_and_is_never_written(
    local_cluster: LocalCluster, foreign_flux: int
) -> None:
    crds = _flux_crds()
    crds["helmreleases.helm.toolkit.fluxcd.io"] = _old_helmrelease_crd()
    local_cluster.apply(*crds.values())
    local_cluster.wait_crds_established(*crds)
    with _running(local_cluster, "operator-old-flux"):
        ready = _error_of(local_cluster)
        assert "helm.toolkit.fluxcd.io/v2" in ready["message"], ready
        assert "Flux 2.6 or newer" in ready["message"], ready
        assert helm_release(local_cluster) is None
    assert _foreign_writes(local_cluster, foreign_flux) == []
    labels = local_cluster.get_object("crd", "helmreleases.helm.toolkit.fluxcd.io") or {}
    assert "gpu.kyma-project.io/flux" not in (labels["metadata"].get("labels") or {})


def test_a_partial_flux_is_an_error_and_is_never_completed(
    local_cluster: LocalCluster, foreign_flux: int
) -> None:
    helm_only = _flux_crds()["helmreleases.helm.toolkit.fluxcd.io"]
    local_cluster.apply(helm_only)
    local_cluster.wait_crds_established(helm_only["metadata"]["name"])
    with _running(local_cluster, "operator-partial-flux"):
        ready = _error_of(local_cluster)
        assert "helmrepositories.source.toolkit.fluxcd.io" in ready["message"], ready
    assert local_cluster.get_object("crd", "helmrepositories.source.toolkit.fluxcd.io") is None
    assert _foreign_writes(local_cluster, foreign_flux) == []


def test_a_compatible_flux_is_used_and_its_crds_are_not_touched(
    local_cluster: LocalCluster, foreign_flux: int
) -> None:
    install_crds(local_cluster)  # the harness's Flux CRDs: someone else's Flux
    with _running(local_cluster, "operator-cluster-flux"):
        wait_until(lambda: helm_release(local_cluster), 60, "the HelmRelease")

        def cluster_flux() -> dict[str, Any] | None:
            cond = condition(gpu(local_cluster), "FluxAvailable")
            return cond if cond and cond["reason"] == "ClusterFlux" else None

        wait_until(cluster_flux, 60, "FluxAvailable ClusterFlux")
        release = helm_release(local_cluster) or {}
        assert "sharding.fluxcd.io/key" not in release["metadata"]["labels"]
    assert _foreign_writes(local_cluster, foreign_flux) == []
