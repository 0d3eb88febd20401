"""The values-rules engine: conditions, templates and a deep merge that remembers who set what.

Pure: rules come in as parsed data, the context as a flat mapping of dotted keys.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_TEMPLATE = re.compile(r"\$\{([A-Za-z0-9_.-]+)\}")
_OPERATORS = {"not", "contains", "exists"}


class RuleError(ValueError):
    """A rule file is malformed, or a rule refers to something that does not exist."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One ordered rule of values-rules/rules.yaml."""

    name: str
    why: str
    when: Mapping[str, Any]
    values: Mapping[str, Any] | None = None
    values_file: str | None = None
    for_each: str | None = None
    append_to: str | None = None
    item: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RuleSet:
    """All rules, in order, and the condition of the image mirror step."""

    rules: tuple[Rule, ...]
    mirror_when: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RuleSet:
        raw_rules = data.get("rules")
        if not isinstance(raw_rules, list) or not raw_rules:
            raise RuleError("rules.yaml: 'rules' must be a non-empty list")
        rules: list[Rule] = []
        seen: set[str] = set()
        for index, raw in enumerate(raw_rules):
            rules.append(_parse_rule(index, raw, seen))
        mirror = data.get("imageMirror") or {}
        mirror_when = mirror.get("when") or {} if isinstance(mirror, Mapping) else {}
        _check_when("imageMirror", mirror_when)
        return cls(rules=tuple(rules), mirror_when=mirror_when)


def _parse_rule(index: int, raw: Any, seen: set[str]) -> Rule:
    where = f"rules.yaml: rule #{index + 1}"
    if not isinstance(raw, Mapping):
        raise RuleError(f"{where} must be a mapping, got {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise RuleError(f"{where} needs a name")
    where = f"rules.yaml: rule {name!r}"
    if name in seen:
        raise RuleError(f"{where} is defined twice")
    seen.add(name)
    allowed = {"name", "why", "when", "values", "valuesFile", "forEach", "appendTo", "item"}
    unknown = set(raw) - allowed
    if unknown:
        raise RuleError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    when = raw.get("when") or {}
    _check_when(where, when)
    bodies = [k for k in ("values", "valuesFile", "item") if k in raw]
    if len(bodies) != 1:
        raise RuleError(f"{where} needs exactly one of values, valuesFile, item; got {bodies}")
    if "item" in raw and (raw.get("forEach") != "pools" or not raw.get("appendTo")):
        raise RuleError(f"{where}: item needs forEach: pools and appendTo: <list key>")
    return Rule(
        name=name,
        why=str(raw.get("why") or ""),
        when=when,
        values=raw.get("values"),
        values_file=raw.get("valuesFile"),
        for_each=raw.get("forEach"),
        append_to=raw.get("appendTo"),
        item=raw.get("item"),
    )


def _check_when(where: str, when: Any) -> None:
    if not isinstance(when, Mapping):
        raise RuleError(f"{where}: 'when' must be a mapping of context key to condition")
    for key, cond in when.items():
        if isinstance(cond, Mapping) and (len(cond) != 1 or next(iter(cond)) not in _OPERATORS):
            raise RuleError(
                f"{where}: condition on {key!r} must be a value, a list, or one of "
                f"{sorted(_OPERATORS)}; got {dict(cond)!r}"
            )


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
