"""Preflight findings and the verdict over them. Pure.

A finding concerns the fleet (pool None) or some nodes of one worker pool (plan/pools.py). A
fleet error stops the plan: nothing is written. A pool error blocks that pool only: the plan
is written for the others, and the Gpu says Warning with the pool named; only when every GPU
worker pool is blocked is the plan an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from kyma_gpu.api.conditions import PreflightReason


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Verdict(StrEnum):
    """The plan's verdict: ok (info only), warning (written, with warnings or blocked pools),
    error (nothing written)."""

    OK = "ok"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Finding:
    """One preflight observation. Reasons are stable CamelCase words."""

    severity: Severity
    reason: PreflightReason
    message: str
    pool: str | None = None
    """The worker pool whose nodes it concerns; None: the fleet."""
    nodes: tuple[str, ...] = ()
    """The nodes it concerns, when it concerns nodes."""
    blocking: bool = False
    """Those nodes get no working GPU from the plan."""


_ORDER = MappingProxyType({Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2})


@dataclass(frozen=True, slots=True)
class Preflight:
    findings: tuple[Finding, ...] = ()
    pools: tuple[str, ...] = ()
    """The GPU worker pools the findings were made for."""

    @property
    def blocked(self) -> tuple[str, ...]:
        """Worker pools with an error: none of their nodes gets a working GPU."""
        return tuple(sorted({f.pool for f in self.findings if f.pool and _error(f)}))

    @property
    def degraded(self) -> tuple[str, ...]:
        """Worker pools that are not blocked, some of whose nodes get no working GPU."""
        some = {f.pool for f in self.findings if f.pool and f.blocking}
        return tuple(sorted(some - set(self.blocked)))

    @property
    def all_blocked(self) -> bool:
        return bool(self.pools) and set(self.blocked) >= set(self.pools)

    @property
    def verdict(self) -> Verdict:
        """error: a fleet error, or every worker pool blocked; warning: a warning or a blocked
        pool; ok otherwise (info counts as ok)."""
        if self.all_blocked or any(_error(f) and f.pool is None for f in self.findings):
            return Verdict.ERROR
        if any(f.severity is not Severity.INFO for f in self.findings):
            return Verdict.WARNING
        return Verdict.OK

    def worst(self) -> Finding | None:
        return min(self.findings, key=lambda f: _ORDER[f.severity], default=None)


def _error(finding: Finding) -> bool:
    return finding.severity is Severity.ERROR
