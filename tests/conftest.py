"""Top-level test configuration.

pytest accepts ``pytest_plugins`` only in the top-level conftest; the local
cluster harness fixtures (local_cluster, flux_stack, ...) are registered here
for every test directory, and so is the scheduler `make test` runs pytest-xdist
with (tests/harness/scheduling.py).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ["tests.harness.pytest_plugin"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole test files per worker (each worker has its own cluster), longest first."""
    from tests.harness.xdist_scheduler import LongestFileFirst

    return LongestFileFirst(config, log)
