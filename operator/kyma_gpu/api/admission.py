"""Say a spec error the way the API server says it.

The CRD (generated from the models) and the models refuse the same specs. This module makes
them refuse with the same words: a pydantic error becomes the `field.Error` text the API server
prints for the OpenAPI or CEL rule behind it, so `kyma-gpu plan`, the Gpu status and
`kubectl apply` agree. tests/integration/test_admission.py holds both sides to one table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)
_EXPECTED_TYPE = MappingProxyType(
    {
        "string_type": "string",
        "bool_type": "boolean",
        "model_type": "object",
        "model_attributes_type": "object",
        "dict_type": "object",
        "list_type": "array",
        "int_type": "integer",
    }
)


def json_type(value: Any) -> str:
    """The JSON type name of a value, as the API server names it."""
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "object")


def field_path(loc: Sequence[int | str], root: str = "spec") -> str:
    """`spec.source.imagePullSecrets[0]` from pydantic's location."""
    out = root
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _quoted(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, default=str)


def _unsupported(path: str, err: ErrorDetails) -> str:
    if not isinstance(err["input"], str):  # the schema's type check comes first
        got = json_type(err["input"])
        return f'{path}: Invalid value: "{got}": {path} in body must be of type string: "{got}"'
    expected = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
    supported = ", ".join(json.dumps(v) for v in expected)
    return f"{path}: Unsupported value: {_quoted(err['input'])}: supported values: {supported}"


def _pattern(path: str, err: ErrorDetails) -> str:
    pattern = (err.get("ctx") or {}).get("pattern", "")
    return (
        f"{path}: Invalid value: {_quoted(err['input'])}: {path} in body should match '{pattern}'"
    )


def _too_long(path: str, err: ErrorDetails) -> str:
    limit = (err.get("ctx") or {}).get("max_length")
    if isinstance(err["input"], str):
        return f"{path}: Too long: may not be more than {limit} bytes"
    return f"{path}: Too many: {len(err['input'])}: must have at most {limit} items"


def _wrong_type(path: str, err: ErrorDetails) -> str:
    got = json_type(err["input"])
    want = _EXPECTED_TYPE[err["type"]]
    return f'{path}: Invalid value: "{got}": {path} in body must be of type {want}: "{got}"'


def _bound(path: str, err: ErrorDetails) -> str:
    ctx = err.get("ctx") or {}
    side, limit = ("greater", ctx["ge"]) if "ge" in ctx else ("less", ctx.get("le"))
    return (
        f"{path}: Invalid value: {_quoted(err['input'])}: {path} in body should be {side} than "
        f"or equal to {limit}"
    )


def _required(path: str, err: ErrorDetails) -> str:
    return f"{path}: Required value"


def _unknown(path: str, err: ErrorDetails) -> str:
    return f'unknown field "{path}"'


def _custom(path: str, err: ErrorDetails) -> str:
    """A CEL rule's message: the rule sits on the object that holds the offending key."""
    message = err["msg"].removeprefix("Value error, ")
    owner = str((err.get("ctx") or {}).get("owner", path))
    return f"{owner}: Invalid value: {message}"


def _field_rule(path: str, err: ErrorDetails) -> str:
    """A CEL rule on a scalar field: the API server names the field and quotes its value."""
    return f"{path}: Invalid value: {_quoted(err['input'])}: {err['msg']}"


_FORMATS: Mapping[str, Callable[[str, ErrorDetails], str]] = MappingProxyType(
    {
        "enum": _unsupported,
        "literal_error": _unsupported,
        "string_pattern_mismatch": _pattern,
        "string_too_long": _too_long,
        "too_long": _too_long,
        "extra_forbidden": _unknown,
        "greater_than_equal": _bound,
        "less_than_equal": _bound,
        "missing": _required,
        "value_error": _custom,
        "refused_value": _custom,
        "field_rule": _field_rule,
        "values_rule": _custom,
        "spec_values": lambda path, err: err["msg"],  # api/values.py said it all already
        **dict.fromkeys(_EXPECTED_TYPE, _wrong_type),
    }
)


SHOWN = 5
"""A status names this many errors of a spec, then counts the rest."""


def admission_message(err: ValidationError, root: str = "spec") -> str:
    """Each error in the API server's words (pydantic's own words where none), up to SHOWN,
    then how many more."""
    errors = err.errors()
    shown = [error_text(e, field_path(e["loc"], root)) for e in errors[:SHOWN]]
    more = len(errors) - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more else "")


def error_text(err: ErrorDetails, path: str) -> str:
    """One error at `path` in the API server's words (pydantic's own words where none)."""
    formatter = _FORMATS.get(err["type"])
    return formatter(path, err) if formatter else f"{path}: {err['msg']}"
