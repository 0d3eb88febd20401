"""The Gpu in the real Kyma dashboard (issue 52), seen in Debian's headless Chromium.

The dashboard is Busola built from ../shared/vendor/busola (tools/dashboard.sh, `make tools`),
its backend pointed at this cluster's API server with the admin's kubeconfig; the module runs
as in tests/e2e/test_gpu_health.py: the operator, real Flux, the real NVIDIA controller, the
demo fleet (two g6.xlarge with one L4 each, one m5.large), and the Gpu's extension applied from
config/ui-extension as config/default ships it. The browser does what a user does and the test
waits for what the page shows, never for a clock:

1. the form: a chart value of the wrong type is refused, the dialog shows the API server's own
   message for it; without it the form creates the Gpu, and the API server has it;
2. the list shows the live state and GPU counts, as `kubectl get gpu` has them;
3. after a GPU breaks as the user guide describes (WITHDRAW_GPU), the details name that node
   unhealthy, and the node is healthy there again once the GPU is back;
4. while a deletion waits for a user's GPU pod, the details say so and name the pod; once the
   pod is gone, the Gpu goes.

Screenshots of the list and the details go into the cluster's log folder, and into
docs/images/ when KYMA_GPU_DASHBOARD_SCREENSHOTS names that folder (`make
dashboard-screenshots`, for docs/user-guide.md#kyma-dashboard). The dashboard's log
(logs/dashboard.log) and the browser's (logs/browser.log) are in a failure's report.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.harness.cluster import LocalCluster
from tests.harness.dashboard import EXTENSION, Browser, Dashboard
from tests.harness.flux import FluxStack
from tests.harness.module import condition, gpu, module_on, wait_until
from tests.harness.nodes import DEMO_FLEET

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SCREENSHOTS = os.environ.get("KYMA_GPU_DASHBOARD_SCREENSHOTS", "")
"""A folder for the screenshots besides the log folder (`make dashboard-screenshots`)."""
SHOWS = 60_000
"""Milliseconds the page may take to show what the cluster says: Busola polls the API (a few
seconds); the status follows a Node's change within one pass."""
READY = 300
"""Seconds from the Gpu's creation to Ready: Flux installs the chart, the NVIDIA controller
deploys the operands (about 35 s here)."""
WITHDRAW_GPU = (
    "kubectl patch node <node> --subresource=status --type=merge "
    """-p '{"status":{"allocatable":{"nvidia.com/gpu":"0"}}}'"""
)
"""docs/user-guide.md's "Break a GPU on the demo cluster": what the device plugin does."""
NOT_A_QUANTITY = "lots"
UNHEALTHY = re.compile(r"gpus\s*unhealthy", re.IGNORECASE)
"""How the details' badge writes GpusUnhealthy (Busola splits the words; CSS capitalises)."""
WORKLOADS_RUNNING = re.compile(r"gpu\s*workloads\s*running", re.IGNORECASE)
CPU = "spec.values.operator.resources.requests.cpu"


def _gpu_nodes() -> list[str]:
    items = yaml.safe_load(DEMO_FLEET.read_text())["items"]
    return sorted(n["metadata"]["name"] for n in items
                  if "nvidia.com/gpu" in n["status"].get("capacity", {}))  # fmt: skip


BROKEN = _gpu_nodes()[0]


@dataclass
class Stack:
    cluster: LocalCluster
    flux: FluxStack
    dashboard: Dashboard
    browser: Browser


@pytest.fixture(scope="module")
def stack(local_cluster: LocalCluster, flux_stack: FluxStack) -> Iterator[Stack]:
    """The module without a Gpu, its extension, the dashboard and a browser logged in."""
    from playwright.sync_api import expect

    with module_on(local_cluster, name="operator-dashboard"):
        local_cluster.kubectl("apply", "--server-side", "--field-manager=kyma-gpu-tests",
                              "-k", str(EXTENSION))  # fmt: skip
        with (
            Dashboard.for_cluster(local_cluster) as dashboard,
            Browser(local_cluster.log_dir / "browser.log",
                    local_cluster.workdir / "browser-profile") as browser,
        ):  # fmt: skip
            browser.page.goto(dashboard.login_url)
            expect(browser.page.get_by_text("Cluster Overview").first).to_be_visible(timeout=SHOWS)
            yield Stack(local_cluster, flux_stack, dashboard, browser)


def _screenshot(stack: Stack, name: str) -> None:
    path = stack.cluster.log_dir / name
    stack.browser.page.screenshot(path=str(path))
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, Path(SCREENSHOTS) / name)


def _api_says(cluster: LocalCluster, manifest: Mapping[str, object]) -> str:
    """What the API server answers to creating ``manifest`` (a dry run), past the field."""
    path = cluster.workdir / "refused-gpu.yaml"
    path.write_text(yaml.safe_dump(manifest))
    refused = cluster.kubectl("create", "--dry-run=server", "-f", str(path), check=False)
    assert refused.returncode != 0, f"the API server accepted {manifest}"
    return refused.stderr.split(f"{CPU}: ", 1)[1].strip()


def _expand(stack: Stack, *groups: str) -> None:
    """Open the form's groups, each inside the one before (Busola's FormGroup panels)."""
    scope = stack.browser.page.locator(":root")
    for group in groups:
        scope = scope.locator(f'ui5-panel[data-testid="{group}"]').first
        if scope.get_attribute("collapsed") is not None:
            scope.locator("[slot=header]").first.click()


def _fill_the_form(stack: Stack, cpu: str) -> None:
    """The chart from the local Helm repository (plain http, so insecure), and a CPU request
    for the GPU operator's controller."""
    from playwright.sync_api import expect

    page = stack.browser.page
    page.goto(stack.dashboard.cluster_url("gpus"))
    page.locator('ui5-button:has-text("Create")').first.click()
    _expand(stack, "source")
    page.locator('[data-testid="spec.source.chartRepository"] input').fill(stack.flux.helm_repo_url)
    insecure = page.locator('ui5-switch[data-testid="spec.source.insecure"]')
    insecure.locator(".ui5-switch-root").click()
    expect(insecure).to_have_attribute("checked", "")
    _expand(stack, "values", "operator", "resources", "requests")
    page.locator(f'[data-testid="{CPU}"] input').fill(cpu)


def _create(stack: Stack) -> None:
    stack.browser.page.locator(
        'ui5-bar[design=FloatingFooter] ui5-button:has-text("Create")'
    ).click()


def test_the_form_refuses_a_value_of_the_wrong_type_and_creates_a_valid_gpu(stack: Stack) -> None:
    from playwright.sync_api import expect

    source = {"chartRepository": stack.flux.helm_repo_url, "insecure": True}
    refused = {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
               "metadata": {"name": "gpu"},
               "spec": {"source": source,
                        "values": {"operator": {"resources": {"requests": {
                            "cpu": NOT_A_QUANTITY}}}}}}  # fmt: skip
    message = _api_says(stack.cluster, refused)
    _fill_the_form(stack, NOT_A_QUANTITY)
    _create(stack)
    dialog = stack.browser.page.locator("ui5-dialog[open]").filter(has_text="Creation failed")
    expect(dialog).to_contain_text(CPU, timeout=SHOWS)
    dialog.get_by_text("Show More").click()  # the dialog cuts a long message short
    expect(dialog).to_contain_text(message)
    assert gpu(stack.cluster) is None, "the API server stored the refused Gpu"
    dialog.locator('ui5-button:has-text("Close")').click()
    stack.browser.page.locator(f'[data-testid="{CPU}"] input').fill("")
    _create(stack)
    created = wait_until(lambda: gpu(stack.cluster), 60, "the Gpu the form created")
    assert created["spec"]["source"] == {**source, "chartName": "gpu-operator"}, created["spec"]
    assert NOT_A_QUANTITY not in yaml.safe_dump(created["spec"]), created["spec"]


def _ready(cluster: LocalCluster) -> dict[str, object] | None:
    status = (gpu(cluster) or {}).get("status") or {}
    return status if status.get("state") == "Ready" and status.get("gpus") == "2/2" else None


def test_the_list_shows_the_live_state_and_gpu_counts(stack: Stack) -> None:
    from playwright.sync_api import expect

    status = wait_until(lambda: _ready(stack.cluster), READY, "the Gpu Ready, 2/2 GPUs healthy")
    page = stack.browser.page
    page.goto(stack.dashboard.cluster_url("gpus"))
    row = page.locator("ui5-table-row").filter(has_text="gpu")
    for column in ("state", "readyNodes", "gpus", "driverMode", "chartVersion"):
        expect(row).to_contain_text(str(status[column]), timeout=SHOWS)
    _screenshot(stack, "dashboard-list.png")


def test_the_details_name_a_broken_gpu_until_it_is_back(stack: Stack) -> None:
    from playwright.sync_api import expect

    wait_until(lambda: _ready(stack.cluster), READY, "the Gpu Ready, 2/2 GPUs healthy")
    page = stack.browser.page
    page.goto(stack.dashboard.cluster_url("gpus/gpu"))
    nodes = page.locator("ui5-table").filter(has_text="Machine type")
    row = nodes.locator("ui5-table-row").filter(has_text=BROKEN)
    expect(row).to_contain_text("Healthy", timeout=SHOWS)
    _set_allocatable(stack.cluster, BROKEN, "0")
    try:
        expect(row).to_contain_text(UNHEALTHY, timeout=SHOWS)
        unhealthy = page.locator("ui5-table").filter(has_text="What was seen")
        expect(unhealthy).to_contain_text(BROKEN)
        assert (condition(gpu(stack.cluster), "GpusHealthy") or {}).get("status") == "False"
        page.set_viewport_size({"width": 1600, "height": 2000})
        _screenshot(stack, "dashboard-details.png")
        page.set_viewport_size({"width": 1600, "height": 1000})
    finally:
        _set_allocatable(stack.cluster, BROKEN, "1")
    expect(row).not_to_contain_text(UNHEALTHY, timeout=SHOWS)
    expect(row).to_contain_text("Healthy")


def _set_allocatable(cluster: LocalCluster, node: str, gpus: str) -> None:
    """The user guide's line (WITHDRAW_GPU), with this node and count."""
    line = WITHDRAW_GPU.replace("<node>", node).replace('"0"', f'"{gpus}"')
    cluster.kubectl(*shlex.split(line)[1:])


def test_the_details_show_what_a_deletion_waits_for(stack: Stack, namespace: str) -> None:
    from playwright.sync_api import expect

    wait_until(lambda: _ready(stack.cluster), READY, "the Gpu Ready, 2/2 GPUs healthy")
    gpus = {"limits": {"nvidia.com/gpu": "1"}}
    container = {"name": "c", "image": "cuda:12", "resources": gpus}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": namespace},
           "spec": {"containers": [container]}}  # fmt: skip
    stack.cluster.apply(pod)
    wait_until(lambda: _phase(stack.cluster, namespace) == "Running", 60, "the GPU pod Running")
    page = stack.browser.page
    page.goto(stack.dashboard.cluster_url("gpus/gpu"))
    expect(page.get_by_text("GPU nodes", exact=True).first).to_be_visible(timeout=SHOWS)
    stack.cluster.kubectl("delete", "gpus.gpu.kyma-project.io", "gpu", "--wait=false")
    expect(page.get_by_text(WORKLOADS_RUNNING).first).to_be_visible(timeout=SHOWS)
    expect(page.get_by_text(f"{namespace}/train").first).to_be_visible()
    stack.cluster.kubectl("delete", "pod", "train", "-n", namespace, "--grace-period=0",
                          "--force", "--wait=true")  # fmt: skip
    wait_until(lambda: gpu(stack.cluster) is None, READY, "the Gpu gone once the pod went")


def _phase(cluster: LocalCluster, namespace: str) -> str | None:
    pod = cluster.get_object("pod", "train", namespace)
    return ((pod or {}).get("status") or {}).get("phase")
