"""The extras beyond the card, one folder each, registered here by one line of `REGISTERED`
(extensions/base.py: the interface). Removing one means deleting its folder and its line;
the core (reconcile/machine.py) names none of them."""

from __future__ import annotations

from importlib import import_module

from kyma_gpu.extensions.base import Extension
from kyma_gpu.reconcile.machine import Machine

REGISTERED: tuple[str, ...] = (
    "workload_protection",
    "node_marks",
    "own_flux",
)
"""The extensions' folders, in the order the state machine asks them at a `Point`."""


def _load(folder: str) -> Extension:
    extension = import_module(f"{__name__}.{folder}").EXTENSION
    if not isinstance(extension, Extension):
        raise TypeError(f"{__name__}.{folder}.EXTENSION is no Extension")
    return extension


EXTENSIONS: tuple[Extension, ...] = tuple(_load(folder) for folder in REGISTERED)
MACHINE = Machine(EXTENSIONS)
"""The core's table with every registered extension's."""
NODE_FOLDS = tuple(e.node_fold for e in EXTENSIONS if e.node_fold is not None)
"""The registered extensions' shares of the Node fold (facts/node.py `observe_node`)."""
