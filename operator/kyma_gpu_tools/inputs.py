"""What -f, --nodes and --sources hold, checked and recognised: a file given to the wrong flag
(a node list to -f, a Gpu to --nodes, the ConfigMap to -f) is named as what it is, with the
flag it belongs to. Every refusal is one line (UsageError) that names the file, what it holds
and what to do."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME
from kyma_gpu.api.models import API_GROUP, API_VERSION, KIND, SINGLETON_NAME, Gpu, GpuSpec
from kyma_gpu.extensions import NODE_FOLDS
from kyma_gpu.facts import MachineTypeRegistry, NodeError, NodeFacts, ObservedNode, observe_node
from kyma_gpu.plan import AllowedSources, Owner, allowed_sources_of
from kyma_gpu_tools.crd import SINGLETON_MESSAGE
from kyma_gpu_tools.reading import (
    GPU_ROLE,
    NODES_ROLE,
    RELEASE_ROLE,
    SOURCES_ROLE,
    Input,
    Item,
    UsageError,
    read_whole,
    stream_objects,
)
from kyma_gpu_tools.spec_errors import unknown_fields_message

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader where PyYAML has it (its scanner and parser are C), else PyYAML's."""
GPU_API_VERSION = f"{API_GROUP}/{API_VERSION}"


def _documents(path: str, text: str) -> list[Any]:
    """The documents of a small YAML or JSON file; empty documents (a trailing ---) dropped."""
    try:
        if text.lstrip()[:1] in ("{", "["):
            try:
                return [json.loads(text)]
            except ValueError:
                pass  # YAML's flow style, or not JSON after all: the YAML parser says
        return [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except RecursionError as err:  # both parsers read nested nodes recursively
        raise UsageError(
            f"{path}: nests too deep to read; a Gpu's spec.values holds only the chart "
            "values of values-rules/values-allowlist.yaml, a few levels deep"
        ) from err
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UsageError(f"{path}: not valid YAML{where}: {err.problem}") from err
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: not valid YAML: {err}") from err
    except (ValueError, TypeError, OverflowError) as err:  # a scalar YAML cannot construct
        raise UsageError(f"{path}: not valid YAML: {err}") from err


def _objects(path: str, text: str) -> list[Any]:
    """The objects of a file: each document, a List's (or NodeList's, GpuList's) items."""
    found: list[Any] = []
    for doc in _documents(path, text):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        items = doc.get("items") if isinstance(doc, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            found += items
        else:
            found.append(doc)
    return found


# -- what a file is ----------------------------------------------------------------------


def _kind(obj: Any) -> str | None:
    kind = obj.get("kind") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) else None


def recognised(objects: list[Any]) -> tuple[str, str] | None:
    """(what the objects are, the flag they belong to), when they are what another flag
    takes: Nodes (--nodes), a Gpu (-f), the ConfigMap of allowed sources (--sources)."""
    kinds = [_kind(o) for o in objects]
    if kinds and all(k == "Node" for k in kinds):
        count = len(kinds)
        return f"a node list ({count} Node{'s' if count != 1 else ''})", "--nodes"
    if kinds == [KIND]:
        return "a Gpu manifest", "-f"
    if kinds == ["ConfigMap"]:
        name = (objects[0].get("metadata") or {}).get("name")
        if name == CONFIG_MAP_NAME or "sources.yaml" in (objects[0].get("data") or {}):
            return f"the ConfigMap {CONFIG_MAP_NAME}", "--sources"
    return None


def _belongs_elsewhere(path: str, objects: list[Any], flag: str) -> UsageError | None:
    found = recognised(objects)
    if found is None or found[1] == flag:
        return None
    what, other = found
    return UsageError(f"{path}: {what}, not what {flag} takes: did you mean {other} {path}?")


def _one(path: str, text: str, flag: str, expected: str) -> Any:
    objects = _objects(path, text)
    wrong = _belongs_elsewhere(path, objects, flag)
    if wrong is not None:
        raise wrong
    if len(objects) != 1:
        said = "is empty" if not objects else f"holds {len(objects)} objects"
        raise UsageError(f"{path}: {said}; expected one object: {expected}")
    return objects[0]


# -- -f: the Gpu --------------------------------------------------------------------------


_NUMBER_WORDS = MappingProxyType({"int": "an integer", "float": "a number", "bool": "a boolean"})


def _quote_hint(err: ValidationError) -> str:
    """Every unquoted number or boolean where a string belongs: say to quote each, as meant."""
    read, fixed = [], []
    for error in err.errors():
        value = error.get("input")
        if error["type"] == "string_type" and isinstance(value, int | float | bool):
            where = ".".join(str(part) for part in error["loc"])
            read.append(f"{where}: {value!r} as {_NUMBER_WORDS[type(value).__name__]}")
            fixed.append(f'{error["loc"][-1]}: "{value}"')
    if not read:
        return ""
    if len(read) == 1:
        return f". YAML read {read[0]}; the field takes text: quote it as you mean it ({fixed[0]})"
    return (f". YAML read {', '.join(read[:-1])} and {read[-1]}; these fields take text: quote "
            f"them as you mean them ({', '.join(fixed)})")  # fmt: skip


def _validation_message(source: str, err: ValidationError) -> str:
    """The API server's words for the same errors (spec_errors.py); every unknown field, each
    with the closest valid name."""
    return f"{source}: {unknown_fields_message(err, Gpu, root='')}{_quote_hint(err)}"


def _not_a_gpu(path: str, data: dict[str, Any]) -> UsageError | None:
    kind, version = data.get("kind"), data.get("apiVersion")
    if kind == KIND and version == GPU_API_VERSION:
        return None
    found = f"kind {kind} (apiVersion {version})" if kind or version else "no kind and apiVersion"
    return UsageError(
        f"{path}: {found}, not a Gpu; -f takes a Gpu manifest: apiVersion {GPU_API_VERSION}, "
        f"kind {KIND} (config/samples/gpu.yaml)"
    )


def load_gpu(path: str | None, stdin: TextIO) -> tuple[GpuSpec, Owner | None]:
    """The spec and owner of the Gpu in `path` (None: the empty spec, no owner)."""
    if path is None:
        return GpuSpec(), None
    data = _one(path, read_whole(path, stdin, GPU_ROLE), "-f", GPU_ROLE.expected)
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a Gpu manifest (a mapping), got {type(data).__name__}")
    wrong = _not_a_gpu(path, data)
    if wrong is not None:
        raise wrong
    try:
        gpu = Gpu.model_validate(data)
    except ValidationError as err:
        raise UsageError(_validation_message(path, err)) from err
    if gpu.metadata.name != SINGLETON_NAME:
        raise UsageError(f"{path}: metadata.name {gpu.metadata.name!r}: {SINGLETON_MESSAGE}")
    uid = gpu.metadata.uid
    return gpu.spec, Owner(uid=uid, name=gpu.metadata.name) if uid else None


# -- --sources ----------------------------------------------------------------------------


def load_allowed_sources(path: str | None, stdin: TextIO) -> AllowedSources:
    """The ConfigMap of allowed chart sources (`kubectl get configmap -n kyma-system
    kyma-gpu-chart-sources -o yaml`); none: the default, NVIDIA's repository only."""
    if path is None:
        return AllowedSources()
    text = read_whole(path, stdin, SOURCES_ROLE)
    data = _one(path, text, "--sources", SOURCES_ROLE.expected)
    if not isinstance(data, dict) or data.get("kind") != "ConfigMap":
        found = _kind(data) or type(data).__name__
        raise UsageError(f"{path}: {found}, not a ConfigMap; expected {SOURCES_ROLE.expected}")
    return allowed_sources_of(data)


# -- --release ----------------------------------------------------------------------------


def load_release(path: str | None, stdin: TextIO) -> dict[str, Any] | None:
    """The running HelmRelease, to compare the plan's with; None: not given."""
    if path is None:
        return None
    data = _one(path, read_whole(path, stdin, RELEASE_ROLE), "--release", RELEASE_ROLE.expected)
    if not isinstance(data, dict) or data.get("kind") != "HelmRelease":
        found = _kind(data) or type(data).__name__
        raise UsageError(f"{path}: {found}, not a HelmRelease; expected {RELEASE_ROLE.expected}")
    return data


# -- --nodes ------------------------------------------------------------------------------


def _not_nodes(path: str, doc: Any) -> UsageError:
    found = recognised([doc])
    hint = f" ({found[0]}: did you mean {found[1]} {path}?)" if found else ""
    return UsageError(
        f"{path}: expected the output of `kubectl get nodes -o json` (a List with items) or "
        f"Nodes{hint}"
    )


def node_bodies(source: Input, tick: Callable[[], None] | None = None) -> Iterator[Any]:
    """Each Node body of a node list, as it is read: a List's items, or Node documents."""
    documents = 0
    for found in stream_objects(source, tick):
        if isinstance(found, Item):
            yield found.value
            continue
        documents += 1
        if found.items is None:
            if _kind(found.value) != "Node":
                raise _not_nodes(source.path, found.value)
            yield found.value
    if not documents:
        raise UsageError(
            f"{source.path}: empty; expected the output of `kubectl get nodes -o json` (did it "
            "fail?)"
        )


def load_nodes(path: str, stdin: TextIO) -> list[dict[str, Any]]:
    """Every Node body of a node list (a small one: tests, tools; the CLI folds as it reads)."""
    source = Input(path, stdin, NODES_ROLE)
    try:
        return list(node_bodies(source))
    finally:
        source.close()


@dataclass
class Fleet:
    """A node list folded as it was read: every Node's planning facts, and the GPU nodes (and
    any node that carries the manager's mark) as the manager observes them (GPU health)."""

    facts: list[NodeFacts] = field(default_factory=list)
    observed: list[ObservedNode] = field(default_factory=list)


def _item_error(path: str, index: int, body: Any, err: NodeError) -> UsageError:
    hint = ""
    if _kind(body) == KIND:
        hint = f": a Gpu manifest goes to -f (did you mean -f {path}?)"
    elif _kind(body) == "ConfigMap":
        hint = f": the ConfigMap of allowed chart sources goes to --sources {path}"
    return UsageError(f"{path}: item {index}: {err}{hint}")


def fold_nodes(
    path: str,
    stdin: TextIO,
    registry: MachineTypeRegistry,
    progress: Callable[[Input, int], None],
) -> Fleet:
    """The facts of every Node in `path`, one at a time: no Node body is kept. `progress` hears
    of each Node (the input, how many so far)."""
    source = Input(path, stdin, NODES_ROLE)
    fleet = Fleet()
    try:
        for index, body in enumerate(node_bodies(source)):
            try:
                observed = observe_node(body, registry, NODE_FOLDS)
            except NodeError as err:
                raise _item_error(path, index, body, err) from err
            fleet.facts.append(observed.facts)
            if observed.is_gpu or observed.extras:  # what the extensions keep: a mark to clear
                fleet.observed.append(observed)
            progress(source, index + 1)
    finally:
        source.close()
    return fleet
