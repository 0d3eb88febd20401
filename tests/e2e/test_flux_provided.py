"""Flux coexistence, end to end, with the manager's own RBAC (its ServiceAccount's token):

- on a cluster without Flux, the manager installs its own (CRDs and two controllers in
  kyma-system, which the harness runs as the Deployments' ServiceAccounts, see
  tests/harness/provided_flux.py), and the GPU operator chart is installed through it;
- removing the module (deleting the Gpu) removes that Flux and its CRDs when nothing else
  uses them;
- and hands the CRDs over, untouched but unlabelled, when a user's HelmRelease uses them; the
  user's HelmRelease is left exactly as it was.

The cluster's-own-Flux case is every other e2e test (the harness installs Flux there);
tests/integration/test_flux_coexistence.py covers an incompatible Flux and the audit of
writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kyma_gpu.extensions.own_flux.bundle import FluxBundle
from kyma_gpu.plan.provision import PROVIDED_LABEL
from tests.harness.cluster import LocalCluster
from tests.harness.flux import FluxStack
from tests.harness.module import (
    MODULE_NAMESPACE,
    OperatorProcess,
    condition,
    forbidden_lines,
    gpu,
    install_crds,
    install_module_rbac,
    module_on,
    remove_flux_crds,
    service_account_kubeconfig,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

USERS = "team-flux"


def _crd(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    return cluster.get_object("crd", name)


def _ready(cluster: LocalCluster) -> bool:
    cond = condition(gpu(cluster), "Ready")
    return cond is not None and cond["status"] == "True"


@pytest.fixture(scope="module")
def no_flux(local_cluster: LocalCluster) -> Iterator[FluxStack]:
    remove_flux_crds(local_cluster)
    install_crds(local_cluster, flux=False)
    install_module_rbac(local_cluster)
    local_cluster.create_namespace(USERS)
    stack = FluxStack(local_cluster, provided=True)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()
        remove_flux_crds(local_cluster)  # later tests' Flux stacks install the harness's
        local_cluster.kubectl("delete", "namespace", USERS, "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(local_cluster: LocalCluster, no_flux: FluxStack) -> Iterator[OperatorProcess]:
    kubeconfig = service_account_kubeconfig(local_cluster)
    with module_on(local_cluster, name="operator-provided-flux", kubeconfig=kubeconfig,
                   flux_crds=False) as process:  # fmt: skip
        yield process


def _enable(cluster: LocalCluster, flux: FluxStack) -> None:
    source = {"chartRepository": flux.helm_repo_url, "insecure": True}
    cluster.apply({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                   "metadata": {"name": "gpu"}, "spec": {"source": source}})  # fmt: skip


def _enabled_through_own_flux(cluster: LocalCluster, flux: FluxStack) -> None:
    _enable(cluster, flux)
    wait_until(lambda: _ready(cluster), 240, "Gpu Ready through the module's own Flux")
    flux_cond = condition(gpu(cluster), "FluxAvailable")
    assert flux_cond is not None
    assert (flux_cond["status"], flux_cond["reason"]) == ("True", "ModuleFlux"), flux_cond
    assert flux.provided is not None
    assert flux.provided.running() == ["gpu-flux-helm-controller", "gpu-flux-source-controller"]
    for name in FluxBundle().crds():
        crd = _crd(cluster, name)
        assert crd is not None, name
        assert crd["metadata"]["labels"][PROVIDED_LABEL] == "provided"


def _disable(cluster: LocalCluster) -> None:
    cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    wait_until(lambda: gpu(cluster) is None, 240, "the Gpu released")


def test_without_flux_the_module_brings_its_own_and_removes_it(
    local_cluster: LocalCluster, no_flux: FluxStack, operator: OperatorProcess
) -> None:
    _enabled_through_own_flux(local_cluster, no_flux)
    _disable(local_cluster)
    wait_until(lambda: all(_crd(local_cluster, n) is None for n in FluxBundle().crds()), 60,
               "the module's Flux CRDs gone")  # fmt: skip
    deployments = local_cluster.kubectl("get", "deployments", "-n", MODULE_NAMESPACE, "-o",
                                        "name").stdout  # fmt: skip
    assert "gpu-flux" not in deployments
    runner = no_flux.provided
    assert runner is not None
    wait_until(lambda: not runner.running(), 30, "the Flux controllers stopped")
    log = operator.log(600)
    assert forbidden_lines(log) == [], log  # the manager's RBAC suffices for all of it


def test_removing_the_module_keeps_flux_crds_a_user_relies_on(
    local_cluster: LocalCluster, no_flux: FluxStack, operator: OperatorProcess
) -> None:
    _enabled_through_own_flux(local_cluster, no_flux)
    users_release = {
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "app", "namespace": USERS},
        "spec": {"interval": "10m", "suspend": True,
                 "chart": {"spec": {"chart": "app", "sourceRef": {"kind": "HelmRepository",
                                                                   "name": "theirs"}}}},
    }  # fmt: skip
    local_cluster.apply(users_release)
    before = local_cluster.get_object("helmreleases.helm.toolkit.fluxcd.io", "app", USERS)
    assert before is not None
    _disable(local_cluster)
    after = local_cluster.get_object("helmreleases.helm.toolkit.fluxcd.io", "app", USERS)
    assert after is not None, "the user's HelmRelease must survive the module's removal"
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    for name in FluxBundle().crds():
        crd = _crd(local_cluster, name)
        assert crd is not None, f"CRD {name} removed although a user's HelmRelease uses it"
        assert PROVIDED_LABEL not in (crd["metadata"].get("labels") or {}), name
    runner = no_flux.provided
    assert runner is not None
    wait_until(lambda: not runner.running(), 30, "the module's controllers stopped")
    events = local_cluster.kubectl("get", "events", "-n", MODULE_NAMESPACE, "-o", "json").stdout
    assert "FluxHandedOver" in events
    assert f"HelmRelease {USERS}/app" in events
