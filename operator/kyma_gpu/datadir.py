"""Where the declarative data of values-rules/ is: one answer for every layer that reads it
(the rules, and the API's own allowlist of chart values)."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

ENV_RULES_DIR = "KYMA_GPU_RULES_DIR"
PACKAGE_DATA = "values-rules"
"""values-rules/ inside the installed package (pyproject: hatch force-include)."""


def default_rules_dir() -> Path:
    """$KYMA_GPU_RULES_DIR; else the package data of the installed package; else, in a source
    checkout (an editable install), values-rules/ next to operator/."""
    env = os.environ.get(ENV_RULES_DIR)
    if env:
        return Path(env)
    package = Path(str(files("kyma_gpu")))
    shipped = package / PACKAGE_DATA
    return shipped if shipped.is_dir() else package.parent.parent / PACKAGE_DATA
