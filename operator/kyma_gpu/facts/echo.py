"""Text the module copies from other objects, cut to a fixed length. Pure.

Whatever another object says (a HelmRelease's message, the ClusterPolicy's error, a pending
pod's image, a DaemonSet's name) may be repeated in the Gpu's status and in its Events, and
whoever writes that object chooses its length: any pod creator in the GPU operator's namespace
chooses an image name of megabytes. Each such string is cut here, once, when it is folded
into facts, so the store holds no more of it than the status may show; the status cuts each
whole message again (status/aggregate.py), and lists name a few and count the rest (`listed`).
docs/security.md, "Echoed text", gives the bound of the whole status that follows.
"""

from __future__ import annotations

from collections.abc import Sequence

ELLIPSIS = "..."
"""Ends a string that was cut."""
TEXT_LIMIT = 1024
"""One free text of another object (a Flux condition's message, the ClusterPolicy's error):
Helm's longest failures fit, a flood does not."""
NAME_LIMIT = 256
"""One name, image reference or version of another object. Kubernetes names are at most 253
characters; image references are not bounded by the API server."""
REASON_LIMIT = 128
"""One reason or state word of another object, as a condition's reason or an Event's reason
repeats it (the API server refuses longer Event reasons)."""
LIST_LIMIT = 3072
"""The names one message lists, together: ten names of 253 characters fit, and the words
around the list (what to do about it) always survive MESSAGE_LIMIT."""
MESSAGE_LIMIT = 4096
"""One whole message of the Gpu's status (a condition's, or status.message), however many
echoed strings it quotes."""


def cut(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its start and ELLIPSIS, `limit` in all."""
    if len(text) <= limit:
        return text
    return text[: max(limit - len(ELLIPSIS), 0)] + ELLIPSIS


def echoed_text(text: str) -> str:
    return cut(text, TEXT_LIMIT)


def echoed_name(text: str) -> str:
    return cut(text, NAME_LIMIT)


def echoed_reason(text: str) -> str:
    return cut(text, REASON_LIMIT)


def listed(items: Sequence[str], shown: int) -> str:
    """The first `shown` items, comma-separated (at most LIST_LIMIT characters), and how many
    more: `a, b and 3 more`."""
    more = len(items) - shown
    return cut(", ".join(items[:shown]), LIST_LIMIT) + (f" and {more} more" if more > 0 else "")
