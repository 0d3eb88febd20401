"""Fixtures of the pure-core unit tests: the module's own values-rules/, loaded once."""

from __future__ import annotations

import pytest

from kyma_gpu.facts import MachineTypeRegistry
from kyma_gpu.rules.catalog import Catalog


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog()


@pytest.fixture(scope="session")
def registry(catalog: Catalog) -> MachineTypeRegistry:
    return catalog.machine_types
