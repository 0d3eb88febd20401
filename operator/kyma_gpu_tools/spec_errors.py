"""`kyma-gpu plan`'s words for a Gpu manifest the models refuse: every unknown field, each with
the closest valid name, as `kubectl apply` lists them, and every other error after them. The
manager never sees an unknown field (the API server prunes or refuses it), so this lives with
the CLI; the words for every other error are api/admission.py's, the same the Gpu status and
the API server give.
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ValidationError

from kyma_gpu.api.admission import error_text, field_path
from kyma_gpu.rules.data_models import allowed_keys

SHOWN = 10
"""Errors named in one message; the rest are counted."""


def unknown_fields_message(err: ValidationError, model: type[BaseModel], root: str = "spec") -> str:
    """Every error in the API server's words, the unknown fields first, each with the closest
    valid name (the API server lists every error too: `strict decoding error: unknown field
    "spec.a", unknown field "spec.b"`, and `[spec.a: ..., spec.b: ...]` for invalid values); at
    most SHOWN, the rest counted."""
    errors = err.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    said = []
    for e in unknown:
        loc = tuple(e["loc"])
        text = error_text(e, field_path(loc, root))
        close = difflib.get_close_matches(str(loc[-1]), allowed_keys(model, loc[:-1]), n=1)
        said.append(f'{text} (did you mean "{close[0]}"?)' if close else text)
    others = [error_text(e, field_path(e["loc"], root)) for e in errors
              if e["type"] != "extra_forbidden"]  # fmt: skip
    shown = [", ".join(said)] if said else []
    shown += others[: max(0, SHOWN - len(said))]
    more = len(said) + len(others) - SHOWN
    return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")
