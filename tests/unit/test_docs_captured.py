"""What the docs show a command print is what it printed: each marked block equals its file in
docs/captured/ (captured from the demo by `make docs-capture`, tests/harness/docs_capture.py),
the offline captures (`kyma-gpu plan`) equal what the CLI prints now, and every table of
`kubectl get gpu` in any doc, captured or not, has the CRD's columns. UPDATE_DOCS=1 writes the
offline captures and every marked block anew (no cluster needed; the demo's captures come
from `make docs-capture`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from tests.harness.captured import (
    CAPTURED,
    OFFLINE,
    ROOT,
    all_blocks,
    docs,
    run_offline,
    write_blocks,
    write_offline,
)

UPDATE = os.environ.get("UPDATE_DOCS") == "1"
CRD = ROOT / "config" / "crd" / "bases" / "gpu.kyma-project.io_gpus.yaml"


def test_update_first() -> None:
    """With UPDATE_DOCS=1: the offline captures and every marked block, written anew."""
    if UPDATE:
        write_offline()
        for doc in docs():
            write_blocks(doc)


def test_every_marked_block_is_its_captured_file() -> None:
    stale = [
        f"{b.doc.relative_to(ROOT)}:{b.line}: {b.capture}"
        for b in all_blocks()
        if not (ROOT / b.capture).is_file()
        or (ROOT / b.capture).read_text(encoding="utf-8") != b.body
    ]
    assert not stale, (
        "blocks that differ from their captured file (make docs-capture, or UPDATE_DOCS=1 "
        "pytest tests/unit/test_docs_captured.py to copy the files in):\n" + "\n".join(stale)
    )


def test_every_captured_file_is_shown_somewhere() -> None:
    shown = {b.capture for b in all_blocks()}
    files = {p.relative_to(ROOT).as_posix() for p in CAPTURED.glob("*.txt")}
    assert files - shown == set(), "captured files no doc shows"


@pytest.mark.parametrize("path", sorted(CAPTURED.glob(f"{OFFLINE}*.txt")), ids=lambda p: p.name)
def test_an_offline_capture_is_what_the_cli_prints_now(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert run_offline(text) == text, f"{path.name}: UPDATE_DOCS=1 pytest {__file__}"


# -- every `kubectl get gpu` table -----------------------------------------------------------


def _columns() -> tuple[list[str], list[str]]:
    """The CRD's printer columns as kubectl heads them: (default, -o wide)."""
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    default = ["NAME"] + [c["name"].upper() for c in columns if not c.get("priority")]
    wide = ["NAME"] + [c["name"].upper() for c in columns]
    return default, wide


HEADER = re.compile(r"^\s*NAME\s{2,}STATE\s{2,}")


def _headers() -> list[tuple[str, int, list[str]]]:
    found = []
    for doc in docs():
        if doc.name == "performance.md":  # the dated record: history
            continue
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if HEADER.match(line):
                cells = re.split(r"\s{2,}", line.strip())
                found.append((f"{doc.relative_to(ROOT)}:{number}", number, cells))
    return found


def test_every_gpu_table_has_the_crds_columns() -> None:
    """A column the CRD has and a doc's table lacks (GPUS, once) fails here; `...` stands for
    columns a doc leaves out on purpose."""
    default, wide = _columns()
    wrong = []
    for where, _, cells in _headers():
        if "..." in cells:
            shown = [c for c in cells if c != "..."]
            if [c for c in wide if c in shown] != shown:
                wrong.append(f"{where}: {cells}")
        elif cells not in (default, wide):
            wrong.append(f"{where}: {cells} (the CRD: {default}, -o wide: {wide})")
    assert not wrong, "tables of `kubectl get gpu` without the CRD's columns:\n" + "\n".join(wrong)
    assert len(_headers()) >= 3
