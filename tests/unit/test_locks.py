"""The lock files against pyproject.toml, offline (make check re-resolves them with uv:
hack/write-locks.sh --check).

Every dependency pyproject.toml pins is locked at that version, the runtime ones in
requirements.lock too, the dev lock agrees with the runtime lock, and every pin carries
hashes (make setup and the Dockerfile install with --require-hashes).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^ \\;]+)")


def pyproject() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        "runtime": list(project["dependencies"]),
        "dev": list(project["optional-dependencies"]["dev"]),
    }


def locked(name: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / name).read_text().splitlines():
        if match := PIN.match(line):
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def pinned(requirements: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for text in requirements:
        requirement = Requirement(text)
        specifiers = list(requirement.specifier)
        assert len(specifiers) == 1, f"{text}: pyproject.toml pins exact versions"
        assert specifiers[0].operator == "==", f"{text}: pyproject.toml pins exact versions"
        result[canonicalize_name(requirement.name)] = specifiers[0].version
    return result


@pytest.mark.parametrize(
    ("lock", "groups"),
    [("requirements.lock", ("runtime",)), ("requirements-dev.lock", ("runtime", "dev"))],
)
def test_lock_has_every_pyproject_pin(lock: str, groups: tuple[str, ...]) -> None:
    pins = locked(lock)
    wanted = {k: v for group in groups for k, v in pinned(pyproject()[group]).items()}
    stale = {name: (version, pins.get(name)) for name, version in wanted.items()
             if pins.get(name) != version}  # fmt: skip
    assert not stale, f"{lock} is stale (pyproject, lock): {stale}; run make lock"


def test_dev_lock_agrees_with_runtime_lock() -> None:
    runtime, dev = locked("requirements.lock"), locked("requirements-dev.lock")
    assert {name: dev.get(name) for name in runtime} == runtime


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-dev.lock"])
def test_every_pin_has_hashes(lock: str) -> None:
    text = (ROOT / lock).read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[-1])
    unhashed = [e.split()[0] for e in entries if PIN.match(e) and "--hash=sha256:" not in e]
    assert not unhashed, f"{lock}: no --hash for {unhashed}"
    assert len([e for e in entries if PIN.match(e)]) == len(locked(lock))
