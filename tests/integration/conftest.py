"""Integration tests run against the local cluster harness (tests/harness).

Its fixtures (local_cluster, flux_stack, k8s_client, namespace, fleet,
demo_fleet) come from the plugin tests.harness.pytest_plugin, which pytest
only accepts from the top-level conftest: see tests/conftest.py.
"""
