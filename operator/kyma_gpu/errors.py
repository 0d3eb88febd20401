"""Typed errors of API calls, decided by HTTP status code, never by message text.

`TransientError`: try again (conflict, throttling, server error, timeout, no connection).
`PermanentError`: a retry alone will not fix it; `NotFound` (404: the object, or a resource
type whose CRD is not installed) and `Gone` (410: a watch's resourceVersion expired, list
again) are the two that callers branch on. Pure: the adapter raises them, the informers and
the reconcile loop catch them.
"""

from __future__ import annotations

import json
from typing import Any


class ApiError(Exception):
    """A call to the API server failed. `status` is the HTTP status (0: no answer)."""

    def __init__(self, what: str, status: int, reason: str = "", message: str = "") -> None:
        self.what, self.status, self.reason, self.message = what, status, reason, message
        detail = f"{status} {reason}".strip() if status else "no answer"
        super().__init__(f"{what}: {detail}: {message}".rstrip(": "))


class TransientError(ApiError):
    """Try again: a conflict, throttling, a server error, a timeout or no connection."""


class PermanentError(ApiError):
    """A retry alone will not fix it: invalid, forbidden, not found."""


class NotFound(PermanentError):
    """404: the object, or the resource type itself (a CRD not installed)."""


class Gone(PermanentError):
    """410: the resourceVersion a watch started from is too old; list again."""


TRANSIENT_STATUSES = frozenset({0, 408, 409, 429})


def classify(what: str, status: int, reason: str = "", message: str = "") -> ApiError:
    """The typed error for an HTTP status code."""
    if status == 404:
        return NotFound(what, status, reason, message)
    if status == 410:
        return Gone(what, status, reason, message)
    if status in TRANSIENT_STATUSES or status >= 500:
        return TransientError(what, status, reason, message)
    return PermanentError(what, status, reason, message)


def message_of(body: Any) -> str:
    """The `message` of a Kubernetes Status body (bytes or str), shortened."""
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    try:
        parsed = json.loads(body or "{}")
    except ValueError:
        return str(body or "")[:300]
    return str(parsed.get("message", ""))[:500] if isinstance(parsed, dict) else ""
