"""Top-level test configuration.

pytest accepts ``pytest_plugins`` only in the top-level conftest; the local
cluster harness fixtures (local_cluster, flux_stack, ...) are registered here
for every test directory, and so is the scheduler `make test` runs pytest-xdist
with (tests/harness/scheduling.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.harness.pytest_plugin"]

# Property tests hold the code to its properties, never to a clock: on a machine busy with the
# cluster tests of five workers an example may take seconds. Time bounds are the benchmarks'.
settings.register_profile("kyma-gpu", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kyma-gpu")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole test files per worker (each worker has its own cluster), longest first."""
    from tests.harness.xdist_scheduler import LongestFileFirst

    return LongestFileFirst(config, log)
