"""The harness's check for refused API calls in an operator log (tests/harness/module.py).

A bare "403" once failed a CI run: the log's millisecond timestamp 13:45:42,403 contains it.
"""

from __future__ import annotations

import pytest

from tests.harness.module import forbidden_lines

CLEAN = (
    "[2026-12-01 13:45:42,403] kyma_gpu.reconcile.l [INFO    ] reconciled: writes=0 in 1 ms",
    "observe helmrepositories: list /apis/source.toolkit.fluxcd.io/v1/...: 404 Not Found",
    "spec.values: extra_forbidden key extraObjects refused",
    "[2026-12-01 13:45:42,999] resourceVersion 1403 seen",
)
REFUSED = (
    "apply HelmRelease kyma-system/gpu-operator: 403 Forbidden: cannot patch",
    'helmreleases.helm.toolkit.fluxcd.io "gpu-operator" is forbidden: User "system:serviceaccount"',
    "kopf._cogs.clients.errors.APIForbiddenError: ('helmreleases is forbidden', {...})",
)


@pytest.mark.parametrize("line", CLEAN)
def test_a_timestamp_or_another_status_is_not_a_refusal(line: str) -> None:
    assert forbidden_lines(line) == []


@pytest.mark.parametrize("line", REFUSED)
def test_each_way_a_refusal_is_written_is_caught(line: str) -> None:
    assert forbidden_lines("before\n" + line + "\nafter") == [line]
