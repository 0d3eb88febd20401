#!/usr/bin/env python3
"""Project rules for the Dockerfile that hadolint does not check.

hadolint (run by hack/check-dockerfile.sh) covers the general best practices
(pinned apt/pip versions, no `latest`, pip cache, shell form, ...). It accepts
a final stage without any USER, ADD of URLs, and a single-stage build; the
image contract of this project needs those too:

  P1  multi-stage: at least two stages, the final one unnamed or named.
  P2  every FROM pins an exact, non-latest tag with a patch version
      (python:3.11.14-slim-bookworm), optionally plus a digest.
  P3  the final stage uses the same base image as the builder (the venv's
      interpreter symlinks point into the base image).
  P4  the final stage ends as a numeric non-root USER (uid and gid != 0), so
      Kubernetes' runAsNonRoot can verify it.
  P5  no ADD at all (COPY only; no remote URLs, no implicit tar extraction).
  P6  the final stage runs no package manager and installs no build tools:
      no RUN with apt/apt-get/dpkg/pip/gcc/make/... (it should have no RUN).
  P7  ENTRYPOINT is exactly ["kyma-gpu", "run"] (exec form).
  P8  KYMA_GPU_RULES_DIR is set and values-rules/ is copied to that path.

Usage: hack/dockerfile_policy.py [Dockerfile]   (exit 1 on any violation)
Standard library only, so it runs with any Python 3.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

BUILD_TOOLS = re.compile(
    r"\b(apt|apt-get|aptitude|dpkg|apk|yum|dnf|microdnf|pip|pip3|uv|poetry|"
    r"gcc|g\+\+|cc|clang|make|cmake|build-essential|python3?-dev)\b"
)
PINNED_TAG = re.compile(
    r"^[^:@\s]+:(?!latest)[0-9]+\.[0-9]+\.[0-9]+[^\s@]*(@sha256:[0-9a-f]{64})?$"
)


@dataclass
class Instruction:
    line: int
    keyword: str
    args: str


@dataclass
class Stage:
    line: int
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def parse(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions, joining backslash continuations."""
    result: list[Instruction] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].rstrip())
            continue
        buf.append(stripped)
        joined = " ".join(part for part in buf if part)
        buf = []
        keyword, _, args = joined.partition(" ")
        result.append(Instruction(start, keyword.upper(), args.strip()))
    return result


def stages(instructions: list[Instruction]) -> list[Stage]:
    result: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            words = [w for w in ins.args.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            result.append(Stage(ins.line, words[0], name))
        elif result:
            result[-1].instructions.append(ins)
    return result


def env_pairs(args: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for token in shlex.split(args):
        if "=" in token:
            key, _, value = token.partition("=")
            pairs[key] = value
    return pairs


def check(path: Path) -> list[str]:
    problems: list[str] = []
    instructions = parse(path.read_text(encoding="utf-8"))
    all_stages = stages(instructions)

    def fail(line: int, rule: str, message: str) -> None:
        problems.append(f"{path}:{line} {rule}: {message}")

    if len(all_stages) < 2:
        fail(
            1,
            "P1",
            f"expected a multi-stage build (builder + final), found {len(all_stages)} stage(s)",
        )
    for stage in all_stages:
        if not PINNED_TAG.match(stage.image):
            fail(
                stage.line, "P2", f"base image {stage.image!r} is not pinned to an exact X.Y.Z tag"
            )
    if not all_stages:
        return problems
    final = all_stages[-1]
    if len(all_stages) >= 2 and final.image != all_stages[0].image:
        fail(
            final.line,
            "P3",
            f"final base {final.image!r} differs from builder base {all_stages[0].image!r}",
        )

    users = [ins for ins in final.instructions if ins.keyword == "USER"]
    if not users:
        fail(final.line, "P4", "the final stage sets no USER (the image would run as root)")
    else:
        user = users[-1]
        uid, _, gid = user.args.partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            fail(user.line, "P4", f"USER {user.args!r} must be numeric uid[:gid]")
        elif int(uid) == 0 or (gid and int(gid) == 0):
            fail(user.line, "P4", f"USER {user.args!r} must not be root (uid/gid 0)")

    for ins in instructions:
        if ins.keyword == "ADD":
            fail(ins.line, "P5", f"ADD is not allowed, use COPY: ADD {ins.args}")

    for ins in final.instructions:
        if ins.keyword == "RUN" and BUILD_TOOLS.search(ins.args):
            fail(
                ins.line,
                "P6",
                f"the final stage must not install packages or build tools: RUN {ins.args}",
            )

    entrypoints = [ins for ins in final.instructions if ins.keyword == "ENTRYPOINT"]
    if not entrypoints:
        fail(final.line, "P7", 'no ENTRYPOINT in the final stage (expected ["kyma-gpu", "run"])')
    else:
        try:
            value = json.loads(entrypoints[-1].args)
        except json.JSONDecodeError:
            value = None
        if value != ["kyma-gpu", "run"]:
            fail(
                entrypoints[-1].line,
                "P7",
                f'ENTRYPOINT must be ["kyma-gpu", "run"], is {entrypoints[-1].args}',
            )

    env: dict[str, str] = {}
    for ins in final.instructions:
        if ins.keyword == "ENV":
            env.update(env_pairs(ins.args))
    rules_dir = env.get("KYMA_GPU_RULES_DIR")
    if not rules_dir:
        fail(final.line, "P8", "KYMA_GPU_RULES_DIR is not set in the final stage")
    else:
        copied = any(
            ins.keyword == "COPY"
            and "--from" not in ins.args
            and ins.args.split()[0].rstrip("/") == "values-rules"
            and ins.args.split()[-1].rstrip("/") == rules_dir.rstrip("/")
            for ins in final.instructions
        )
        if not copied:
            fail(final.line, "P8", f"values-rules/ is not copied to KYMA_GPU_RULES_DIR={rules_dir}")
    return problems


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "Dockerfile")
    problems = check(path)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"dockerfile-policy: {len(problems)} violation(s)", file=sys.stderr)
        return 1
    print(f"dockerfile-policy: {path} passes P1-P8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
