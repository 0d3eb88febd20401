"""Docs that are produced, not written: the command outputs the README and the guides show.

A block of a doc that shows what a command prints is marked with the file it was captured into:

    <!-- captured: docs/captured/gpu-ready.txt -->
    ```console
    $ kubectl get gpu
    ...
    ```

and must equal that file. `make docs-capture` (tests/harness/docs_capture.py) runs the demo,
captures each output into docs/captured/, and writes every marked block anew from its file;
`make check` (tests/unit/test_docs_captured.py) fails when a block differs from its file, when
a file has no block or a block no file, and when an offline capture (`kyma-gpu plan`, which
needs no cluster) is no longer what the CLI prints. Pure: files in, text out.
"""

from __future__ import annotations

import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = ROOT / "docs" / "captured"
MARKER = re.compile(r"^<!-- captured: (docs/captured/[\w.-]+\.txt) -->$")
OFFLINE = "plan-"
"""Captures named plan-*.txt are `kyma-gpu` runs: the check runs them again."""


def docs() -> list[Path]:
    """The docs that may hold marked blocks: the README and docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    """The marker's line (1-based)."""
    capture: str
    """The captured file, relative to the repository."""
    fence: str
    """The opening fence line (```console, ```text)."""
    body: str
    """What the block shows, each line with its newline."""


class MarkError(ValueError):
    """A marker without a fenced block right after it."""


def blocks(doc: Path) -> Iterator[Block]:
    """The marked blocks of a doc."""
    lines = doc.read_text(encoding="utf-8").splitlines(keepends=True)
    for index, line in enumerate(lines):
        found = MARKER.match(line.strip())
        if found is None:
            continue
        opening = lines[index + 1] if index + 1 < len(lines) else ""
        indent = opening[: len(opening) - len(opening.lstrip())]
        if not opening.strip().startswith("```"):
            raise MarkError(f"{doc.name}:{index + 1}: no fenced block after the marker")
        end = next((j for j in range(index + 2, len(lines))
                    if lines[j].strip() == "```"), None)  # fmt: skip
        if end is None:
            raise MarkError(f"{doc.name}:{index + 1}: the fenced block does not end")
        body = "".join(_dedent(text, indent) for text in lines[index + 2 : end])
        yield Block(doc, index + 1, found.group(1), opening.strip(), body)


def _dedent(line: str, indent: str) -> str:
    return line[len(indent) :] if line.startswith(indent) else line.lstrip(" ")


def all_blocks() -> list[Block]:
    return [block for doc in docs() for block in blocks(doc)]


def write_blocks(doc: Path) -> bool:
    """Every marked block of `doc` set to its captured file; True when the doc changed."""
    text = doc.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    for block in reversed(list(blocks(doc))):
        start = block.line + 1  # the opening fence's index + 1: the first line of the body
        end = next(j for j in range(start, len(lines)) if lines[j].strip() == "```")
        opening = lines[block.line]
        indent = opening[: len(opening) - len(opening.lstrip())]
        body = (ROOT / block.capture).read_text(encoding="utf-8")
        lines[start:end] = [f"{indent}{line}" if line.strip() else line
                            for line in body.splitlines(keepends=True)]  # fmt: skip
    new = "".join(lines)
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text


# -- offline captures: the CLI's own output ----------------------------------------------------


def offline_command(text: str) -> list[str]:
    """The `kyma-gpu` arguments of an offline capture's first line (`$ .venv/bin/kyma-gpu ...`)."""
    first = text.splitlines()[0]
    words = shlex.split(first.removeprefix("$ "))
    if not words or not words[0].endswith("kyma-gpu"):
        raise MarkError(f"an offline capture begins with `$ .venv/bin/kyma-gpu ...`: {first!r}")
    return words[1:]


def run_offline(text: str) -> str:
    """What the capture's command prints now (run from the repository's root), as captured:
    its command line, then its output."""
    from kyma_gpu_tools.cli import main

    args = offline_command(text)
    out, err = io.StringIO(), io.StringIO()
    main([str(ROOT / a) if (ROOT / a).is_file() else a for a in args],
         stdin=io.StringIO(), stdout=out, stderr=err)  # fmt: skip
    shown = (out.getvalue() + err.getvalue()).replace(f"{ROOT}/", "")
    return f"{text.splitlines()[0]}\n{shown}"


def write_offline() -> list[Path]:
    """Every offline capture run again and written; the files that changed."""
    changed = []
    for path in sorted(CAPTURED.glob(f"{OFFLINE}*.txt")):
        text = path.read_text(encoding="utf-8")
        now = run_offline(text)
        if now != text:
            path.write_text(now, encoding="utf-8")
            changed.append(path)
    return changed


# -- comparing a capture with a new one (tests/e2e/test_docs_capture.py) ----------------------

_VOLATILE = (
    (re.compile(r"(?<![\w.:/-])(?:\d+[dhms])+(?![\w.-])"), "<age>"),
    (re.compile(r"\b\d+\.\d+\.\d+\.\d+\b"), "<ip>"),
    (re.compile(r"ip-10-250-0-1[12]\.eu-central-1\.compute\.internal"), "<gpu-node>"),
    (re.compile(r"\s{2,}"), " "),
)
"""What differs from run to run, in any capture: ages, pod IPs, which GPU node a pod or a
rollout picks first, and the columns' padding that follows from them."""
ROLLING = frozenset({"values-rollout.txt"})
"""Captures taken while the NVIDIA upgrade controller moves nodes through its states: only
their commands and what each one's first line of output says is compared."""


def comparable(name: str, text: str) -> list[str]:
    """The lines of a capture that must be the same in every run, sorted (the order of
    Events of the same second, and of nodes, varies)."""
    lines = text.splitlines()
    if name in ROLLING:
        lines = [line for i, line in enumerate(lines)
                 if line.startswith("$ ") or (i and lines[i - 1].startswith("$ "))]  # fmt: skip
        lines = [" ".join(line.split()[:2]) if not line.startswith("$ ") else line
                 for line in lines]  # fmt: skip
    for pattern, placeholder in _VOLATILE:
        lines = [pattern.sub(placeholder, line) for line in lines]
    return sorted(lines)
