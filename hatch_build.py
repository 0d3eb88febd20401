"""The console scripts, as a hatch metadata hook: kyma-gpu-manager (kyma_gpu/main.py) always,
kyma-gpu (the release tooling's CLI, kyma_gpu_tools/cli.py) only when the build has the tools
package. The manager's image builds from a context without it (.dockerignore), so its wheel
holds the runtime package and the one script that runs it; `pip install .` in a clone and the
editable install of `make setup` get both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.metadata.plugin.interface import MetadataHookInterface

MANAGER = {"kyma-gpu-manager": "kyma_gpu.main:main"}
TOOLS = {"kyma-gpu": "kyma_gpu_tools.cli:main"}


class CustomMetadataHook(MetadataHookInterface):
    def update(self, metadata: dict[str, Any]) -> None:
        with_tools = (Path(self.root) / "operator" / "kyma_gpu_tools").is_dir()
        metadata["scripts"] = {**MANAGER, **(TOOLS if with_tools else {})}
