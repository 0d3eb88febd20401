"""No value a Gpu editor can set adds, removes or renames an object of the release.

The supported charts (values-rules/charts/, packaged in ../shared/charts) are rendered with
`helm template` of the Helm that helm-controller embeds (tools/bin/helm), over the planned
values of a mixed fleet with every component and every typed field that reaches the chart
switched on (the most objects and leaves at once). Then hostile strings are put wherever the
module lets them through, and the rendered objects, as (kind, namespace, name), must be the
same set as without them:

- spec.values: every string leaf of the planned values and of the charts' own values.yaml,
  every value the templates read (`.Values.x.y`, so also keys without a default such as
  `nameOverride`), and a hostile key in every map the charts leave empty (labels,
  annotations, node selectors). The model decides what it lets through (GpuSpec: the same
  rules as the CRD's CEL and the values policy).
- the typed string fields of the spec: most never pass the model, the rest are planned and
  rendered.

One hostile string goes to every leaf that takes it at once, so each hostile string costs
one render per chart while nothing changes. A render that differs, or that Helm refuses, is
split in halves until the leaf is named: a violation names its leaf, and a leaf where Helm
refuses the string installs nothing (the release fails), which is no change of objects.
Leaves where Helm refuses even a plain name (the chart wants a map, a list or a number there)
are found once and left out for the rest. Renders run two at a time (two cores).
"""

from __future__ import annotations

import base64
import copy
import io
import itertools
import json
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kyma_gpu.api.chart_sources import NVIDIA_REPOSITORY
from kyma_gpu.api.models import GpuSpec
from kyma_gpu.api.values import Allowed, ValueType, default_allowlist
from kyma_gpu.facts import cluster_facts, node_facts
from kyma_gpu.plan import Plan, Verdict, allowed_sources_of, make_plan
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu_tools.cli import load_gpu, load_nodes

ALLOWLIST = default_allowlist()  # the module's list, as the CRD's schema is generated from it

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / "tools" / "bin" / "helm"
CHARTS = ROOT.parent / "shared" / "charts"
SCENARIO = ROOT / "tests" / "golden" / "scenarios" / "mixed-gardenlinux-ubuntu"
VERSIONS = sorted(p.stem for p in (ROOT / "values-rules" / "charts").glob("v*.yaml"))
NFD = "node-feature-discovery"
PARALLEL = 4
"""helm template runs wait on I/O half the time: four at once on two cores."""
CHUNK = 4
"""A group this small that differs or fails is tried leaf by leaf, not halved."""

_INJECTED = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kygpu-injected\n"
_TPL = base64.b64encode(("\n---\n" + _INJECTED).encode()).decode()
BENIGN = "kygpu-renamed"
"""Not hostile as text, but where a value names an object it would rename it."""
HOSTILE: tuple[str, ...] = (
    BENIGN,
    "' \" : {{ .Values | toYaml }}",
    'x{{ "' + _TPL + '" | b64dec }}',
    "a\n---\nkind: ClusterRole",
    "x\nmetadata:",
    "x\r\n---\r\n" + _INJECTED.replace("\n", "\r\n"),
    "x\u2028---\u2028" + _INJECTED.replace("\n", "\u2028"),
)
"""A plain name (where a value names an object); quotes, a colon and a flow mapping that is
also template code (where a value is printed unquoted, or into a quoted scalar without
`quote`, or reaches `tpl`); template code that emits an object (where a value reaches
`tpl`); a document separator and a new key after a line break (refused by the module but in
the three config texts, where the chart prints them as text); and the other line breaks YAML
knows. Quotes and braces share one string: each string costs a render for every leaf where
it breaks the YAML, and these break it at the same leaves."""
TYPED_FIELDS: tuple[tuple[str | int, ...], ...] = (
    ("driver", "version"),
    ("driver", "installerRelease"),
    ("driver", "upgradePolicy", "maxUnavailable"),
    ("driver", "upgradePolicy", "waitForCompletion", "podSelector"),
    ("driver", "upgradePolicy", "drain", "podSelector"),
    ("source", "chartName"),
    ("source", "secretRef"),
    ("source", "imageRegistry"),
    ("source", "imagePullSecrets", 0),
    ("components", "vgpuManagerImage"),
    ("sharing", "profiles", 0, "name"),
)
"""Every free string of the typed spec that reaches the values or the Flux objects (enums,
booleans and the chart version aside)."""
EVERY_TEXT: dict[str, Any] = {
    "migManager": {"config": {"create": True, "name": "kygpu-mig-config",
                   "data": {"config.yaml": "version: v1\nmig-configs: {}\n"}}},
    "dcgmExporter": {"config": {"create": True, "name": "kygpu-dcgm-metrics",
                                "data": "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency\n"}},
}  # fmt: skip
"""Through spec.values: the two config texts the chart creates ConfigMaps from."""
EVERY_SWITCH: dict[str, Any] = {"serviceMonitor": True, "nodeStatusExporter": True}
"""The optional components the typed fields switch on for this fleet without a finding."""
CHART_SWITCHES: dict[str, Any] = {
    key: {"enabled": True}
    for key in ("migManager", "gds", "gdrcopy", "sandboxWorkloads", "vgpuManager", "ccManager")
}
"""The rest, switched on in the planned values directly (the preflight refuses them for this
fleet, and spec.values may not switch components): the most objects and leaves at once."""
KITCHEN_SINK: dict[str, Any] = {
    "source": {"imageRegistry": "registry.example/mirror", "imagePullSecrets": ["pull"]},
    "driver": {"upgradePolicy": {"waitForCompletion": {"podSelector": "app=batch"},
                                 "drain": {"enable": True, "podSelector": "tier notin (x)"}}},
    "sharing": {"mode": "TimeSlicing", "replicas": 4,
                "profiles": [{"name": "mps-2", "mode": "MPS", "replicas": 2}]},
    "components": EVERY_SWITCH,
    "values": EVERY_TEXT,
}  # fmt: skip
"""A mixed fleet (one NVIDIADriver per OS pool in extraObjects) with every typed field that
reaches the chart set and every component on."""

Obj = tuple[str, str, str]
Leaf = tuple[Any, ...]
"""A path into the values; a last element KEY means "a hostile key in this map"."""
KEY = "\x00key"


@dataclass
class Tally:
    rendered: int = 0
    """(leaf, hostile string) pairs rendered and found without effect on the objects."""
    refused_by_module: int = 0
    refused_by_helm: int = 0
    not_strings: int = 0
    """Leaves where Helm refuses a plain name: maps, lists or numbers without a default."""
    renders: int = 0
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Refused:
    """Helm refused the values: its message, and the leaves its values schema named."""

    message: str
    schema_paths: tuple[Leaf, ...] = ()


Rendered = frozenset[Obj] | Refused


def _require_tools() -> None:
    if not HELM.exists():
        pytest.fail(f"{HELM} missing: run `make tools`", pytrace=False)
    missing = [v for v in VERSIONS if not (CHARTS / f"gpu-operator-{v}.tgz").exists()]
    if missing:
        pytest.fail(f"charts missing in {CHARTS}: {missing}", pytrace=False)


_SCHEMA_CHART = re.compile(r"^([\w.-]+):$")
_SCHEMA_PATH = re.compile(r"^- at '/([^']*)'")


def _schema_paths(stderr: str) -> tuple[Leaf, ...]:
    """What a values.schema.json refused: "node-feature-discovery:" then "- at '/a/b': ..."."""
    paths: list[Leaf] = []
    prefix: tuple[str, ...] = ()
    for line in stderr.splitlines():
        chart = _SCHEMA_CHART.match(line.strip())
        if chart:
            prefix = (chart[1],) if chart[1] == NFD else ()
        found = _SCHEMA_PATH.match(line.strip())
        if found:
            paths.append((*prefix, *found[1].split("/")))
    return tuple(paths)


@cache
def unpacked(chart: Path) -> Path:
    """The chart unpacked once per run: Helm then skips the gunzip on every render."""
    where = Path(tempfile.mkdtemp(prefix=f"kygpu-{chart.stem}-"))
    with tarfile.open(chart) as tar:
        tar.extractall(where, filter="data")
    return where / "gpu-operator"


def _helm(chart: Path, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as handle:
        json.dump(values, handle)  # JSON is YAML, and exact for every string
        handle.flush()
        return subprocess.run(
            [str(HELM), "template", "gpu-operator", str(unpacked(chart)),
             "--namespace", "gpu-operator", "--kube-version", "v1.36.0",
             "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
             "--api-versions", "resource.k8s.io/v1/DeviceClass", "-f", handle.name],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip


def helm_output(chart: Path, values: dict[str, Any]) -> str:
    result = _helm(chart, values)
    assert result.returncode == 0, result.stderr[-300:]
    return result.stdout


def render(chart: Path, values: dict[str, Any]) -> Rendered:
    """The rendered objects (kind, namespace, name), or Helm's refusal."""
    result = _helm(chart, values)
    if result.returncode != 0:
        message = result.stderr.strip() or "helm failed"
        return Refused(message[-300:], _schema_paths(message))
    try:
        docs = list(yaml.load_all(result.stdout, Loader=yaml.CSafeLoader))
    except yaml.YAMLError as err:
        return Refused(f"unreadable YAML: {err}")
    return frozenset(_identity(d) for d in docs if isinstance(d, dict) and d)


def _identity(doc: dict[str, Any]) -> Obj:
    found = doc.get("metadata")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    return (str(doc.get("kind")), str(meta.get("namespace", "")), str(meta.get("name", "")))


def render_all(chart: Path, values: Sequence[dict[str, Any]], tally: Tally) -> list[Rendered]:
    tally.renders += len(values)
    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(lambda v: render(chart, v), values))


def _string_leaves(node: Any, path: Leaf = ()) -> Iterator[Leaf]:
    """Strings, and a hostile key in each empty map (labels, annotations, selectors)."""
    if isinstance(node, dict):
        if not node and path:
            yield (*path, KEY)
        for key, value in node.items():
            yield from _string_leaves(value, (*path, key))
    elif isinstance(node, str) and path:
        yield path


@cache
def _chart_files(chart: Path) -> tuple[dict[str, Any], tuple[Leaf, ...], dict[str, Any]]:
    """The chart's default values (subchart under its key), the values its templates read,
    and the subchart's values schema."""
    defaults: dict[str, Any] = {}
    refs: list[Leaf] = []
    schema: dict[str, Any] = {}
    with tarfile.open(chart) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is None:
                continue
            prefix = (NFD,) if "charts" in parts[1:-1] else ()
            text = handle.read().decode("utf-8", errors="replace")
            if parts[-1] == "values.yaml" and len(parts) in (2, 4):
                loaded = yaml.safe_load(text) or {}
                if prefix:
                    defaults[NFD] = loaded
                else:
                    defaults = {**loaded, **defaults}
            elif parts[-1] == "values.schema.json" and prefix:
                schema = json.loads(text)
            elif "templates" in parts:
                refs += [(*prefix, *m.split(".")) for m in re.findall(r"\.Values\.([\w.-]+)", text)]
    return defaults, tuple(refs), schema


def _typed_not_string(schema: dict[str, Any], path: Leaf) -> bool:
    """The subchart's values schema types this leaf, and not as a string."""
    if path[:1] != (NFD,) or not schema:
        return False
    node: Any = schema
    for key in path[1:]:
        if key == KEY or not isinstance(node, dict):
            return False
        node = (node.get("properties") or {}).get(key)
    declared = node.get("type") if isinstance(node, dict) else None
    types = [declared] if isinstance(declared, str) else list(declared or [])
    return bool(types) and "string" not in types


def leaves_of(chart: Path, planned: dict[str, Any]) -> list[Leaf]:
    """Every place of the values a hostile string could go (extraObjects aside: spec.values
    cannot set it, the typed fields are tried on their own)."""
    defaults, refs, schema = _chart_files(chart)
    found = {*(_string_leaves(defaults)), *(_string_leaves(planned)), *refs}
    found = {p for p in found if p and p[0] != "extraObjects" and "" not in p}
    found = {p for p in found if not _typed_not_string(schema, p)}
    merged = _merge(copy.deepcopy(defaults), planned)
    return sorted((p for p in found if _settable(p, found, merged)), key=repr)


def _settable(path: Leaf, found: set[Leaf], merged: dict[str, Any]) -> bool:
    """A string (or a value without a default), not a map that holds other leaves, not below
    a scalar. Switches (booleans) and numbers are left out: any string turns a switch on,
    which adds only the chart's own objects, as `true` does."""
    keys = _keys(path)
    if any(other != path and other[: len(keys)] == keys for other in found):
        return False
    node: Any = merged
    for depth, key in enumerate(keys):
        node = node.get(key) if isinstance(node, dict) else None
        last = depth == len(keys) - 1
        if node is not None and not last and not isinstance(node, dict):
            return False
    return path[-1] == KEY or node is None or isinstance(node, str)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        old = base.get(key)
        base[key] = _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else (
            copy.deepcopy(value))  # fmt: skip
    return base


def _set(values: dict[str, Any], leaf: Leaf, hostile: str) -> None:
    *parents, last = leaf
    node = values
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    if last == KEY:
        node[hostile] = "kygpu-value"
    else:
        node[last] = hostile


def _keys(leaf: Leaf) -> Leaf:
    return tuple(k for k in leaf if k != KEY)


def _show(leaf: Leaf) -> str:
    return ".".join("<key>" if k == KEY else str(k) for k in leaf)


def _listed(keys: Leaf) -> Allowed | None:
    """The allowlist's entry at or above these keys (values-rules/values-allowlist.yaml)."""
    node: Any = ALLOWLIST.tree
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
        if node is None or isinstance(node, Allowed):
            return node
    return None


def _names_a_config_map(keys: Leaf) -> bool:
    listed = _listed(keys)
    return listed is not None and listed.type is ValueType.CONFIG_MAP_NAME


def lets_through(leaves: Sequence[Leaf], hostile: str) -> list[Leaf]:
    """The leaves where the model (the CRD's CEL rules and the values policy in Python) takes
    the hostile string. One validation for all of them, then one per leaf only if refused."""

    def accepted(group: Sequence[Leaf]) -> bool:
        values: dict[str, Any] = {}
        for leaf in group:
            _set(values, leaf, hostile)
        try:
            GpuSpec.model_validate({"values": values})
        except ValidationError:
            return False
        return True

    if accepted(leaves):
        return list(leaves)
    return [leaf for leaf in leaves if accepted([leaf])]


def check(
    attempt: Callable[[Sequence[Leaf]], dict[str, Any]],
    chart: Path,
    baseline: frozenset[Obj],
    groups: list[list[Leaf]],
    hostile: str,
    tally: Tally,
) -> set[Leaf]:
    """Render the hostile string at all leaves of each group at once; split what differs or
    fails, level by level (each level's renders in parallel), until each leaf is clean,
    refused by Helm or a violation. Returns the leaves Helm refused. Helm's values schema
    names every leaf it refuses at once: those are set aside without splitting."""
    refused: set[Leaf] = set()
    groups = [g for g in groups if g]
    while groups:
        results = render_all(chart, [attempt(g) for g in groups], tally)
        following: list[list[Leaf]] = []
        for group, got in zip(groups, results, strict=True):
            if got == baseline:
                tally.rendered += len(group)
                continue
            if isinstance(got, Refused) and got.schema_paths:
                named = [leaf for leaf in group if _keys(leaf) in got.schema_paths]
                if named:
                    refused.update(named)
                    rest = [leaf for leaf in group if leaf not in named]
                    following += [rest] if rest else []
                    continue
            if len(group) == 1:
                if isinstance(got, Refused):
                    refused.add(group[0])
                else:
                    added, removed = sorted(got - baseline), sorted(baseline - got)
                    tally.violations.append(
                        f"{_show(group[0])} = {hostile!r}: +{added} -{removed}")  # fmt: skip
                continue
            if len(group) <= CHUNK:
                following += [[leaf] for leaf in group]
            else:
                half = len(group) // 2
                following += [group[:half], group[half:]]
        groups = following
    tally.refused_by_helm += len(refused)
    return refused


def _facts(catalog: Catalog) -> Any:
    nodes = load_nodes(str(SCENARIO / "nodes.yaml"), io.StringIO())
    return cluster_facts([node_facts(n, catalog.machine_types) for n in nodes])


def planned_spec(version: str) -> GpuSpec:
    spec, _ = load_gpu(str(SCENARIO / "gpu.yaml"), io.StringIO())
    raw = _merge(spec.model_dump(by_alias=True, exclude_none=True), KITCHEN_SINK)
    return GpuSpec.model_validate({**raw, "operatorVersion": version})


SAFE_SECRET = "chart-auth"
ALLOWED = allowed_sources_of({"kind": "ConfigMap", "data": {"sources.yaml": yaml.safe_dump(
    {"sources": [{"kind": "HelmRepository", "url": NVIDIA_REPOSITORY,
                  "secretRefs": [SAFE_SECRET]}]}),
    "registries": "registry.example/mirror\nregistry.example\npublic\n"}})  # fmt: skip
"""NVIDIA's repository with the baseline's Secret allowed, and the baseline's mirrors (an
administrator's ConfigMap): the hostile strings are held against a plan that is written."""


def planned(spec: GpuSpec, catalog: Catalog) -> Plan:
    return make_plan(spec, _facts(catalog), catalog, None, ALLOWED)


def check_values(chart: Path, values: dict[str, Any], tally: Tally) -> None:
    """Every hostile string at every leaf of spec.values that the model lets through."""
    (baseline,) = render_all(chart, [values], tally)
    assert not isinstance(baseline, Refused), f"the baseline does not render: {baseline}"
    leaves = leaves_of(chart, values)
    # Outside the allowlist the model refuses any value: not a leaf.
    keyed = [leaf for leaf in leaves if _listed(_keys(leaf)) is None]
    tally.refused_by_module += len(keyed) * len(HOSTILE)
    leaves = [leaf for leaf in leaves if leaf not in keyed]
    marked: Marked | None = None
    for hostile in HOSTILE:
        through = lets_through(leaves, hostile)
        if hostile == BENIGN:  # names, on purpose, where the module takes DNS names only
            through = [leaf for leaf in through if not _names_a_config_map(_keys(leaf))]
        tally.refused_by_module += len(leaves) - len(through)

        def attempt(group: Sequence[Leaf], text: str = hostile) -> dict[str, Any]:
            changed = copy.deepcopy(values)
            for leaf in group:
                _set(changed, leaf, text)
            return changed

        if marked is None:
            refused = check(attempt, chart, baseline, [through], hostile, tally)
            # Where Helm refuses even a plain name, the chart wants a map, a list or a number:
            # not a string leaf. Left out for the hostile strings after it.
            tally.not_strings = len(refused)
            leaves = [leaf for leaf in leaves if leaf not in refused]
            marked = Marked.render(chart, values, leaves, tally)
            continue
        # The leaves where the string would most likely break the YAML or change an object
        # (Helm refuses, or a violation) are rendered one by one, the others all at once. A
        # wrong guess costs renders, never a leaf: whatever differs is split anyway.
        likely = marked.likely_to_change(through, hostile)
        rest = [leaf for leaf in through if leaf not in likely]
        check(attempt, chart, baseline, [*([leaf] for leaf in likely), rest], hostile, tally)


@dataclass(frozen=True)
class Marked:
    """One render with a marker of its own at each leaf: where the chart prints each value."""

    documents: tuple[str, ...]
    markers: dict[Leaf, str]

    @classmethod
    def render(
        cls, chart: Path, values: dict[str, Any], leaves: Sequence[Leaf], tally: Tally
    ) -> Marked:
        markers = {leaf: f"kygpumark{i:04d}x" for i, leaf in enumerate(leaves)}
        changed = copy.deepcopy(values)
        for leaf, marker in markers.items():
            _set(changed, leaf, marker)
        tally.renders += 1
        documents = re.split(r"^---$", helm_output(chart, changed), flags=re.MULTILINE)
        return cls(tuple(documents), markers)

    def likely_to_change(self, leaves: Sequence[Leaf], hostile: str) -> set[Leaf]:
        """The leaves where the hostile string, printed as the chart prints the marker (as
        it is, or escaped where the marker sits inside a quoted scalar, as `quote` does),
        leaves a document that YAML cannot read or whose identity differs."""
        found = set()
        for leaf in leaves:
            marker = self.markers[leaf]
            for document in (d for d in self.documents if marker in d):
                if _changes(document, marker, hostile):
                    found.add(leaf)
                    break
        return found


@cache
def _parsed(document: str) -> Any:
    return yaml.load(document, Loader=yaml.CSafeLoader)


def _changes(document: str, marker: str, hostile: str) -> bool:
    lines = []
    for line in document.splitlines():
        at = line.find(marker)
        if at >= 0:
            before = line[:at]
            if before.count('"') % 2:  # inside a double-quoted scalar
                text = json.dumps(hostile)[1:-1]
            elif before.count("'") % 2:  # inside a single-quoted scalar
                text = hostile.replace("'", "''")
            else:
                text = hostile
            lines.append(line.replace(marker, text))
        else:
            lines.append(line)
    old = _parsed(document)
    try:
        new = yaml.load("\n".join(lines), Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        return True
    if not isinstance(old, dict) or not isinstance(new, dict):
        return bool(old != new)
    return bool(_identity(old) != _identity(new))


SAFE: dict[tuple[str | int, ...], str] = {
    ("driver", "version"): "590",
    ("driver", "installerRelease"): "1.17.0",
    ("driver", "upgradePolicy", "maxUnavailable"): "25%",
    ("driver", "upgradePolicy", "waitForCompletion", "podSelector"): "app=x",
    ("driver", "upgradePolicy", "drain", "podSelector"): "app=x",
    ("source", "chartName"): "gpu-operator",
    ("source", "secretRef"): SAFE_SECRET,
    ("source", "imageRegistry"): "registry.example",
    ("source", "imagePullSecrets", 0): "pull",
    ("components", "vgpuManagerImage"): "registry.example/nv/vgpu-manager:1.0",
    ("sharing", "profiles", 0, "name"): "p",
}
"""A value each typed field takes well: the baseline the hostile strings are held against."""
_HASHED = re.compile(r"^kyma-gpu-device-plugin-config-[0-9a-f]{8}$")


def _with(raw: dict[str, Any], path: tuple[str | int, ...], text: str) -> None:
    node: Any = raw
    for key, following in itertools.pairwise(path):
        if isinstance(key, int):
            node = node[key]
        else:
            node = node.setdefault(key, [] if isinstance(following, int) else {})
    last = path[-1]
    if isinstance(last, int):
        node[last:] = [text]
    else:
        node[last] = text


def _typed(spec: GpuSpec, fields: dict[tuple[str | int, ...], str]) -> GpuSpec | None:
    raw = spec.model_dump(by_alias=True, exclude_none=True)
    for path, text in fields.items():
        _with(raw, path, text)
    try:
        return GpuSpec.model_validate(raw)
    except ValidationError:
        return None


def _objects(got: Rendered) -> Rendered:
    """The sharing ConfigMap's name carries a hash of its files on purpose (a new name rolls
    the device plugin), so only its kind and namespace count."""
    if isinstance(got, Refused):
        return got
    return frozenset((k, ns, "<hashed>" if _HASHED.match(n) else n) for k, ns, n in got)


def check_typed(chart: Path, version: str, tally: Tally) -> None:
    """Each hostile string in every typed field that takes it, all at once (one plan, one
    render per hostile string); each field alone only if that differs."""
    catalog = Catalog()
    spec = _typed(planned_spec(version), SAFE)
    assert spec is not None
    (baseline,) = map(_objects, render_all(chart, [planned(spec, catalog).values], tally))
    assert not isinstance(baseline, Refused), baseline
    for hostile in HOSTILE:
        fields = [p for p in TYPED_FIELDS if _typed(spec, {p: hostile}) is not None]
        tally.refused_by_module += len(TYPED_FIELDS) - len(fields)
        pending = [fields] if fields else []
        while pending:
            group = pending.pop()
            typed = _typed(spec, dict.fromkeys(group, hostile))
            plan = planned(typed, catalog) if typed is not None else None
            if plan is None or plan.preflight.verdict is Verdict.ERROR:
                if len(group) == 1:
                    tally.refused_by_module += 1
                else:
                    pending += [[p] for p in group]
                continue
            (got,) = map(_objects, render_all(chart, [plan.values], tally))
            if got == baseline:
                tally.rendered += len(group)
            elif len(group) > 1:
                pending += [[p] for p in group]
            elif isinstance(got, Refused):
                tally.refused_by_helm += 1
            else:
                tally.violations.append(f"spec.{_show(group[0])} = {hostile!r}: {got ^ baseline}")


@pytest.mark.parametrize("version", VERSIONS)
def test_no_value_changes_the_rendered_objects(version: str) -> None:
    _require_tools()
    plan = planned(planned_spec(version), Catalog())
    assert plan.preflight.verdict is not Verdict.ERROR, plan.preflight.findings
    tally = Tally()
    values = _merge(copy.deepcopy(plan.values), CHART_SWITCHES)
    check_values(CHARTS / f"gpu-operator-{version}.tgz", values, tally)
    print(f"\nvalues@{version}: {tally}")
    assert tally.violations == [], "\n".join(tally.violations)
    # The test looked at something: every leaf of both charts' values, with each hostile
    # string; since issue 43 the allowlist refuses nearly all of them before Helm runs, and the
    # few the listed types take (names, durations, texts) render without changing an object.
    assert tally.refused_by_module > 1000, tally
    assert tally.rendered > 0, tally


@pytest.mark.parametrize("version", VERSIONS)
def test_no_typed_field_changes_the_rendered_objects(version: str) -> None:
    _require_tools()
    tally = Tally()
    check_typed(CHARTS / f"gpu-operator-{version}.tgz", version, tally)
    print(f"\ntyped@{version}: {tally}")
    assert tally.violations == [], "\n".join(tally.violations)
    counted = tally.rendered + tally.refused_by_module + tally.refused_by_helm
    assert counted == len(TYPED_FIELDS) * len(HOSTILE), tally
    assert tally.rendered > 0, tally


@pytest.mark.parametrize(
    ("leaf", "hostile"),
    [
        ((NFD, "nameOverride"), BENIGN),  # what the module refuses (not on the allowlist)
        (("extraObjects",), '{{ "' + _TPL + '" | b64dec }}'),  # cannot be set: through tpl
        (("kataSandboxDevicePlugin", "imagePullPolicy"), "IfNotPresent\n---\n" + _INJECTED),
    ],
    ids=["rename", "tpl", "document"],
)
def test_the_check_sees_what_the_module_refuses(leaf: Leaf, hostile: str) -> None:
    """The same check, past the module's refusal, finds the change: it can fail. The last
    line of templates/clusterpolicy.yaml prints kataSandboxDevicePlugin.imagePullPolicy
    unquoted, so a document separator there adds a ConfigMap to the release."""
    _require_tools()
    version = VERSIONS[-1]
    chart = CHARTS / f"gpu-operator-{version}.tgz"
    plan = planned(planned_spec(version), Catalog())
    assert lets_through([leaf], hostile) == []
    tally = Tally()
    (baseline,) = render_all(chart, [plan.values], tally)
    assert not isinstance(baseline, Refused), baseline

    def attempt(group: Sequence[Leaf]) -> dict[str, Any]:
        values = copy.deepcopy(plan.values)
        if leaf == ("extraObjects",):
            values["extraObjects"] = [*values.get("extraObjects", []), hostile]
        else:
            _set(values, leaf, hostile)
        return values

    check(attempt, chart, baseline, [[leaf]], hostile, tally)
    assert len(tally.violations) == 1, tally


# --- the listed texts render as the chart prints them ----------------------------------------

TEXT_TEMPLATES = {
    ValueType.DCGM_METRICS: "templates/dcgm_exporter_config.yaml",
    ValueType.MIG_CONFIG: "templates/mig_config.yaml",
}
"""Where each chart prints the two texts of the allowlist (the same template in both charts)."""
DCGM_LINES = ("", " ", "# clocks", "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock", "  ", "\t", "  # c",
              "  DCGM_FI_DEV_MEM_CLOCK , counter , memory", "\tDCGM_FI_X, label, x")  # fmt: skip
MIG_LINES = (" hooks:", "", "version: v1", "mig-configs:", "  all-disabled:", "  - devices: all",
             "    mig-enabled: false", "# layouts", " # c", "hooks:", " hooks:",
             "  apply-start: [sh]", " version: v1", "  mig-configs: {}")  # fmt: skip
TEXT_CASES = {
    ValueType.DCGM_METRICS: ("  DCGM_FI_DEV_SM_CLOCK, gauge, x\nDCGM_FI_B, gauge, y\n",
                             " \nDCGM_FI_DEV_SM_CLOCK, gauge, x\n",
                             "# clocks\nDCGM_FI_DEV_SM_CLOCK, gauge, x\n  DCGM_FI_B, gauge, y\n"),
    ValueType.MIG_CONFIG: (" version: v1\n hooks:\n  apply-start: [sh, -c, evil]\n",
                           "version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n"),
}  # fmt: skip
"""The review's cases (issue 49, finding 4: a DCGM text indented on its first line broke every
render; a MIG text indented one column took any top-level key) and a text of each that
renders."""


def _text_values(value_type: ValueType, text: str, enabled: bool = False) -> dict[str, Any]:
    """spec.values with the text; `enabled`: and its component switched on (the typed field's
    job, spec.components: the model refuses it in spec.values)."""
    switch = {"enabled": True} if enabled else {}
    if value_type is ValueType.DCGM_METRICS:
        config: dict[str, Any] = {"create": True, "name": "m", "data": text}
        return {"dcgmExporter": {**switch, "config": config}}
    return {"migManager": {**switch, "config": {"create": True, "name": "m",
                                                "data": {"config.yaml": text}}}}  # fmt: skip


def _taken(value_type: ValueType, text: str) -> bool:
    try:
        GpuSpec.model_validate({"values": _text_values(value_type, text)})
    except ValidationError:
        return False
    return True


def _printed(value_type: ValueType, text: str) -> tuple[str | None, str]:
    """The text as the chart's ConfigMap holds it after `helm template`, or None and why not."""
    chart = unpacked(CHARTS / f"gpu-operator-{VERSIONS[-1]}.tgz")
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as handle:
        json.dump(_text_values(value_type, text, enabled=True), handle)
        handle.flush()
        result = subprocess.run(
            [str(HELM), "template", "gpu-operator", str(chart), "--namespace", "gpu-operator",
             "--show-only", TEXT_TEMPLATES[value_type], "-f", handle.name],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
    if result.returncode != 0:
        return None, result.stderr.strip()[-300:]
    try:
        data = (yaml.safe_load(result.stdout) or {}).get("data") or {}
    except yaml.YAMLError as err:
        return None, f"unreadable YAML: {err}"
    key = "dcgm-metrics.csv" if value_type is ValueType.DCGM_METRICS else "config.yaml"
    return data.get(key), result.stdout


def _renders_as_written(value_type: ValueType, text: str) -> str | None:
    """Why a text the model takes would not reach the operand as written; None: it does. A MIG
    text must also name no top-level key but version and mig-configs."""
    if not text:
        return None  # the chart creates no ConfigMap from an empty text: nothing to render
    printed, said = _printed(value_type, text)
    if printed is None:
        return f"{text!r} does not render: {said}"
    if printed.rstrip() != text.rstrip():
        return f"{text!r} renders as {printed!r}"
    if value_type is ValueType.MIG_CONFIG:
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            return None  # mig-parted refuses it: the user's typo, no key of theirs runs
        keys = set(parsed) if isinstance(parsed, dict) else set()
        if keys - {"version", "mig-configs"}:
            return f"{text!r} holds the top-level keys {sorted(keys)}"
    return None


def _texts(lines: Sequence[str]) -> Any:
    """Texts of 1 to 7 of `lines`, the first often a top-level one (so that enough are taken)."""
    from hypothesis import strategies as st

    line = st.sampled_from(lines)
    first = st.one_of(st.sampled_from(lines[2:4]), line)
    return st.builds(lambda a, rest, end: "\n".join((a, *rest)) + end, first,
                     st.lists(line, max_size=6), st.sampled_from(("", "\n")))  # fmt: skip


@pytest.mark.parametrize("value_type", list(TEXT_TEMPLATES))
def test_every_text_the_module_takes_renders_as_written(value_type: ValueType) -> None:
    """The review's cases, then random texts of the lines users write (with blanks, tabs and
    indented comments and keys): what the model takes, the chart prints as written; what broke
    the render, or put another key at the top of a MIG file, the model refuses."""
    from hypothesis import HealthCheck, given, settings

    _require_tools()
    for version in VERSIONS[:-1]:  # one render stands for every chart: the template is shared
        with (
            tarfile.open(CHARTS / f"gpu-operator-{version}.tgz") as tar,
            tarfile.open(CHARTS / f"gpu-operator-{VERSIONS[-1]}.tgz") as last,
        ):
            name = f"gpu-operator/{TEXT_TEMPLATES[value_type]}"
            assert tar.extractfile(name).read() == last.extractfile(name).read()  # type: ignore[union-attr]
    bad, good = TEXT_CASES[value_type][:-1], TEXT_CASES[value_type][-1]
    for text in bad:
        assert not _taken(value_type, text), text
        assert _renders_as_written(value_type, text) is not None, f"{text!r}: the case holds"
    assert _taken(value_type, good)
    assert _renders_as_written(value_type, good) is None
    seen: list[str] = []

    checks = [HealthCheck.filter_too_much, HealthCheck.too_slow]

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=checks)
    @given(_texts(DCGM_LINES if value_type is ValueType.DCGM_METRICS else MIG_LINES))
    def holds(text: str) -> None:
        if _taken(value_type, text):
            seen.append(text)
            problem = _renders_as_written(value_type, text)
            assert problem is None, problem

    holds()
    assert len(seen) >= 5, f"too few texts taken to show anything: {seen}"
