"""The docs say what the code does: the parts generated or counted from it are checked here, so
that they cannot drift again. Two blocks are generated (UPDATE_DOCS=1 rewrites them; review the
diff): the RBAC table of docs/operations.md (from config/rbac/) and the `kyma-gpu images` output
there. The rest is checked: the counts in docs/architecture.md, every reason of every condition
in the user guide's condition table, every preflight reason in the troubleshooting guide, and the
broken-rule-data example."""

from __future__ import annotations

import io
import os
import re
import shutil
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.api.conditions import ConditionType, PreflightReason
from kyma_gpu.extensions import MACHINE
from kyma_gpu.facts import OsFamily
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.rules.engine import RuleError
from kyma_gpu_tools.cli import main
from kyma_gpu_tools.reference import REASONS

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
UPDATE = os.environ.get("UPDATE_DOCS") == "1"
RBAC_BEGIN = "<!-- rbac-table: generated from config/rbac/ (tests/unit/test_docs.py) -->"
RBAC_END = "<!-- rbac-table end -->"
PHASES_BEGIN = (
    "<!-- phase-table: generated from machine.py ROWS and the extensions' rows "
    "(tests/unit/test_docs.py) -->"
)
PHASES_END = "<!-- phase-table end -->"
IMAGES = "$ .venv/bin/kyma-gpu images\n"


def _read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _replace_between(name: str, begin: str, end: str, body: str) -> None:
    text = _read(name)
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    newline = "" if begin.endswith("\n") else "\n"
    (DOCS / name).write_text(f"{head}{begin}{newline}{body}{end}{tail}", encoding="utf-8")


# -- the RBAC table ------------------------------------------------------------------------


def _rule(rule: dict[str, Any]) -> str:
    groups = [g or "core" for g in rule["apiGroups"]]
    resources = ", ".join(f"`{r}`" for r in rule["resources"])
    names = rule.get("resourceNames")
    only = f" on {', '.join(f'`{n}`' for n in names)} only" if names else ""
    return f"{resources} ({', '.join(groups)}): {', '.join(rule['verbs'])}{only}"


def _role_row(path: Path) -> str:
    role = next(d for d in yaml.safe_load_all(path.read_text("utf-8")) if "rules" in d)
    namespace = role["metadata"].get("namespace")
    subject = f"{role['kind']} `{role['metadata']['name']}`"
    subject += f" in `{namespace}`" if namespace else ""
    return f"| {subject} | {'; '.join(_rule(r) for r in role['rules'])} |"


def rbac_table() -> str:
    files = ("cluster_role.yaml", "role_kyma_system.yaml")
    rows = [_role_row(REPO / "config" / "rbac" / f) for f in files]
    return "| subject / scope | rights |\n|---|---|\n" + "\n".join(rows) + "\n"


def test_the_rbac_table_is_config_rbac() -> None:
    text = _read("operations.md")
    assert RBAC_BEGIN in text, "the markers of the generated table"
    assert RBAC_END in text
    if UPDATE:
        _replace_between("operations.md", RBAC_BEGIN, RBAC_END, rbac_table())
        return
    shown = text.split(RBAC_BEGIN, 1)[1].split(RBAC_END, 1)[0].strip("\n") + "\n"
    assert shown == rbac_table(), "docs/operations.md RBAC table: run UPDATE_DOCS=1 pytest"


def test_what_the_rbac_table_says_it_never_grants() -> None:
    """The 'never' line of the table: no Secrets, no writes to pods, no Node writes but the
    patches of node marks for GPU health (held by kyma-gpu-manager-nodes), no wildcards."""
    for name in ("cluster_role.yaml", "role_kyma_system.yaml"):
        path = REPO / "config" / "rbac" / name
        for doc in yaml.safe_load_all(path.read_text("utf-8")):
            for rule in (doc or {}).get("rules", []):
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
                assert "secrets" not in rule["resources"]
                if "pods" in rule["resources"]:
                    assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
                if {"nodes", "nodes/status"} & set(rule["resources"]):
                    allowed = {"get", "list", "watch", "patch"}
                    if "nodes/status" in rule["resources"]:
                        allowed = {"patch"}
                    assert set(rule["verbs"]) <= allowed, rule
                    assert set(rule["resources"]) <= {"nodes", "nodes/status"}, rule


# -- the `kyma-gpu images` output ------------------------------------------------------------


def images_output() -> str:
    out, err = io.StringIO(), io.StringIO()
    assert main(["images"], stdout=out, stderr=err) == 0, err.getvalue()
    return out.getvalue()


def test_the_images_output_shown_is_real() -> None:
    text = _read("operations.md")
    assert IMAGES in text
    if UPDATE:
        _replace_between("operations.md", IMAGES, "```", images_output())
        return
    shown = text.split(IMAGES, 1)[1].split("```", 1)[0]
    assert shown == images_output(), "docs/operations.md `kyma-gpu images`: UPDATE_DOCS=1 pytest"


# -- counts --------------------------------------------------------------------------------


def test_the_golden_scenario_count() -> None:
    scenarios = [p for p in (REPO / "tests" / "golden" / "scenarios").iterdir() if p.is_dir()]
    found = re.findall(r"`kyma-gpu plan` on (\d+) scenarios", _read("architecture.md"))
    assert found == [str(len(scenarios))]


def test_the_watch_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """One thread per observed resource: count the list-watches the informers start."""
    from kyma_gpu.observe.informers import Informers

    started: list[str] = []
    monkeypatch.setattr(Informers, "_start", lambda self, watch: started.append(watch.resource))

    class _Store:
        def listen(self, *args: Any) -> None:
            pass

    informers = Informers(reader=None, store=_Store(), loop=None)  # type: ignore[arg-type]
    informers.start(Catalog().machine_types, "kyma-system", "gpu-operator")
    words = {6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
    assert f"each informer is a thread\n  ({words[len(started)]}," in _read("architecture.md")


# -- reasons -------------------------------------------------------------------------------


def _condition_rows(text: str) -> dict[str, str]:
    section = text.split("### Conditions", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip().startswith("`"):
            rows[cells[1].strip().strip("`")] = cells[2]
    return rows


@pytest.mark.parametrize("condition", list(REASONS), ids=str)
def test_the_condition_table_lists_every_reason(condition: StrEnum) -> None:
    """Each condition's row (the core's and the registered extensions', `REASONS`) names every
    reason of its enum (conditions that share one enum: together); Preflight's finding reasons
    are troubleshooting.md's."""
    rows = _condition_rows(_read("user-guide.md"))
    assert str(condition) in rows, f"user-guide.md: no row for {condition}"
    reasons = REASONS[condition]
    wanted = [PreflightReason.PASSED] if condition is ConditionType.PREFLIGHT else list(reasons)
    sharing = [str(c) for c, enum in REASONS.items() if enum is reasons]
    shown = " ".join(rows.get(c, "") for c in sharing)
    missing = [str(r) for r in wanted if f"`{r}`" not in shown]
    assert not missing, f"user-guide.md, condition {condition}: reasons not listed: {missing}"


def test_troubleshooting_explains_every_preflight_reason() -> None:
    text = _read("troubleshooting.md")
    missing = [str(r) for r in PreflightReason
               if r is not PreflightReason.PASSED and f"`{r}`" not in text]  # fmt: skip
    assert not missing, f"troubleshooting.md does not name: {missing}"


def test_the_os_families_are_all_named() -> None:
    """The status field's docs and the user guide's detection table name every OS family."""
    from kyma_gpu.api.models import GpuNodeStatus

    described = GpuNodeStatus.model_fields["os"].description or ""
    guide = _read("user-guide.md")
    for family in OsFamily:
        assert family.value in described, family
        assert f"`{family.value}`" in guide, family


# -- the broken-rule-data example ----------------------------------------------------------


def test_the_broken_rule_data_example_is_what_the_manager_says(tmp_path: Path) -> None:
    root = tmp_path / "values-rules"
    shutil.copytree(REPO / "values-rules", root)
    path = root / "machine-types.yaml"
    text = path.read_text("utf-8")
    path.write_text(text.replace("      g6.xlarge: 1\n", "      g6.xlarge: 0\n", 1), "utf-8")
    with pytest.raises(RuleError) as caught:
        Catalog(root).check()
    said = f"kyma-gpu-manager: broken rule data: {caught.value}"
    said = said.replace(str(root), "/app/values-rules")
    assert f"`{said}`" in _read("troubleshooting.md")


def test_the_phase_table_is_the_machines() -> None:
    """docs/architecture.md's tables of the reconcile state machine are `machine.ROWS` and
    the registered extensions' rows (`MACHINE.phase_table`)."""
    if UPDATE:
        _replace_between("architecture.md", PHASES_BEGIN, PHASES_END, MACHINE.phase_table())
    text = _read("architecture.md")
    assert f"{PHASES_BEGIN}\n{MACHINE.phase_table()}{PHASES_END}" in text, (
        "architecture.md's phase table is stale: UPDATE_DOCS=1 pytest tests/unit/test_docs.py"
    )
