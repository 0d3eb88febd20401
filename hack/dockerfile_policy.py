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
  P7  ENTRYPOINT is exactly ["kyma-gpu-manager"] (exec form).
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


Problem = tuple[int, str, str]
"""(line, rule, message)."""


def check(path: Path) -> list[str]:
    instructions = parse(path.read_text(encoding="utf-8"))
    all_stages = stages(instructions)
    found = _stage_problems(all_stages)
    if all_stages:
        final = all_stages[-1]
        found += _base_problems(all_stages)
        found += _user_problems(final)
        found += [(ins.line, "P5", f"ADD is not allowed, use COPY: ADD {ins.args}")
                  for ins in instructions if ins.keyword == "ADD"]  # fmt: skip
        found += _final_run_problems(final)
        found += _entrypoint_problems(final)
        found += _rules_dir_problems(final)
    return [f"{path}:{line} {rule}: {message}" for line, rule, message in found]


def _stage_problems(all_stages: list[Stage]) -> list[Problem]:
    """P1 and P2: a multi-stage build whose base images are pinned."""
    found: list[Problem] = []
    if len(all_stages) < 2:
        message = (
            f"expected a multi-stage build (builder + final), found {len(all_stages)} stage(s)"
        )
        found.append((1, "P1", message))
    found += [
        (stage.line, "P2", f"base image {stage.image!r} is not pinned to an exact X.Y.Z tag")
        for stage in all_stages
        if not PINNED_TAG.match(stage.image)
    ]
    return found


def _base_problems(all_stages: list[Stage]) -> list[Problem]:
    """P3: the final stage has the builder's base image."""
    final, builder = all_stages[-1], all_stages[0]
    if len(all_stages) >= 2 and final.image != builder.image:
        message = f"final base {final.image!r} differs from builder base {builder.image!r}"
        return [(final.line, "P3", message)]
    return []


def _user_problems(final: Stage) -> list[Problem]:
    """P4: the final stage ends as a numeric non-root USER."""
    users = [ins for ins in final.instructions if ins.keyword == "USER"]
    if not users:
        return [(final.line, "P4", "the final stage sets no USER (the image would run as root)")]
    user = users[-1]
    uid, _, gid = user.args.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        return [(user.line, "P4", f"USER {user.args!r} must be numeric uid[:gid]")]
    if int(uid) == 0 or (gid and int(gid) == 0):
        return [(user.line, "P4", f"USER {user.args!r} must not be root (uid/gid 0)")]
    return []


def _final_run_problems(final: Stage) -> list[Problem]:
    """P6: no package manager and no build tools in the final stage."""
    return [
        (
            ins.line,
            "P6",
            f"the final stage must not install packages or build tools: RUN {ins.args}",
        )
        for ins in final.instructions
        if ins.keyword == "RUN" and BUILD_TOOLS.search(ins.args)
    ]


def _entrypoint_problems(final: Stage) -> list[Problem]:
    """P7: ENTRYPOINT is exactly ["kyma-gpu-manager"]."""
    entrypoints = [ins for ins in final.instructions if ins.keyword == "ENTRYPOINT"]
    if not entrypoints:
        return [
            (final.line, "P7", 'no ENTRYPOINT in the final stage (expected ["kyma-gpu-manager"])')
        ]
    last = entrypoints[-1]
    try:
        value = json.loads(last.args)
    except json.JSONDecodeError:
        value = None
    if value != ["kyma-gpu-manager"]:
        return [(last.line, "P7", f'ENTRYPOINT must be ["kyma-gpu-manager"], is {last.args}')]
    return []


def _rules_dir_problems(final: Stage) -> list[Problem]:
    """P8: KYMA_GPU_RULES_DIR is set and values-rules/ is copied there."""
    env: dict[str, str] = {}
    for ins in final.instructions:
        if ins.keyword == "ENV":
            env.update(env_pairs(ins.args))
    rules_dir = env.get("KYMA_GPU_RULES_DIR")
    if not rules_dir:
        return [(final.line, "P8", "KYMA_GPU_RULES_DIR is not set in the final stage")]
    copied = any(
        ins.keyword == "COPY"
        and "--from" not in ins.args
        and ins.args.split()[0].rstrip("/") == "values-rules"
        and ins.args.split()[-1].rstrip("/") == rules_dir.rstrip("/")
        for ins in final.instructions
    )
    if not copied:
        return [
            (final.line, "P8", f"values-rules/ is not copied to KYMA_GPU_RULES_DIR={rules_dir}")
        ]
    return []


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
