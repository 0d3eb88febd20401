"""The table of the module's accounts in docs/security.md holds on the real API server (issue 32).

Each row names an account, what RBAC must allow it and what it must refuse (`kubectl auth can-i`
probes, config/default installed as KLM installs it), and the tests that prove the rest
(admission). A row whose RBAC is the chart's has no probes here: its proof tests install or
stand in for the chart. A probe that answers otherwise, a proof file or a row that went
missing, fails: the table cannot drift from the code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from tests.harness.cluster import LocalCluster
from tests.harness.module import ROOT, install_crds, install_module_rbac

pytestmark = pytest.mark.integration

DOC = ROOT / "docs" / "security.md"
BEGIN = "<!-- accounts table: tests/integration/test_accounts.py parses it -->"
END = "<!-- end of accounts table -->"
CHARTS = "(the chart's RBAC)"


@dataclass(frozen=True)
class Row:
    account: str
    allowed: tuple[str, ...]
    refused: tuple[str, ...]
    proofs: tuple[str, ...]


def _codes(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"`([^`]+)`", cell))


def rows() -> list[Row]:
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text, f"{DOC}: the accounts table's markers"
    assert END in text, f"{DOC}: the accounts table's markers"
    table = text.split(BEGIN, 1)[1].split(END, 1)[0]
    out = []
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 6, line
        account = _codes(cells[0])[0].split(",")[0]
        allowed = () if cells[3] == CHARTS else _codes(cells[3])
        refused = () if cells[4] == CHARTS else _codes(cells[4])
        out.append(Row(account, allowed, refused, _codes(cells[5])))
    return out


ROWS = rows()


def test_the_table_names_every_account_of_the_module_and_the_chart() -> None:
    accounts = {r.account for r in ROWS}
    assert {"kyma-system/gpu-manager", "kyma-system/gpu-operator-release",
            "kyma-system/gpu-flux-helm-controller", "kyma-system/gpu-flux-source-controller",
            "gpu-operator/gpu-operator",
            "gpu-operator/gpu-operator-upgrade-crd-hook-sa"} <= accounts  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.account for r in ROWS])
def test_each_proof_exists(row: Row) -> None:
    assert row.proofs, row
    for proof in row.proofs:
        assert (ROOT / proof).is_file(), proof


@pytest.fixture(scope="module")
def cluster(local_cluster: LocalCluster) -> LocalCluster:
    install_crds(local_cluster)
    install_module_rbac(local_cluster)
    return local_cluster


def _probes() -> list[object]:
    out: list[object] = []
    for row in ROWS:
        for answer, probes in (("yes", row.allowed), ("no", row.refused)):
            out += [pytest.param(row.account, p, answer, id=f"{row.account}:{answer}:{p}")
                    for p in probes]  # fmt: skip
    return out


@pytest.mark.parametrize(("account", "probe", "answer"), _probes())
def test_rbac_answers_as_the_table_says(
    cluster: LocalCluster, account: str, probe: str, answer: str
) -> None:
    namespace, name = account.split("/")
    args = probe.split()
    if "-n" not in args:
        args.append("--all-namespaces")
    user = f"--as=system:serviceaccount:{namespace}:{name}"
    said = cluster.kubectl("auth", "can-i", *args, user, check=False)
    assert "resource type" not in said.stderr, (probe, said.stderr)  # a typo must not say "no"
    assert said.stdout.strip() == answer, (account, probe, said.stdout, said.stderr)
