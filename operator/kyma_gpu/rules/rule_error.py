"""The one error of broken rule data."""

from __future__ import annotations

from collections.abc import Sequence


class RuleError(ValueError):
    """A rule file is malformed, or a rule refers to something that does not exist.

    file: the data file below values-rules/ (None when the message names it already);
    keys: where in that file, as YAML keys (empty when unknown), so that the catalog can name
    the line."""

    def __init__(
        self, message: str, keys: Sequence[str | int] = (), file: str | None = None
    ) -> None:
        super().__init__(message)
        self.keys: tuple[str | int, ...] = tuple(keys)
        self.file = file
