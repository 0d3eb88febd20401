"""Startup waits until discovery serves the Gpu resource (handlers._until_gpus_served).

kopf resolves its resources once, right after the startup handlers, and again only when a CRD
changes. A manager that started while the API server restarted got "Unresolved resources
cannot be served" and never watched a Gpu (seen in tests/e2e/test_faults.py: the manager
restarted just before the API server, and the chart bump never reached the Gpu's status).
The race is too narrow to force in a cluster test; the gate is tested here, against answers
the adapter gives while an API server starts: no connection, the group not served, served."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import pytest

from kyma_gpu import handlers
from kyma_gpu.errors import TransientError
from kyma_gpu.reconcile.settings import KopfSettings

FAST = KopfSettings(served_poll=(0.0,))


@dataclass
class Discovery:
    answers: list[bool | Exception]
    asked: list[tuple[str, str, str]] = field(default_factory=list)

    def serves(self, group: str, version: str, plural: str) -> bool:
        self.asked.append((group, version, plural))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _gate(discovery: Discovery) -> None:
    asyncio.run(handlers._until_gpus_served(discovery, FAST))  # type: ignore[arg-type]


def test_it_waits_through_an_api_server_start(caplog: pytest.LogCaptureFixture) -> None:
    refused = TransientError("discover gpu.kyma-project.io/v1beta1", 0, message="refused")
    discovery = Discovery([refused, refused, False, False, True])
    with caplog.at_level(logging.INFO, logger=handlers.log.name):
        _gate(discovery)
    assert discovery.answers == []  # it asked until the group was served, and no longer
    assert set(discovery.asked) == {("gpu.kyma-project.io", "v1beta1", "gpus")}
    waiting = [r.getMessage() for r in caplog.records if "waiting for the API server" in r.message]
    assert waiting == [
        "waiting for the API server to serve gpus.gpu.kyma-project.io/v1beta1 "
        "(discover gpu.kyma-project.io/v1beta1: no answer: refused)"
    ]  # said once, with the first reason


def test_served_at_once_returns_at_once(caplog: pytest.LogCaptureFixture) -> None:
    discovery = Discovery([True])
    with caplog.at_level(logging.INFO, logger=handlers.log.name):
        _gate(discovery)
    assert len(discovery.asked) == 1
    assert not [r for r in caplog.records if "waiting for the API server" in r.message]
