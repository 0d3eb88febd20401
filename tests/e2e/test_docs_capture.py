"""The docs' captures are what the demo prints today: `make docs-capture`'s steps run again on a
cluster of their own, and each capture must say what docs/captured/ holds, up to what varies
from run to run (ages, pod IPs, which GPU node comes first; tests/harness/captured.py
`comparable`). A status message, a column or an Event that changed without `make
docs-capture` fails here, and so does a claim of the user guide the demo no longer shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.captured import CAPTURED, OFFLINE, comparable
from tests.harness.cli import ProgressPrinter
from tests.harness.docs_capture import capture_into

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def test_the_demo_prints_what_the_docs_show(tmp_path: Path) -> None:
    out = tmp_path / "captured"
    capture_into(out, ProgressPrinter(), workdir=tmp_path / "cluster")
    kept = sorted(p.name for p in CAPTURED.glob("*.txt") if not p.name.startswith(OFFLINE))
    assert sorted(p.name for p in out.glob("*.txt")) == kept
    stale = [
        name for name in kept
        if comparable(name, (out / name).read_text(encoding="utf-8"))
        != comparable(name, (CAPTURED / name).read_text(encoding="utf-8"))
    ]  # fmt: skip
    assert not stale, f"captures the demo no longer prints: {stale}; run `make docs-capture`"
