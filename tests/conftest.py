"""Top-level test configuration.

pytest accepts ``pytest_plugins`` only in the top-level conftest; the local
cluster harness fixtures (local_cluster, flux_stack, ...) are registered here
for every test directory.
"""

pytest_plugins = ["tests.harness.pytest_plugin"]
