"""The pure core imports neither kopf nor the client; the layers only import downwards; the
core names no extension.

The contracts live in pyproject.toml ([tool.importlinter]); this test runs them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kyma_gpu.extensions import EXTENSIONS, REGISTERED

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


def test_the_core_names_no_extension() -> None:
    """Issue 50, point 4: the core and the adapter name none of the extensions, in code or in
    words (their folders' names, their names), so deleting an extension's folder and its line
    in REGISTERED leaves nothing of it behind; the import contract "The core imports no
    extension" holds the imports. Only the registry (extensions/__init__.py) lists them."""
    names = {*REGISTERED, *(e.name for e in EXTENSIONS)}
    runtime = REPO / "operator" / "kyma_gpu"
    core = [p for p in runtime.rglob("*.py") if "extensions" not in p.relative_to(runtime).parts]
    found = [
        f"{path.relative_to(REPO)}:{number}: {name}"
        for path in core
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for name in names
        if name in line
    ]
    assert core
    assert not found, "the core names an extension:\n" + "\n".join(found)
