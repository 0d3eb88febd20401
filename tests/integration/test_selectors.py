"""The pod selectors of spec.driver.upgradePolicy are label selectors, checked against the real
API server's parser (k8s.io/apimachinery labels.Parse, which the NVIDIA upgrade controller's
pod lists go through).

For each selector of a table, and for random ones built from the grammar's tokens: the API
server's answer to a pod LIST with that `labelSelector` (200 or 400), the Gpu admission of the
same selector in both fields (the CRD's CEL rule, server-side dry run), and the model
(`kyma-gpu plan`) must agree. Accepting what the parser refuses is what broke the next driver
rollout (issue 20, finding 6); refusing more is allowed only where the table says so.
"""

from __future__ import annotations

import json
import random
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from pydantic import ValidationError

from kyma_gpu.api.admission import admission_message
from kyma_gpu.api.models import GpuSpec
from kyma_gpu.api.selectors import LABEL_SELECTOR_MESSAGE, is_label_selector
from tests.harness.cluster import LocalCluster
from tests.harness.module import CRD

pytestmark = pytest.mark.integration
# The harness applies the CRD and the policy on the shared per-worker cluster as this field
# manager (tests/harness/module.py); applying them as kubectl's default manager conflicts.
FIELD_MANAGER = ("--field-manager=kyma-gpu-tests", "--force-conflicts")

LONG_PREFIX = ".".join(["a" * 63] * 4)  # 255 characters: over the 253 of a DNS subdomain
# (selector, the API server parses it)
TABLE: list[tuple[str, bool]] = [
    ("app=training", True),
    ("app==training", True),
    ("app!=kyma-critical", True),
    ("app", True),
    ("!app", True),
    ("! app", True),
    ("app=", True),
    ("app in (batch,train)", True),
    ("app in (batch, train)", True),
    ("app notin (a,b),tier=gpu", True),
    ("app in ()", True),
    ("app in (,a)", True),
    ("app in (a,,b)", True),
    ("example.com/team=ml", True),
    ("kyma-project.io/gpu in (a.b,c_d)", True),
    ("priority>5", True),
    ("priority < 3", True),
    ("priority < -3", False),
    ("priority>+3", False),
    (" app = a , b != c ", True),
    ("a" * 63 + "=v", True),
    ("app=" + "v" * 63, True),
    ("app in (batch,train", False),
    ("team=ml=gpu", False),
    ("app==", True),
    ("app===x", False),
    ("app=a b", False),
    ("app in batch", False),
    ("appin (a)", False),
    ("=x", False),
    ("app,", False),
    (",app", False),
    ("app=a,,b=c", False),
    ("!app=x", False),
    ("Example.com/team=ml", False),
    ("a/b/c=d", False),
    ("/a=b", False),
    ("a" * 64 + "=v", False),
    ("app=" + "v" * 64, False),
    ("app=-x", False),
    ("app>x", False),
    ("app>", False),
    ("app=a/b", False),
    (LONG_PREFIX + "/x=y", False),
    ("{{ .Values.p | b64dec }}", False),
    ("app=x)", False),
]
REFUSED_MORE = [("app\t=x", True), ("app=x,\nb=y", True), ("  ", True)]
"""What the parser takes but the module refuses: tabs and line breaks (none reaches the chart's
values), and a selector of spaces only, which the parser reads as "every pod" while the empty
string means "none" to the NVIDIA upgrade controller's wait."""
TOKENS = ["app", "tier", "a.b/c", "x", "", " ", "=", "==", "!=", "!", ",", "in", "notin",
          "(", ")", "<", ">", "1", "-", "_", ".", "/", "A"]  # fmt: skip


def _random_selectors(count: int) -> list[str]:
    rng = random.Random(20)
    return ["".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 8))) for _ in range(count)]


def _request(cluster: LocalCluster, path: str, body: Any = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        cluster.server + path, data=data, method="GET" if body is None else "POST",
        headers={"Accept": "application/json", "Content-Type": "application/json"},
    )  # fmt: skip
    context: ssl.SSLContext = cluster.admin_tls()
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _parsed_by_api_server(cluster: LocalCluster, selector: str) -> bool:
    query = urllib.parse.urlencode({"labelSelector": selector, "limit": "1"})
    code = _request(cluster, f"/api/v1/namespaces/default/pods?{query}")
    assert code in (200, 400), f"unexpected answer {code} for {selector!r}"
    return code == 200


def _spec(selector: str) -> dict[str, Any]:
    policy = {"waitForCompletion": {"podSelector": selector}, "drain": {"podSelector": selector}}
    return {"driver": {"upgradePolicy": policy}}


def _admitted(cluster: LocalCluster, selector: str) -> bool:
    gpu = {"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
           "metadata": {"name": "gpu"}, "spec": _spec(selector)}  # fmt: skip
    code = _request(cluster, "/apis/gpu.kyma-project.io/v1beta1/gpus?dryRun=All", gpu)
    assert code in (201, 422), f"unexpected answer {code} for {selector!r}"
    return code == 201


def _model_accepts(selector: str) -> bool:
    try:
        GpuSpec.model_validate(_spec(selector))
    except ValidationError:
        return False
    return True


@pytest.fixture(scope="module")
def cluster(local_cluster: LocalCluster) -> LocalCluster:
    local_cluster.kubectl("apply", "--server-side", *FIELD_MANAGER, "-f", str(CRD))
    local_cluster.wait_crds_established("gpus.gpu.kyma-project.io")
    return local_cluster


def test_the_table_is_held_against_the_api_servers_parser(cluster: LocalCluster) -> None:
    """The table's second column is what the real parser says, so the table cannot drift."""
    wrong = [(s, p) for s, p in TABLE + REFUSED_MORE if _parsed_by_api_server(cluster, s) != p]
    assert wrong == [], f"the API server parses these otherwise: {wrong}"


@pytest.mark.parametrize(("selector", "parsed"), TABLE, ids=[repr(s)[:40] for s, _ in TABLE])
def test_module_accepts_what_the_parser_accepts(
    cluster: LocalCluster, selector: str, parsed: bool
) -> None:
    assert is_label_selector(selector) is parsed
    assert _admitted(cluster, selector) is parsed
    assert _model_accepts(selector) is parsed


@pytest.mark.parametrize(("selector", "parsed"), REFUSED_MORE)
def test_tabs_and_line_breaks_are_refused(
    cluster: LocalCluster, selector: str, parsed: bool
) -> None:
    assert parsed
    assert not _admitted(cluster, selector)
    assert not _model_accepts(selector)


def test_random_selectors_agree_with_the_parser(cluster: LocalCluster) -> None:
    """Never accept what the parser refuses; accept what it parses (but spaces only)."""
    samples = _random_selectors(400)
    disagree = []
    for selector in samples:
        api = _parsed_by_api_server(cluster, selector) and (selector == "" or selector.strip(" "))
        ours = is_label_selector(selector)
        if bool(api) != ours:
            disagree.append((selector, bool(api), ours))
    assert disagree == [], disagree
    accepted = [s for s in samples if is_label_selector(s)]
    assert 20 < len(accepted) < len(samples) - 20, "the sample must hold both kinds"
    for selector in accepted[:20] + [s for s in samples if not is_label_selector(s)][:20]:
        assert _admitted(cluster, selector) is is_label_selector(selector), selector


def test_admission_and_plan_say_the_same(cluster: LocalCluster) -> None:
    selector = "app in (batch,train"
    result = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", check=False,
        input=json.dumps({"apiVersion": "gpu.kyma-project.io/v1beta1", "kind": "Gpu",
                          "metadata": {"name": "gpu"}, "spec": _spec(selector)}),
    )  # fmt: skip
    path = "spec.driver.upgradePolicy.waitForCompletion.podSelector"
    expected = f"{path}: Invalid value: {json.dumps(selector)}: {LABEL_SELECTOR_MESSAGE}"
    assert expected in result.stderr, result.stderr
    with pytest.raises(ValidationError) as err:
        GpuSpec.model_validate(_spec(selector))
    assert admission_message(err.value).startswith(expected)
