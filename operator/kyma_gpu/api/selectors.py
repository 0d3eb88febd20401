"""Label selectors as a type: the string form that Kubernetes parses (`labels.Parse` in
k8s.io/apimachinery), refused at admission when the API server would refuse it later.

The NVIDIA upgrade controller lists pods with the selectors of spec.driver.upgradePolicy
(waitForCompletion.podSelector, drain.podSelector). A selector it cannot parse used to surface
only at the next driver rollout, as a 400 from the API server. One regular expression (RE2
syntax, which both CEL and pydantic's regex engine run) says what is accepted; the CRD's CEL
rule and the model use it, with the same message. tests/integration/test_selectors.py holds
it against the real API server's parser, selector by selector.

What it accepts: comma-separated requirements, each `key`, `!key`, `key=value`,
`key==value`, `key!=value`, `key in (v1,v2)`, `key notin (v1,v2)`, `key>N` or `key<N` (N of
digits only); spaces between tokens. Keys are qualified names (an optional lowercase DNS
prefix and `/`, then a name of at most 63 characters), values label values (at most 63
characters, may be empty). Stricter than Kubernetes in two ways: tabs and line breaks, which
it treats as spaces, are refused, and so is a selector of spaces only, which it reads as
"every pod" where the empty string means "none" to the NVIDIA controller's wait.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/"
_KEY = rf"(?:{_PREFIX})?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
_SET = rf"\( *{_VALUE}(?: *, *{_VALUE})* *\)"
_REQUIREMENT = (
    rf" *(?:! *{_KEY}|{_KEY}(?: *(?:==?|!=) *{_VALUE}| +(?:in|notin) *{_SET}"
    rf"| *[<>] *[0-9]{{1,18}})?) *"
)
LABEL_SELECTOR_PATTERN = rf"^{_REQUIREMENT}(?:,{_REQUIREMENT})*$"
"""One requirement or more, comma-separated (the empty selector is allowed separately)."""
PREFIX_PATTERN = r"[a-z0-9.-]*/"
"""A key's DNS prefix with its slash: values cannot contain `/`, so every match is a prefix."""
PREFIX_MAX = 253
MAX_LENGTH = 1024

LABEL_SELECTOR_MESSAGE = (
    "must be empty or a Kubernetes label selector: requirements separated by commas, each "
    "key, !key, key=value, key!=value, key in (v1,v2) or key notin (v1,v2); keys and values "
    "as in labels (names of at most 63 characters; a key may have a DNS prefix of at most "
    f"{PREFIX_MAX} characters and a slash)"
)
"""Said by the CEL rule on each selector field and by the model."""

_SELECTOR = re.compile(LABEL_SELECTOR_PATTERN)
_PREFIX_RE = re.compile(PREFIX_PATTERN)


def _cel_string(text: str) -> str:
    """A CEL string literal (double-quoted, backslashes and quotes escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cel_rule() -> dict[str, str]:
    """The CRD's x-kubernetes-validations entry for a selector field."""
    rule = (
        f"self == '' || (self.matches({_cel_string(LABEL_SELECTOR_PATTERN)}) && "
        f"self.findAll('{PREFIX_PATTERN}').all(p, size(p) <= {PREFIX_MAX + 1}))"
    )
    return {"rule": rule, "message": LABEL_SELECTOR_MESSAGE}


def is_label_selector(text: str) -> bool:
    """What the CEL rule accepts, and the API server's parser with it."""
    if text == "":
        return True
    if _SELECTOR.fullmatch(text) is None:
        return False
    return all(len(prefix) <= PREFIX_MAX + 1 for prefix in _PREFIX_RE.findall(text))


def _check(text: str) -> str:
    if not is_label_selector(text):
        raise PydanticCustomError("field_rule", LABEL_SELECTOR_MESSAGE, {})
    return text


def _schema_extra(schema: dict[str, Any]) -> None:
    schema["x-kubernetes-validations"] = [cel_rule()]


LabelSelector = Annotated[
    str,
    Field(max_length=MAX_LENGTH, json_schema_extra=_schema_extra),
    AfterValidator(_check),
]
"""A label selector in its string form; "" selects nothing."""
