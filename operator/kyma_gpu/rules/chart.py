"""Image references as values-rules/charts/<version>.yaml records them (`kyma-gpu chart-facts`
writes those files: kyma_gpu_tools/chart_facts.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def image_reference(image: Mapping[str, Any]) -> str:
    """repository/image:version (NFD style images carry the name in the repository)."""
    repo = str(image["repository"]).rstrip("/")
    name = image.get("image")
    ref = f"{repo}/{name}" if name else repo
    version = image.get("version")
    return f"{ref}:{version}" if version else ref
