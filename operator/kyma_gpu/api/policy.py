"""The ValidatingAdmissionPolicy that checks `spec.values` at admission, generated from
api/values.py.

The CRD's own CEL rules cannot see spec.values: a field that preserves unknown fields shows CEL
only the keys its schema declares. A ValidatingAdmissionPolicy sees the object as it came.
CEL cannot recurse either, so the policy walks the values level by level: variable v<i> holds
the nodes at path length i, each as [path, value]; v20 is the deepest level kept. The checks
and their words are those of api/values.py, in the same order, so that `kubectl apply` and
`kyma-gpu plan` refuse a spec alike (tests/integration/test_admission.py holds them to one
table). `make manifests` writes it to config/admission/; a unit test fails when the committed
file differs.
"""

from __future__ import annotations

from typing import Any

from kyma_gpu.api.models import API_GROUP, PLURAL
from kyma_gpu.api.resources import module_labels
from kyma_gpu.api.values import (
    CODE_VALUES,
    COMMAND_KEYS,
    CONTROL,
    CONTROL_IN_TEXT,
    DEPTH_MESSAGE,
    IMAGE_KEYS,
    IMAGE_MESSAGE,
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_TEXT,
    NAME_MAX,
    NAME_MESSAGE,
    NAME_PATTERN,
    NAMING_VALUES,
    PREFIX_SHOWN,
    REASON,
    TEXT_VALUES,
)
from kyma_gpu.yamlio import dump

NAME = "kyma-gpu-values"
_KEY = "n[0][size(n[0]) - 1]"
_CONTAINER = "(type(n[1]) == map || type(n[1]) == list)"


def _str(text: str) -> str:
    """A CEL single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _path(path: str) -> str:
    """spec.values.a[0].b of a CEL list of keys and indices."""
    return (
        f"'spec.values' + {path}.map(p, type(p) == int ? '[' + string(p) + ']' : '.' + p).join('')"
    )


def _shown(text: str, pattern: str) -> str:
    """The text up to its first character that `pattern` matches, at most PREFIX_SHOWN."""
    at = f"{text}.indexOf({text}.find(r'{pattern}'))"  # no cel.bind in admission policies
    return f"{text}.substring(0, {at} < {PREFIX_SHOWN} ? {at} : {PREFIX_SHOWN})"


def _is_text(node: str, patterns: tuple[tuple[str, ...], ...] = TEXT_VALUES) -> str:
    """True for the nodes at one of `patterns` (values.TEXT_VALUES unless told)."""
    alternatives = []
    for pattern in patterns:
        parts = [f"size({node}[0]) == {len(pattern)}"]
        parts += [f"{node}[0][{i}] == {_str(k)}" for i, k in enumerate(pattern) if k != "*"]
        alternatives.append("(" + " && ".join(parts) + ")")
    return " || ".join(alternatives)


def _variables() -> list[dict[str, str]]:
    children = (
        "type(n[1]) == map ? n[1].map(k, [dyn(n[0] + [dyn(k)]), dyn(n[1][k])])"
        " : (type(n[1]) == list ? lists.range(size(n[1])).map(i, [dyn(n[0] + [dyn(i)]),"
        " dyn(n[1][i])]) : [])"
    )
    out = [{"name": "v0", "expression": "has(object.spec.values) ? "
            "[[dyn([]), dyn(object.spec.values)]] : []"}]  # fmt: skip
    for level in range(1, MAX_DEPTH + 1):
        expression = f"variables.v{level - 1}.map(n, {children}).flatten()"
        out.append({"name": f"v{level}", "expression": expression})
    every = " + ".join(f"variables.v{level}" for level in range(1, MAX_DEPTH + 1))
    out.append({"name": "nodes", "expression": every})
    text = (
        f"variables.nodes.map(n, (type({_KEY}) == string ? size({_KEY}) : 0)"
        " + (type(n[1]) == string ? size(n[1]) : 0)).sum()"
    )
    out.append({"name": "text", "expression": text})
    return out


def _first(collection: str, condition: str, message: str) -> str:
    return f"{collection}.filter(n, {condition}).map(n, {message})[0]"


def _depth() -> dict[str, str]:
    deep = f"{_CONTAINER} && size(n[1]) > 0"
    message = f"{_path('n[0]')} + ': Invalid value: ' + {_str(DEPTH_MESSAGE)}"
    return {
        "expression": f"variables.v{MAX_DEPTH}.all(n, !({deep}))",
        "message": f"spec.values: Invalid value: {DEPTH_MESSAGE}",
        "messageExpression": _first(f"variables.v{MAX_DEPTH}", deep, message),
    }


def _size() -> list[dict[str, str]]:
    entries = f"spec.values may hold at most {MAX_ENTRIES} entries, it holds "
    text = f"the keys and strings of spec.values may total at most {MAX_TEXT} characters, "
    return [
        {
            "expression": f"size(variables.nodes) <= {MAX_ENTRIES}",
            "message": f"spec.values: Invalid value: {entries}more",
            "messageExpression": f"'spec.values: Invalid value: ' + {_str(entries)}"
            " + string(size(variables.nodes))",
        },
        {
            "expression": f"variables.text <= {MAX_TEXT}",
            "message": f"spec.values: Invalid value: {text}they total more",
            "messageExpression": f"'spec.values: Invalid value: ' + {_str(text + 'they total ')}"
            " + string(variables.text)",
        },
    ]


def _keys() -> dict[str, str]:
    bad = f"type({_KEY}) == string && {_KEY}.matches(r'{CONTROL}')"
    parent = "n[0].slice(0, size(n[0]) - 1)"
    message = (
        f"{_path(parent)} + ': Invalid value: a key holds a line break or control character "
        f"after \"' + {_shown(_KEY, CONTROL)} + '\": ' + {_str(REASON)}"
    )
    return {
        "expression": f"!variables.nodes.exists(n, {bad})",
        "message": f"spec.values: Invalid value: a key holds a line break or control character: "
        f"{REASON}",
        "messageExpression": _first("variables.nodes", bad, message),
    }


def _strings() -> dict[str, str]:
    pattern = f"({_is_text('n')} ? r'{CONTROL_IN_TEXT}' : r'{CONTROL}')"
    bad = f"type(n[1]) == string && n[1].matches({pattern})"
    shown = f"({_is_text('n')} ? {_shown('n[1]', CONTROL_IN_TEXT)} : {_shown('n[1]', CONTROL)})"
    message = (
        f"{_path('n[0]')} + ': Invalid value: a line break or control character after \"' + "
        f"{shown} + '\": ' + {_str(REASON)}"
    )
    return {
        "expression": f"!variables.nodes.exists(n, {bad})",
        "message": f"spec.values: Invalid value: a line break or control character: {REASON}",
        "messageExpression": _first("variables.nodes", bad, message),
    }


def _names() -> dict[str, str]:
    naming = _is_text("n", NAMING_VALUES)
    good = f"type(n[1]) == string && size(n[1]) <= {NAME_MAX} && n[1].matches(r'{NAME_PATTERN}')"
    bad = f"({naming}) && !({good})"
    message = f"{_path('n[0]')} + ': Invalid value: ' + {_str(NAME_MESSAGE)}"
    return {
        "expression": f"!variables.nodes.exists(n, {bad})",
        "message": f"spec.values: Invalid value: {NAME_MESSAGE}",
        "messageExpression": _first("variables.nodes", bad, message),
    }


def _images() -> dict[str, str]:
    keys = "[" + ", ".join(_str(k) for k in (*IMAGE_KEYS, *COMMAND_KEYS)) + "]"
    named = f"type({_KEY}) == string && {_KEY} in {keys} && !({_is_text('n')})"
    bad = f"({named}) || ({_is_text('n', CODE_VALUES)})"
    message = f"{_path('n[0]')} + ': Invalid value: ' + {_str(IMAGE_MESSAGE)}"
    return {
        "expression": f"!variables.nodes.exists(n, {bad})",
        "message": f"spec.values: Invalid value: {IMAGE_MESSAGE}",
        "messageExpression": _first("variables.nodes", bad, message),
    }


_VALUES_CHANGED = (
    "request.operation == 'CREATE' || (has(object.spec.values) && "
    "(!has(oldObject.spec.values) || object.spec.values != oldObject.spec.values))"
)
"""Only a spec.values that is new or changed is checked: a Gpu stored before a limit existed
must stay deletable (the manager's finalizer patch does not touch spec.values)."""


def policy() -> dict[str, Any]:
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [API_GROUP],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [PLURAL],
                }
            ]
        },
        "matchConditions": [{"name": "values-changed", "expression": _VALUES_CHANGED}],
        "variables": _variables(),
        "validations": [_depth(), *_size(), _keys(), _strings(), _names(), _images()],
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": module_labels("gpu-manager")},
        "spec": spec,
    }


def binding() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME, "labels": module_labels("gpu-manager")},
        "spec": {"policyName": NAME, "validationActions": ["Deny"]},
    }


def policy_yaml() -> str:
    header = (
        "# Generated by `make manifests` from operator/kyma_gpu/api/values.py (api/policy.py)."
        " Do not edit.\n"
    )
    return header + dump(policy()) + "---\n" + dump(binding())
