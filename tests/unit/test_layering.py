"""The pure core imports neither kopf nor the client; the layers only import downwards.

The contracts live in pyproject.toml ([tool.importlinter]); this test runs them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    assert lint_imports.is_file(), f"{lint_imports} is missing: install the dev extras"
    result = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
