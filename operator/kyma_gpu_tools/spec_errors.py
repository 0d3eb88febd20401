"""`kyma-gpu plan`'s words for a Gpu manifest the models refuse: every unknown field, each with
the closest valid name, as `kubectl apply` lists them. The manager never sees an unknown field
(the API server prunes or refuses it), so this lives with the CLI; the words for every other
error are api/admission.py's, the same the Gpu status and the API server give.
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ValidationError

from kyma_gpu.api.admission import admission_message, error_text, field_path
from kyma_gpu.rules.data_models import allowed_keys


def unknown_fields_message(err: ValidationError, model: type[BaseModel], root: str = "spec") -> str:
    """Every unknown field, each with the closest valid name (the API server lists them all
    too: `strict decoding error: unknown field "spec.a", unknown field "spec.b"`), then the
    first other error in the API server's words; admission_message when none is unknown."""
    errors = err.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if not unknown:
        return admission_message(err, root)
    said = []
    for e in unknown:
        loc = tuple(e["loc"])
        text = error_text(e, field_path(loc, root))
        close = difflib.get_close_matches(str(loc[-1]), allowed_keys(model, loc[:-1]), n=1)
        said.append(f'{text} (did you mean "{close[0]}"?)' if close else text)
    others = len(errors) - len(unknown)
    rest = next((e for e in errors if e["type"] != "extra_forbidden"), None)
    if rest is None:
        return ", ".join(said)
    first = error_text(rest, field_path(rest["loc"], root))
    more = f" (and {others - 1} more)" if others > 1 else ""
    return f"{', '.join(said)}; {first}{more}"
