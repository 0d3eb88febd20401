"""The manager's identity needs no passwd entry (kyma_gpu.handlers.own_identity)."""

from __future__ import annotations

import getpass
import os
import socket

import pytest

from kyma_gpu.handlers import own_identity


def test_the_pod_name_is_the_identity() -> None:
    assert own_identity({"POD_NAME": "gpu-manager-7d9f-abcde"}) == "gpu-manager-7d9f-abcde"


def test_without_a_pod_name_host_and_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_entry() -> str:
        raise KeyError("getpwuid(): uid not found: 65532")

    monkeypatch.setattr(getpass, "getuser", no_entry)
    assert own_identity({}) == f"{socket.gethostname()}-{os.getpid()}"
    assert own_identity({"POD_NAME": ""}) == f"{socket.gethostname()}-{os.getpid()}"
