"""What `spec.values` may hold: chart values that stay values.

Helm prints many values into its YAML without quoting them (the last line of the chart's
clusterpolicy.yaml: `imagePullPolicy: {{ .Values.kataSandboxDevicePlugin.imagePullPolicy }}`).
A line break in such a value starts a new key, and a line break followed by `---` a new object
of the release, installed with the release's rights. YAML counts more than `\\n` as a line
break (CR, NEL, LS, PS), and other control characters make Helm's YAML unreadable. So no key or
string of spec.values may contain a line break or a control character (tab excepted). Line
breaks are allowed in the few texts the charts print as block text or through `toYaml`, where
they stay text: the device plugin's and the MIG manager's configuration files and the DCGM
exporter's metrics list (tests/golden/test_render_property.py renders every string leaf with
hostile strings and proves that no value adds, removes or renames an object).

Size limits keep the values what chart values are, and keep the module able to read and write
them: at most MAX_DEPTH levels deep, MAX_ENTRIES entries (map keys and list items), MAX_TEXT
characters of keys and strings. Deeper values once made every reconcile pass fail in silence
(pydantic's serialiser gave up at about 250 levels).

The same checks run twice with the same words: in the model (`kyma-gpu plan`, the operator's
Invalid phase) and at admission, in the ValidatingAdmissionPolicy generated from these
constants (api/policy.py). CEL cannot recurse, so both walk the values level by level.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 20
MAX_ENTRIES = 2000
MAX_TEXT = 131072
PREFIX_SHOWN = 40
"""A refused string is shown up to its first bad character, at most this many characters."""

CONTROL = r"[\x00-\x08\x0a-\x1f\x7f-\x9f\x{2028}\x{2029}\x{feff}]"
"""Line breaks (LF, CR, NEL, LS, PS), other control characters and the byte-order mark: RE2,
as CEL runs it. Tab is allowed."""
CONTROL_IN_TEXT = r"[\x00-\x08\x0b-\x1f\x7f-\x9f\x{2028}\x{2029}\x{feff}]"
"""The same without LF: for the texts below."""
TEXT_VALUES: tuple[tuple[str, ...], ...] = (
    ("devicePlugin", "config", "data", "*"),
    ("migManager", "config", "data", "*"),
    ("dcgmExporter", "config", "data"),
)
"""Values the charts print as text (toYaml, or an indented block), where a line break stays
inside the string: configuration files and the DCGM metrics list. "*" is any key."""

NAMING_VALUES: tuple[tuple[str, ...], ...] = (
    ("devicePlugin", "config", "name"),
    ("migManager", "config", "name"),
    ("dcgmExporter", "config", "name"),
)
"""Values that name an object of the release on purpose: the ConfigMap the chart creates from
the config text beside it (create: true), or the one it reads. DNS names only, so they can
rename that ConfigMap and nothing else."""
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
NAME_MAX = 253
NAME_MESSAGE = (
    f"it names a ConfigMap of the release: a DNS name (lowercase letters, digits, '-' and "
    f"'.', at most {NAME_MAX} characters)"
)

IMAGE_KEYS: tuple[str, ...] = ("repository", "image", "version", "tag", "digest")
"""Keys that name an image or part of it, at any depth of either chart (the gpu-operator chart:
<component>.repository/image/version, driver.manager.*, vgpuManager.driverManager.*; its NFD
subchart: image.repository/tag). Who picks the images is the platform: a Gpu picks one of the
registry mirrors a cluster administrator lists (spec.source.imageRegistry)."""
COMMAND_KEYS: tuple[str, ...] = ("args", "extraArgs", "command", "initContainers")
"""Keys that set what a container of the release runs: <component>.args (the ClusterPolicy's
operands), NFD's master/worker/gc/topologyUpdater extraArgs and initContainers."""
CODE_VALUES: tuple[tuple[str, ...], ...] = (
    ("driver", "repoConfig"),
    ("driver", "certConfig"),
    ("kataManager", "config"),
)
"""Values that make a privileged operand fetch code from where the Gpu says: the driver
container's package repositories and the certificates it trusts for them, the Kata manager's
artifacts (kernels and runtimes pulled from an OCI registry onto the host)."""
IMAGE_MESSAGE = (
    "it names an image, a container's command or where a privileged container fetches code "
    "from; that is the platform's choice: a cluster administrator lists registry mirrors in "
    "the ConfigMap kyma-system/kyma-gpu-chart-sources (key registries) and the Gpu picks one "
    "in spec.source.imageRegistry (docs/security.md#image-registries)"
)

REASON = (
    "Helm prints chart values into YAML, where a line break starts new keys or objects; only "
    "tab is allowed (line breaks only in " + ", ".join(".".join(p) for p in TEXT_VALUES) + ")"
)
DEPTH_MESSAGE = (
    f"spec.values may nest at most {MAX_DEPTH} levels deep: chart values are not deeper, and "
    "the module must be able to read and write them"
)


def _python(pattern: str) -> re.Pattern[str]:
    """RE2's \\x{...} as Python writes it."""
    return re.compile(re.sub(r"\\x\{([0-9a-f]+)\}", lambda m: f"\\u{int(m[1], 16):04x}", pattern))


_CONTROL = _python(CONTROL)
_NAME = re.compile(NAME_PATTERN)
_CONTROL_IN_TEXT = _python(CONTROL_IN_TEXT)

Path = tuple[str | int, ...]


def path_text(path: Sequence[str | int]) -> str:
    """spec.values.a.b[0].c"""
    return "spec.values" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def is_text_value(path: Path) -> bool:
    return any(
        len(path) == len(p) and all(want in ("*", got) for want, got in zip(p, path, strict=True))
        for p in TEXT_VALUES
    )


def levels(values: Any) -> Iterator[list[tuple[Path, Any]]]:
    """The nodes at path length 1, 2, ... MAX_DEPTH: what CEL's variables v1..v20 hold."""
    level: list[tuple[Path, Any]] = [((), values)]
    for _ in range(MAX_DEPTH):
        children: list[tuple[Path, Any]] = []
        for path, node in level:
            if isinstance(node, dict):
                children += [((*path, k), v) for k, v in node.items()]
            elif isinstance(node, list):
                children += [((*path, i), v) for i, v in enumerate(node)]
        yield children
        level = children


@dataclass(frozen=True, slots=True)
class ValuesError:
    """The first rule spec.values breaks: where, and the message (the API server's words)."""

    path: str
    message: str

    @property
    def text(self) -> str:
        return f"{self.path}: Invalid value: {self.message}"


def _shown(text: str, bad: re.Pattern[str]) -> str:
    found = bad.search(text)
    end = found.start() if found is not None else len(text)
    return text[: min(end, PREFIX_SHOWN)]


def values_error(values: Any) -> ValuesError | None:
    """None when spec.values may be written to a HelmRelease as it is."""
    nodes: list[tuple[Path, Any]] = []
    deepest: list[tuple[Path, Any]] = []
    for level in levels(values):
        nodes += level
        deepest = level
    return (
        _too_deep(deepest)
        or _too_big(nodes)
        or next(filter(None, (_bad_key(p) for p, _ in nodes)), None)
        or next(filter(None, (_bad_string(p, v) for p, v in nodes)), None)
        or next(filter(None, (_bad_name(p, v) for p, v in nodes)), None)
        or next(filter(None, (_image_value(p) for p, _ in nodes)), None)
    )


def _too_deep(deepest: list[tuple[Path, Any]]) -> ValuesError | None:
    for path, node in deepest:
        if isinstance(node, dict | list) and node:
            return ValuesError(path_text(path), DEPTH_MESSAGE)
    return None


def text_size(path: Path, node: Any) -> int:
    key = len(path[-1]) if isinstance(path[-1], str) else 0
    return key + (len(node) if isinstance(node, str) else 0)


def _too_big(nodes: list[tuple[Path, Any]]) -> ValuesError | None:
    if len(nodes) > MAX_ENTRIES:
        message = f"spec.values may hold at most {MAX_ENTRIES} entries, it holds {len(nodes)}"
        return ValuesError("spec.values", message)
    total = sum(text_size(p, v) for p, v in nodes)
    if total > MAX_TEXT:
        message = (
            f"the keys and strings of spec.values may total at most {MAX_TEXT} characters, "
            f"they total {total}"
        )
        return ValuesError("spec.values", message)
    return None


def _bad_key(path: Path) -> ValuesError | None:
    key = path[-1]
    if not isinstance(key, str) or _CONTROL.search(key) is None:
        return None
    shown = _shown(key, _CONTROL)
    message = f'a key holds a line break or control character after "{shown}": {REASON}'
    return ValuesError(path_text(path[:-1]), message)


def _bad_string(path: Path, node: Any) -> ValuesError | None:
    if not isinstance(node, str):
        return None
    bad = _CONTROL_IN_TEXT if is_text_value(path) else _CONTROL
    if bad.search(node) is None:
        return None
    shown = _shown(node, bad)
    message = f'a line break or control character after "{shown}": {REASON}'
    return ValuesError(path_text(path), message)


def _bad_name(path: Path, node: Any) -> ValuesError | None:
    if path not in NAMING_VALUES:
        return None
    if isinstance(node, str) and len(node) <= NAME_MAX and _NAME.match(node):
        return None
    return ValuesError(path_text(path), NAME_MESSAGE)


def is_image_value(path: Path) -> bool:
    """A key of IMAGE_KEYS or COMMAND_KEYS (outside the configuration texts), or CODE_VALUES."""
    key = path[-1]
    if key in IMAGE_KEYS or key in COMMAND_KEYS:
        return not is_text_value(path)
    return path in CODE_VALUES


def _image_value(path: Path) -> ValuesError | None:
    return ValuesError(path_text(path), IMAGE_MESSAGE) if is_image_value(path) else None
