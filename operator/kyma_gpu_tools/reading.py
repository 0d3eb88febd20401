"""Reading the files `kyma-gpu` is given: a Gpu manifest, a node list, the allowed sources.

A wrong file costs a moment, not minutes: a file's size is checked before it is read (each flag
has a limit), and its first lines before it is parsed: a binary, or text that begins like no
YAML or JSON object, is refused there. A node list is read as a stream: one Node at a time is
parsed and handed on (the CLI folds it into its facts at once), so memory stays flat however
many Nodes the list holds (docs/performance.md, "The CLI on a big node list").

The YAML of a node list is parsed by libyaml (its C parser, where PyYAML has it) into events,
and `_Builder` makes the Python objects of SafeLoader from them: the same values (the resolver
and constructors of SafeLoader decide every tag), without SafeLoader's node graph, which costs
most of its time and all of its memory on a big list. JSON (`kubectl get nodes -o json`) is read
item by item with the json module's decoder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

MIB = 1024 * 1024


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


@dataclass(frozen=True)
class Role:
    """What a flag takes, in words, and the most it may hold."""

    flag: str
    expected: str
    limit: int
    limit_why: str


GPU_ROLE = Role(
    "-f", "a Gpu manifest (config/samples/gpu.yaml; `kubectl get gpu gpu -o yaml` gives one)",
    3 * MIB, "the API server takes no object larger than 3 MiB",
)  # fmt: skip
NODES_ROLE = Role(
    "--nodes", "the output of `kubectl get nodes -o json` (or -o yaml)",
    1024 * MIB, "1 GiB holds more than 50,000 Nodes of 20 kB each",
)  # fmt: skip
SOURCES_ROLE = Role(
    "--sources",
    "the ConfigMap kyma-gpu-chart-sources (`kubectl get configmap -n kyma-system "
    "kyma-gpu-chart-sources -o yaml`)",
    3 * MIB, "the API server takes no object larger than 3 MiB",
)  # fmt: skip
RELEASE_ROLE = Role(
    "--release",
    "the running HelmRelease (`kubectl get helmrelease -n kyma-system gpu-operator -o yaml`)",
    3 * MIB, "the API server takes no object larger than 3 MiB",
)  # fmt: skip

HEAD = 64 * 1024
"""Characters read to judge a file before it is parsed."""
_CHUNK = 256 * 1024


def _size(number: float) -> str:
    return f"{number / 1e6:.1f} MB" if number >= 1e5 else f"{number / 1e3:.1f} kB"


class Input:
    """A file or standard input as text, read at most `role.limit` characters far; its head
    is judged before anything parses it, and `consumed` says how far a reader got."""

    def __init__(self, path: str, stdin: TextIO, role: Role) -> None:
        self.path, self.role = path, role
        self.size: int | None = None
        self._handle = stdin if path == "-" else self._open(path, role)
        self.consumed = 0
        try:
            self._pending = self._raw(HEAD)
            self._judge(self._pending)
        except UsageError:
            self.close()
            raise

    def _open(self, path: str, role: Role) -> TextIO:
        try:
            self.size = Path(path).stat().st_size
            handle = _opened(path)
        except OSError as err:
            raise UsageError(f"{path}: cannot read: {err.strerror}") from err
        if self.size > role.limit:
            try:
                head = handle.read(HEAD)
            except (OSError, UnicodeDecodeError):
                head = ""
            handle.close()
            raise UsageError(
                f"{path}: {_size(self.size)}, more than {role.flag} takes ({role.limit_why}); "
                f"expected {role.expected}{_too_big_hint(role, head)}"
            )
        return handle

    def _raw(self, size: int) -> str:
        try:
            text = self._handle.read(size)
        except UnicodeDecodeError as err:
            raise UsageError(f"{self.path}: not UTF-8 text (a binary file?)") from err
        except OSError as err:
            raise UsageError(f"{self.path}: cannot read: {err.strerror}") from err
        self.consumed += len(text)
        if self.consumed > self.role.limit:
            raise UsageError(
                f"{self.path}: more than {self.role.limit // MIB} MiB, more than {self.role.flag} "
                f"takes ({self.role.limit_why}); expected {self.role.expected}"
            )
        return text

    def read(self, size: int = -1) -> str:
        """At most `size` characters (all: -1), the judged head first."""
        if self._pending:
            text, self._pending = self._pending, ""
            if size < 0:
                return text + self._raw(-1)
            return text
        return self._raw(size)

    def head(self) -> str:
        return self._pending

    def close(self) -> None:
        if self.path != "-":
            self._handle.close()

    def _judge(self, head: str) -> None:
        problem = head_problem(head.removeprefix("\ufeff"))
        if problem is not None:
            raise UsageError(f"{self.path}: {problem}; expected {self.role.expected}")


_NODE_KIND = re.compile(r"""^\s*"?kind"?\s*:\s*"?(Node|List)"?\s*,?$""", re.MULTILINE)


def _opened(path: str) -> TextIO:
    return Path(path).open(encoding="utf-8-sig")


def _too_big_hint(role: Role, head: str) -> str:
    """A node list handed to the wrong flag: say which flag takes it."""
    if role is not NODES_ROLE and _NODE_KIND.search(head):
        return "; it holds Nodes: did you mean --nodes?"
    return ""


_STARTS = re.compile(r"""[{\[]|[-?](\s|$)|("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^#]*?)\s*:(\s|$)""")
"""How an object's first line begins: JSON or a flow collection, a block sequence's or complex
key's indicator, or `key:`."""


def head_problem(head: str) -> str | None:
    """Why the head of a file is no YAML or JSON object (None: it may be one)."""
    if "\x00" in head:
        return "not UTF-8 text (a binary file?)"
    for number, line in enumerate(head.splitlines(), 1):
        text = line.strip()
        if text.startswith("---"):
            text = text[3:].strip()
        if not text or text.startswith(("#", "%")):
            continue
        if _STARTS.match(text):
            return None
        shown = text if len(text) <= 40 else text[:40] + "..."
        return f"not YAML or JSON: line {number} ({shown!r}) is no `key: value`, `- item` or `{{`"
    return None


def read_whole(path: str, stdin: TextIO, role: Role) -> str:
    """The whole text of a small file (a Gpu manifest, the allowed sources)."""
    source = Input(path, stdin, role)
    try:
        return source.read()
    finally:
        source.close()


# -- a node list, one item at a time ----------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """An element of a document's `items` (a List's), handed on as soon as it is read."""

    value: Any


@dataclass(frozen=True)
class Document:
    """A whole document, without the elements of its `items` (they came as Items)."""

    value: Any
    items: int | None
    """How many Items it had; None: it has no `items` list."""


Streamed = Item | Document


def stream_objects(source: Input, progress: Callable[[], None] | None = None) -> Iterator[Streamed]:
    """The Items and Documents of a node list: JSON when it begins with `{`, else YAML."""
    tick = progress or (lambda: None)
    if source.head().lstrip("\ufeff \t\r\n")[:1] == "{":
        return _json_stream(source, tick)
    return _yaml_stream(source, tick)


def _yaml_stream(source: Any, tick: Callable[[], None]) -> Iterator[Streamed]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        yield from _Builder(tick).documents(yaml.parse(source, Loader=loader))
    except RecursionError as err:
        raise UsageError(f"{source.path}: nests too deep to read") from err
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UsageError(f"{source.path}: not valid YAML{where}: {err.problem}") from err
    except yaml.YAMLError as err:
        raise UsageError(f"{source.path}: not valid YAML: {err}") from err
    except (ValueError, TypeError, OverflowError) as err:  # a scalar YAML cannot construct
        raise UsageError(f"{source.path}: not valid YAML: {err}") from err


_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"


class _Mark(Enum):
    KEY = "a mapping's frame waits for a key"
    LIST = "a sequence's frame"
    NOTHING = "an event that completes no value (the stream's and documents' starts)"
    MERGE_KEY = "`<<`: the keys of the mappings it names are the defaults of its own"


_KEY, _LIST, _NOTHING, _MERGE_KEY = _Mark.KEY, _Mark.LIST, _Mark.NOTHING, _Mark.MERGE_KEY


class _Builder:
    """SafeLoader's objects from libyaml's events, the elements of each document's top-level
    `items` handed on one by one instead of kept."""

    def __init__(self, tick: Callable[[], None]) -> None:
        self.tick = tick
        self.constructor = SafeConstructor()
        self.constructors = SafeConstructor.yaml_constructors
        self.resolvers = Resolver.yaml_implicit_resolvers
        self.anchors: dict[str, Any] = {}

    def documents(self, events: Iterator[Any]) -> Iterator[Streamed]:
        stack: list[list[Any]] = []  # [container, key (_KEY, _LIST or the key), anchor, merges]
        root: Any = None
        items: int | None = None
        for event in events:
            kind = event.__class__
            if kind is MappingStartEvent or kind is SequenceStartEvent:
                frame = self.frame(event)
                if len(stack) == 1 and frame[1] is _LIST and stack[0][1] == "items":
                    items = items or 0  # a List, maybe of no items
                stack.append(frame)
                continue
            if kind is DocumentEndEvent:
                if root is not None:
                    yield Document(root, items)
                root, items = None, None
                self.anchors.clear()
                continue
            value = self.value(kind, event, stack)
            if value is _NOTHING:
                continue
            if len(stack) == 2 and stack[1][1] is _LIST and stack[0][1] == "items":
                items = (items or 0) + 1
                self.tick()
                yield Item(value)
            elif stack:
                self.add(stack[-1], value, event)
            else:
                root = value

    def value(self, kind: type, event: Any, stack: list[list[Any]]) -> Any:
        """The value an event completes: a scalar, an alias's, a closed collection's."""
        if kind is ScalarEvent:
            return self.scalar(event)
        if kind is MappingEndEvent or kind is SequenceEndEvent:
            return self.close(stack.pop())
        if kind is AliasEvent:
            return self.alias(event)
        return _NOTHING

    def add(self, frame: list[Any], value: Any, event: Any) -> None:
        """`value` into the open mapping or sequence `frame`."""
        key = frame[1]
        if key is _LIST:
            frame[0].append(value)
        elif key is _KEY:
            if isinstance(value, dict | list):
                raise ConstructorError(None, None, "found unhashable key", event.start_mark)
            frame[1] = value
        elif key is _MERGE_KEY:
            frame[3] = self.merges(value, event)
            frame[1] = _KEY
        else:
            frame[0][key] = value
            frame[1] = _KEY

    def frame(self, event: Any) -> list[Any]:
        mapping = event.__class__ is MappingStartEvent
        tag = event.tag
        if tag not in (None, "!", _MAP if mapping else _SEQ):
            raise ConstructorError(None, None, f"the tag {tag} is not read here",
                                   event.start_mark)  # fmt: skip
        return [{} if mapping else [], _KEY if mapping else _LIST, event.anchor, None]

    def close(self, frame: list[Any]) -> Any:
        value = frame[0]
        if frame[3]:
            merged: dict[Any, Any] = {}
            for default in reversed(frame[3]):
                merged.update(default)
            merged.update(value)
            value = merged
        if frame[2] is not None:
            self.anchors[frame[2]] = value
        return value

    def merges(self, value: Any, event: Any) -> list[dict[Any, Any]]:
        found = value if isinstance(value, list) else [value]
        if not all(isinstance(m, dict) for m in found):
            raise ConstructorError(None, None, "a merge key `<<` names no mapping",
                                   event.start_mark)  # fmt: skip
        return found

    def alias(self, event: Any) -> Any:
        if event.anchor not in self.anchors:
            raise ConstructorError(None, None, f"found undefined alias {event.anchor!r}",
                                   event.start_mark)  # fmt: skip
        return self.anchors[event.anchor]

    def scalar(self, event: Any) -> Any:
        value = event.value
        tag = event.tag
        if tag is None:
            if not event.implicit[0]:
                return self.anchored(event, value)
            tag = next((t for t, rx in self.resolvers.get(value[:1], ()) if rx.match(value)), _STR)
        elif tag == "!":
            tag = _STR
        if tag == _STR:
            return self.anchored(event, value)
        if tag == _MERGE:
            return _MERGE_KEY
        construct = self.constructors.get(tag) or self.constructors[None]
        node = ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
        return self.anchored(event, construct(self.constructor, node))

    def anchored(self, event: Any, value: Any) -> Any:
        if event.anchor is not None:
            self.anchors[event.anchor] = value
        return value


# -- JSON ---------------------------------------------------------------------------------


class _JsonError(Exception):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class _JsonReader:
    """A JSON object read from a stream key by key, the elements of `items` one by one."""

    _SPACE = re.compile(r"[ \t\r\n]*")

    def __init__(self, source: Input, tick: Callable[[], None]) -> None:
        self.source, self.tick = source, tick
        self.buffer, self.pos, self.lines, self.eof = "", 0, 0, False
        self.decoder = json.JSONDecoder()
        self.kept: list[str] | None = []
        """Everything read until the first item: YAML reads it again if this is no JSON."""

    def more(self) -> bool:
        if self.eof:
            return False
        wanted = max(_CHUNK, len(self.buffer) - self.pos)
        text = self.source.read(wanted)
        if not text:
            self.eof = True
            return False
        if self.kept is not None:
            self.kept.append(text)
        if self.pos > _CHUNK:
            self.lines += self.buffer.count("\n", 0, self.pos)
            self.buffer, self.pos = self.buffer[self.pos :], 0
        self.buffer += text
        return True

    def char(self) -> str:
        """The next character that is not white space ('' at the end)."""
        while True:
            self.pos = self._SPACE.match(self.buffer, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buffer) or not self.more():
                return self.buffer[self.pos : self.pos + 1]

    def expect(self, wanted: str) -> str:
        found = self.char()
        if not found or found not in wanted:
            raise self.error(f"expected {' or '.join(repr(c) for c in wanted)}, found {found!r}")
        self.pos += 1
        return found

    def value(self) -> Any:
        self.char()
        while True:
            try:
                value, self.pos = self.decoder.raw_decode(self.buffer, self.pos)
                return value
            except json.JSONDecodeError as err:
                cut = err.pos >= len(self.buffer) - 16 or err.msg.startswith("Unterminated")
                if not (cut and self.more()):
                    raise self.error(err.msg, err.pos) from err

    def error(self, message: str, pos: int | None = None) -> _JsonError:
        at = self.pos if pos is None else pos
        return _JsonError(message, self.lines + self.buffer.count("\n", 0, at) + 1)

    def items(self) -> Iterator[Any]:
        self.expect("[")
        if self.char() == "]":
            self.pos += 1
            return
        while True:
            yield self.value()
            self.kept = None
            self.tick()
            if self.expect(",]") == "]":
                return

    def document(self) -> Iterator[Streamed]:
        self.expect("{")
        found: dict[str, Any] = {}
        count: int | None = None
        if self.char() == "}":
            self.pos += 1
        else:
            while True:
                key = self.value()
                if not isinstance(key, str):
                    raise self.error("expected a key in double quotes")
                self.expect(":")
                if key == "items" and self.char() == "[":
                    count = 0
                    for item in self.items():
                        count += 1
                        yield Item(item)
                else:
                    found[key] = self.value()
                if self.expect(",}") == "}":
                    break
        if self.char():
            raise self.error("more after the end of the JSON object")
        yield Document(found, count)


class _Replay:
    """What the JSON reader read, then the rest of the input: for YAML's flow style."""

    def __init__(self, kept: list[str], source: Input) -> None:
        self.kept, self.source, self.path = "".join(kept), source, source.path

    def read(self, size: int = -1) -> str:
        if self.kept:
            text, self.kept = self.kept, ""
            return text
        return self.source.read(size)


def _json_stream(source: Input, tick: Callable[[], None]) -> Iterator[Streamed]:
    reader = _JsonReader(source, tick)
    try:
        yield from reader.document()
    except _JsonError as err:
        if reader.kept is None:  # items came already: it is JSON, and broken
            raise UsageError(f"{source.path}: not valid JSON (line {err.line}): {err}") from err
        yield from _yaml_stream(_Replay(reader.kept, source), tick)  # YAML's flow style, or says
    except RecursionError as err:
        raise UsageError(f"{source.path}: nests too deep to read") from err
