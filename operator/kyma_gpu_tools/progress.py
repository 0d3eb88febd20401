"""Progress lines on stderr for a step that may take long: nothing while it is quick, then a
line every few seconds, so that no run is silent for longer (a 20,000-node YAML list takes
several seconds to read)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

EVERY = 2.0
"""Seconds of silence before a progress line, and between two."""


class Progress:
    """`note(words)`: print `words()` if EVERY seconds passed since the start or the last line."""

    def __init__(
        self,
        out: TextIO,
        prefix: str,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out, self.prefix, self.enabled, self.clock = out, prefix, enabled, clock
        self.began = self.last = clock()
        self.lines = 0

    def note(self, words: Callable[[], str]) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if now - self.last >= EVERY:
            self.say(words())
            self.last = now

    def say(self, text: str) -> None:
        """A line now (whatever the time), with the seconds since the start."""
        if self.enabled:
            self.out.write(f"{self.prefix}: [{self.clock() - self.began:5.1f}s] {text}\n")
            self.out.flush()
            self.lines += 1

    def done(self, text: str) -> None:
        """The last line, only when an earlier one was printed: a long run says it ended."""
        if self.lines:
            self.say(text)
