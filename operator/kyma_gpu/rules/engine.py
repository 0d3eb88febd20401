"""The values-rules engine: conditions, templates and a deep merge that remembers who set what.

Pure: rules come in as parsed data, the context as a flat mapping of dotted keys.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kyma_gpu.rules.data_models import Rule, RulesFile, parse
from kyma_gpu.rules.rule_error import RuleError

__all__ = (
    "Evaluation",
    "Provenance",
    "Rule",
    "RuleError",
    "RuleSet",
    "deep_merge",
    "evaluate",
    "matches",
    "render",
)

_TEMPLATE = re.compile(r"\$\{([A-Za-z0-9_.-]+)\}")


@dataclass(frozen=True, slots=True)
class RuleSet:
    """All rules, in order, and the condition of the image mirror step."""

    rules: tuple[Rule, ...]
    mirror_when: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: object) -> RuleSet:
        """Check the document of rules.yaml (RuleError names the rule and carries its keys)."""
        parsed = parse(RulesFile, data, "rules.yaml")
        twice = parsed.duplicate()
        if twice is not None:
            name = parsed.rules[twice].name
            raise RuleError(f"rules.yaml: rule {name!r} is defined twice", keys=("rules", twice))
        mirror = parsed.image_mirror
        return cls(rules=tuple(parsed.rules), mirror_when=mirror.when if mirror else {})


def _missing(key: str, context: Mapping[str, Any]) -> RuleError:
    return RuleError(f"unknown context key {key!r}; known: {', '.join(sorted(context))}")


def matches(when: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    """True when every condition holds. An unknown key is an error, not a silent False."""
    for key, cond in when.items():
        if key not in context:
            raise _missing(key, context)
        value = context[key]
        if isinstance(cond, Mapping):
            op, arg = next(iter(cond.items()))
            if op == "not":
                ok = value != arg
            elif op == "contains":
                ok = isinstance(value, (list, tuple)) and arg in value
            else:  # exists
                ok = (value not in (None, "", [], ())) == bool(arg)
        elif isinstance(cond, list):
            ok = value in cond
        else:
            ok = value == cond
        if not ok:
            return False
    return True


def render(template: Any, context: Mapping[str, Any]) -> Any:
    """Replace ${key} in every string of a values fragment. Other `{{ }}` text is left alone."""
    if isinstance(template, Mapping):
        return {k: render(v, context) for k, v in template.items()}
    if isinstance(template, list):
        return [render(v, context) for v in template]
    if isinstance(template, str):
        whole = _TEMPLATE.fullmatch(template)
        if whole:
            key = whole.group(1)
            if key not in context:
                raise _missing(key, context)
            return copy.deepcopy(context[key])

        def one(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in context:
                raise _missing(key, context)
            return str(context[key])

        return _TEMPLATE.sub(one, template)
    return template


Provenance = dict[str, str]
"""Dotted values path -> name of the rule (or "spec.values") that set it last."""


def deep_merge(
    base: dict[str, Any],
    fragment: Mapping[str, Any],
    source: str,
    provenance: Provenance,
    prefix: str = "",
) -> dict[str, Any]:
    """Merge fragment into base in place (mappings merge, everything else replaces)."""
    for key, value in fragment.items():
        path = f"{prefix}{key}"
        # The path itself stops being a leaf when a mapping lands on it (or it is replaced).
        provenance.pop(path, None)
        if isinstance(value, Mapping) and isinstance(base.get(key), dict) and value:
            deep_merge(base[key], value, source, provenance, path + ".")
        else:
            base[key] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)
            for stale in [p for p in provenance if p.startswith(path + ".")]:
                del provenance[stale]
            _record(base[key], source, provenance, path)
    return base


def _record(value: Any, source: str, provenance: Provenance, path: str) -> None:
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            _record(inner, source, provenance, f"{path}.{key}")
    else:
        provenance[path] = source


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The merged values and, for each leaf, the rule that set it."""

    values: dict[str, Any]
    provenance: Provenance
    applied: tuple[str, ...]


def evaluate(
    rules: Sequence[Rule],
    context: Mapping[str, Any],
    pool_contexts: Sequence[Mapping[str, Any]],
    read_file: Callable[[str], Mapping[str, Any]],
) -> Evaluation:
    """Apply the rules in order. read_file loads a values file below values-rules/."""
    values: dict[str, Any] = {}
    provenance: Provenance = {}
    applied: list[str] = []
    for rule in rules:
        if not matches(rule.when, context):
            continue
        applied.append(rule.name)
        if rule.item is not None and rule.append_to:
            items = [render(rule.item, {**context, **pool}) for pool in pool_contexts]
            current = values.get(rule.append_to)
            merged = (list(current) if isinstance(current, list) else []) + items
            deep_merge(values, {rule.append_to: merged}, rule.name, provenance)
            continue
        if rule.values_file is not None:
            fragment = read_file(str(render(rule.values_file, context)))
        else:
            fragment = render(rule.values or {}, context)
        deep_merge(values, fragment, rule.name, provenance)
    return Evaluation(values=values, provenance=provenance, applied=tuple(applied))
