"""No module of the operator holds mutable state (issue 44, point 1).

Every module of kyma_gpu (and of kyma_gpu_tools) is imported, and every object a module binds
at its top level is judged: it must be immutable all the way down (an atom, a tuple or
frozenset of immutables, a MappingProxyType of them, a frozen dataclass or frozen pydantic
model of them, an enum member, a compiled pattern, a typing construct) or code (a module, a
class, a function). A list, dict, set or bytearray, an instance of a class that keeps a
`__dict__`, or a function behind a functools cache is state the process shares: it belongs in
an object with an owner (the Loop, the Catalog, the Informers), where a test can make a fresh
one. What must stay is listed in `_ALLOWED`, each with its reason.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import importlib
import inspect
import logging
import pkgutil
import re
import types
import typing
from collections.abc import Iterator

import pydantic

_ALLOWED: typing.Mapping[str, str] = types.MappingProxyType({
    "kyma_gpu.api.values._loaded": "the default rules directory's allowlist, read on first use "
    "(nothing is read at import), kept in a bounded cachetools cache by directory: what a "
    "validation without the Catalog's list holds spec.values to",
})  # fmt: skip
"""`module.name` -> why it must stay mutable. Nothing else: other packaged data is kept by an
owner that reads it when first needed (the own Flux's bundle: its configuration's `FluxBundle`);
tables are MappingProxyType, tuples and frozensets, copied into plain dicts and lists where YAML
or JSON dumps them."""

_PACKAGES = ("kyma_gpu", "kyma_gpu_tools")

_ATOMS = (type(None), bool, int, float, complex, str, bytes, range, re.Pattern, type(Ellipsis))

_CODE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.GenericAlias,
    types.UnionType,
    typing.TypeVar,
    typing.ParamSpec,
    logging.Logger,  # process-wide registry of loggers (logging.getLogger): Python's by design
)
"""Code and typing constructs: what they hold is the program, not its state."""


def _modules() -> Iterator[types.ModuleType]:
    for package in _PACKAGES:
        try:
            root = importlib.import_module(package)
        except ModuleNotFoundError:
            continue  # kyma_gpu_tools before the split
        yield root
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            yield importlib.import_module(info.name)


def _first(parts: Iterator[tuple[str, object]], seen: frozenset[int]) -> str | None:
    """The first of the named parts that is mutable, with its path."""
    return next((f"{where} {why}" for where, part in parts if (why := mutable(part, seen))), None)


def _parts(obj: object) -> Iterator[tuple[str, object]] | None:
    """What an immutable container holds, by path; None: `obj` is no immutable container."""
    if isinstance(obj, (tuple, frozenset)):
        return ((f"[{i}]", item) for i, item in enumerate(obj))
    if isinstance(obj, types.MappingProxyType):
        return ((f"[{k!r}]", part) for k, v in obj.items() for part in (k, v))
    if getattr(getattr(type(obj), "__dataclass_params__", None), "frozen", False):
        return ((f".{f.name}", getattr(obj, f.name)) for f in dataclasses.fields(obj))  # type: ignore[arg-type]
    if isinstance(obj, pydantic.BaseModel) and type(obj).model_config.get("frozen"):
        return ((f".{name}", getattr(obj, name)) for name in type(obj).model_fields)
    if isinstance(obj, functools.partial):
        return iter((("func", obj.func), ("args", obj.args), ("keywords", obj.keywords)))
    return None


def _immutable(obj: object) -> bool:
    """An atom, code, an enum member (its value was fixed when its class was made) or a typing
    construct (typing's own private classes: aliases, special forms)."""
    return isinstance(obj, (_ATOMS, _CODE, enum.Enum)) or type(obj).__module__ in (
        "typing",
        "typing_extensions",
    )


def mutable(obj: object, seen: frozenset[int] = frozenset()) -> str | None:
    """Why `obj` is mutable (the path to its mutable part), or None: immutable all the way
    down."""
    if id(obj) in seen or _immutable(obj):
        return None
    if callable(obj) and hasattr(obj, "cache_info"):
        return "a function behind a functools cache"
    if isinstance(obj, (list, dict, set, bytearray)):
        return f"a {type(obj).__name__}"
    parts = _parts(obj)
    if parts is not None:
        return _first(parts, seen | {id(obj)})
    return f"an instance of {type(obj).__module__}.{type(obj).__qualname__}"


def _bound_here(module: types.ModuleType) -> Iterator[str]:
    """The names a module's own top-level statements bind: assignments, definitions, `for`
    and `with` targets; not imports (an imported object is judged where it is bound)."""
    todo: list[ast.AST] = [ast.parse(inspect.getsource(module))]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name  # its body binds names of its own
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id
        elif not isinstance(node, (ast.Lambda, ast.comprehension)):
            todo += ast.iter_child_nodes(node)


def offenders() -> dict[str, str]:
    """`module.name` -> why, for every module-level binding of the packages that is mutable
    (names bound inside functions are not module-level and are skipped by `vars(module)`)."""
    found: dict[str, str] = {}
    for module in _modules():
        namespace = vars(module)
        for name in sorted(set(_bound_here(module)) & set(namespace)):
            why = mutable(namespace[name])
            if why is not None:
                found[f"{module.__name__}.{name}"] = why
    return found


def test_no_module_holds_mutable_state() -> None:
    found = {name: why for name, why in offenders().items() if name not in _ALLOWED}
    assert not found, "module-level mutable state:\n" + "\n".join(
        f"  {name}: {why}" for name, why in sorted(found.items())
    )


def test_every_allowed_entry_still_exists() -> None:
    """An entry of `_ALLOWED` that is fixed goes from the list."""
    assert not set(_ALLOWED) - set(offenders())
