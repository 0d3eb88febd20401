"""The admission policies of the manager's account are generated from the Flux bundle (issue 32).

The real API server runs them in tests/integration/test_rbac_manager.py; here: the committed file
is the generated one, and what the policy pins is what the bundle renders.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_gpu.extensions.node_marks import names as node_marks
from kyma_gpu.extensions.own_flux.bundle import FluxBundle
from kyma_gpu.facts import node as node_facts
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu_tools.manager_policy import (
    ACCOUNT,
    MACHINE_TYPE_LABELS,
    MIRRORS_NAME,
    NAME,
    NODE_CONDITION_TYPE,
    NODE_CORDON_ANNOTATION,
    NODE_METADATA_FIELDS,
    NODE_SPEC_FIELDS,
    NODE_STATUS_FIELDS,
    NODE_WRITABLE,
    NODES_NAME,
    WRITABLE,
    Grant,
    _image_pattern,
    gpu_machine_types,
    manager_policy_yaml,
)

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "config" / "admission" / "manager_policy.yaml"


def _docs() -> list[dict[str, object]]:
    """The policies with every extension's piece (manager_policy.py `Grant`): the tools
    generate them whether or not an extension that grants them is registered."""
    return [d for d in yaml.safe_load_all(manager_policy_yaml(frozenset(Grant))) if d]


def test_the_committed_policy_is_the_generated_one() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == manager_policy_yaml(), (
        "config/admission/manager_policy.yaml is stale: run `make manifests`"
    )


def test_three_policies_and_their_bindings_for_the_manager_only() -> None:
    docs = _docs()
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [  # type: ignore[index]
        ("ValidatingAdmissionPolicy", NAME),
        ("ValidatingAdmissionPolicyBinding", NAME),
        ("ValidatingAdmissionPolicy", MIRRORS_NAME),
        ("ValidatingAdmissionPolicyBinding", MIRRORS_NAME),
        ("ValidatingAdmissionPolicy", NODES_NAME),
        ("ValidatingAdmissionPolicyBinding", NODES_NAME),
    ]
    assert ACCOUNT == "system:serviceaccount:kyma-system:gpu-manager"
    assert all(ACCOUNT in str(d["spec"]) for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    mirror_binding = docs[3]["spec"]
    assert mirror_binding["paramRef"]["parameterNotFoundAction"] == "Deny"  # type: ignore[index]


def test_the_policy_names_the_bundles_crds_args_and_images() -> None:
    text = manager_policy_yaml(frozenset({Grant.FLUX_BUNDLE}))
    flat = " ".join(text.split())
    for crd in FluxBundle().crds():
        assert f"'{crd}'" in flat
    for obj in FluxBundle().objects():
        if obj["kind"] != "Deployment":
            continue
        container = obj["spec"]["template"]["spec"]["containers"][0]
        for arg in container["args"]:
            assert f"'{arg}'" in flat, arg


KYMA = "europe-docker.pkg.dev/kyma-project/prod/external"
BUNDLE_IMAGE = f"{KYMA}/fluxcd/helm-controller:v1.6.4"


@pytest.mark.parametrize(
    ("image", "mirrored", "matches"),
    [
        (BUNDLE_IMAGE, False, True),
        (f"{BUNDLE_IMAGE}@sha256:" + "a" * 64, False, True),
        ("evil.example/kyma-project/prod/external/fluxcd/helm-controller:v1.6.4", False, False),
        (f"{KYMA}/fluxcd/helm-controller:v1.6.5", False, False),
        ("mirror.example:5000/a/b/fluxcd/helm-controller:v1.6.4@sha256:" + "b" * 64, True, True),
        ("mirror.example/fluxcd/helm-controller:v1.6.4", True, True),
        ("mirror.example/evil/helm-controller:v1.6.4", True, False),
        ("mirror.example/fluxcd/helm-controller:latest", True, False),
    ],
)  # fmt: skip
def test_image_patterns(image: str, mirrored: bool, matches: bool) -> None:
    pattern = _image_pattern(BUNDLE_IMAGE, mirrored)
    assert bool(re.search(pattern, image)) is matches, (pattern, image)


def test_only_lease_renewals_are_left_to_rbac() -> None:
    """Every kubelet renews its Lease every 10 s: the policies matching every kind leave Lease
    updates out (RBAC names the Leases these accounts may update), and nothing else."""
    release = ROOT / "config" / "rbac" / "release_rbac.yaml"
    chart = ROOT / "config" / "admission" / "chart_accounts_policy.yaml"
    policies = [d for d in _docs() if d["kind"] == "ValidatingAdmissionPolicy"
                and d["metadata"]["name"] == NAME]  # type: ignore[index]  # fmt: skip
    for path in (release, chart):
        policies += [d for d in yaml.safe_load_all(path.read_text()) if d
                     and d["kind"] == "ValidatingAdmissionPolicy"]  # fmt: skip
    assert len(policies) == 3
    for policy in policies:
        constraints = policy["spec"]["matchConstraints"]  # type: ignore[index]
        assert constraints["excludeResourceRules"] == [
            {"apiGroups": ["coordination.k8s.io"], "apiVersions": ["*"],
             "operations": ["UPDATE"], "resources": ["leases"]}
        ]  # fmt: skip


WRITES = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind", "*"}


def _rbac_rules() -> list[dict[str, Any]]:
    rules = []
    for name in ("cluster_role.yaml", "role_kyma_system.yaml", "role_gpu_operator.yaml"):
        for doc in yaml.safe_load_all((ROOT / "config" / "rbac" / name).read_text()):
            if doc and doc["kind"] in ("Role", "ClusterRole"):
                rules += doc["rules"]
    return rules


def _policy(name: str) -> dict[str, Any]:
    return next(d for d in _docs() if d["kind"] == "ValidatingAdmissionPolicy"
                and d["metadata"]["name"] == name)  # type: ignore[index]  # fmt: skip


def test_the_policies_match_every_kind_the_managers_rbac_lets_it_write() -> None:
    """kyma-gpu-manager matches the WRITABLE kinds, kyma-gpu-manager-nodes the Nodes
    (NODE_WRITABLE); RBAC must not let the manager write a kind outside them."""
    written = {(g, r.split("/")[0]) for rule in _rbac_rules() if WRITES & set(rule["verbs"])
               for g in rule["apiGroups"] for r in rule["resources"]}  # fmt: skip
    matched = {(g, r.split("/")[0]) for table in (WRITABLE, NODE_WRITABLE)
               for g, resources in table.items() for r in resources}  # fmt: skip
    assert written, "no write rule found: the RBAC files moved?"
    assert written <= matched, written - matched


def test_kyma_gpu_manager_never_meets_a_node() -> None:
    """Every kubelet updates its Node's status: the wide policy must not match Nodes, only
    kyma-gpu-manager-nodes does (one matchCondition for every other account)."""
    assert "nodes" not in WRITABLE.get("", ())
    for rule in _policy(NAME)["spec"]["matchConstraints"]["resourceRules"]:
        assert not ("" in rule["apiGroups"] and {"nodes", "nodes/*", "*"} & set(rule["resources"]))


def test_the_managers_node_rights_are_patch_and_held_by_the_nodes_policy() -> None:
    """RBAC: get/list/watch of nodes and patch of nodes and nodes/status, nothing else (never
    create, delete, update); every Node write it grants is a resource the policy matches."""
    verbs: dict[str, set[str]] = {}
    for rule in _rbac_rules():
        if "" in rule["apiGroups"]:
            for resource in rule["resources"]:
                if resource == "nodes" or resource.startswith("nodes/"):
                    verbs.setdefault(resource, set()).update(rule["verbs"])
    assert verbs == {"nodes": {"get", "list", "watch", "patch"}, "nodes/status": {"patch"}}
    written = {r for r, v in verbs.items() if WRITES & v}
    constraints = _policy(NODES_NAME)["spec"]["matchConstraints"]
    assert constraints["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["*"], "operations": ["UPDATE"],
         "resources": ["nodes", "nodes/status"], "scope": "Cluster"}
    ]  # fmt: skip
    assert written <= set(constraints["resourceRules"][0]["resources"])
    assert set(NODE_WRITABLE[""]) == written


def _nodes_spec() -> dict[str, Any]:
    spec: dict[str, Any] = _policy(NODES_NAME)["spec"]
    return spec


def _nodes_text() -> str:
    """The nodes policy's variables and validations as one text, to find what they name."""
    spec = _nodes_spec()
    return " ".join(str(v) for v in spec["variables"] + spec["validations"])


def test_the_nodes_policy_fails_closed() -> None:
    assert _nodes_spec()["failurePolicy"] == "Fail"


def test_the_nodes_policy_takes_no_parameters() -> None:
    assert "paramKind" not in _nodes_spec()


def test_the_nodes_policy_matches_only_the_managers_account() -> None:
    assert _nodes_spec()["matchConditions"] == [
        {"name": "the-manager-account",
         "expression": f"request.userInfo.username == '{ACCOUNT}'"}
    ]  # fmt: skip


def test_the_nodes_policys_binding_denies() -> None:
    binding = next(d for d in _docs() if d["kind"] == "ValidatingAdmissionPolicyBinding"
                   and d["metadata"]["name"] == NODES_NAME)  # type: ignore[index]  # fmt: skip
    assert binding["spec"] == {"policyName": NODES_NAME, "validationActions": ["Deny"]}


def test_the_nodes_policy_holds_the_names_the_core_writes() -> None:
    # the names node marks write (extensions/node_marks/names.py) are the names the policy holds
    assert NODE_CONDITION_TYPE == node_marks.NODE_CONDITION == "KymaGpuUnhealthy"
    assert NODE_CORDON_ANNOTATION == node_marks.CORDON_ANNOTATION
    assert NODE_CORDON_ANNOTATION == "gpu.kyma-project.io/cordoned"


def test_the_nodes_policy_names_the_marks_and_the_gpu_evidence() -> None:
    text = _nodes_text()
    for name in (NODE_CONDITION_TYPE, NODE_CORDON_ANNOTATION, node_facts.GPU_RESOURCE,
                 *node_facts.GPU_RESOURCE_PREFIXES, *MACHINE_TYPE_LABELS):  # fmt: skip
        assert f"'{name}'" in text, name


def test_the_nodes_policy_compares_every_named_field_with_the_old_object() -> None:
    text = _nodes_text()
    for part, fields in (("metadata", NODE_METADATA_FIELDS), ("spec", NODE_SPEC_FIELDS),
                         ("status", NODE_STATUS_FIELDS)):  # fmt: skip
        for field in fields:
            assert f"object.{part}.{field} == oldObject.{part}.{field}" in text, field


def test_the_fields_the_manager_writes_are_not_held_whole() -> None:
    assert "unschedulable" not in NODE_SPEC_FIELDS
    assert "conditions" not in NODE_STATUS_FIELDS


def test_every_refusal_of_the_nodes_policy_is_forbidden() -> None:
    for validation in _nodes_spec()["validations"]:
        assert validation["reason"] == "Forbidden"


def test_every_refusal_of_the_nodes_policy_says_what() -> None:
    for validation in _nodes_spec()["validations"]:
        assert "variables.what" in validation["messageExpression"]


def _node_variable(name: str) -> str:
    variables = _policy(NODES_NAME)["spec"]["variables"]
    return str(next(v["expression"] for v in variables if v["name"] == name))


def test_the_nodes_policy_trusts_no_label_a_tenant_writes() -> None:
    """Issue 43: NFD rules (and a node itself) set NFD's and GFD's labels on any node; GPU
    evidence is the old Node's GPU resources, its machine type in the registry, or its mark."""
    text = " ".join(str(v) for v in _policy(NODES_NAME)["spec"].values())
    for label in node_marks.UNTRUSTED_GPU_LABELS:
        assert label not in text, label
    assert "nvidia.com/gpu-driver-upgrade-state" not in text
    gpu = _node_variable("gpu")
    assert gpu == "variables.reported || variables.gpuMachineType || variables.marked"
    assert "object." not in _node_variable("reported").replace("oldObject.", "")
    assert "object." not in _node_variable("gpuMachineType").replace("oldObject.", "")
    assert _node_variable("marked") == "variables.oldMarks.exists(c, c.status == 'True')"


def test_the_nodes_policy_lists_the_registrys_gpu_machine_types(catalog: Catalog) -> None:
    """Generated from values-rules/machine-types.yaml: every type of every provider, no other."""
    types = catalog.machine_types.types
    listed = yaml.safe_load(_node_variable("gpuMachineTypes"))
    assert listed == gpu_machine_types(catalog) == sorted({t for p in types.values() for t in p})
    assert {"g6.xlarge", "g4dn.xlarge", "g2-standard-4"} <= set(listed)
    assert not {"m5.large", "m6i.large", "n2-standard-4"} & set(listed)


def test_the_policies_hold_only_what_the_registered_extensions_grant() -> None:
    """Without the extensions' grants (extensions/base.py `Grant`) the manager may write the
    core's objects only: no Deployment, no CRD, no Node, and no policy of theirs."""
    core = [d for d in yaml.safe_load_all(manager_policy_yaml(frozenset())) if d]
    assert [d["metadata"]["name"] for d in core] == [NAME, NAME]
    spec: dict[str, Any] = core[0]["spec"]
    groups = {g for rule in spec["matchConstraints"]["resourceRules"] for g in rule["apiGroups"]}
    assert not groups & {"apps", "apiextensions.k8s.io"}
    assert "deployment" not in [v["name"] for v in spec["variables"]]
    text = str(spec)
    assert not any(crd in text for crd in FluxBundle().crds())
    assert "apps/deployments" not in text
    nodes = manager_policy_yaml(frozenset({Grant.NODES}))
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(nodes) if d]
    assert names == [NAME, NAME, NODES_NAME, NODES_NAME]
    bundle = manager_policy_yaml(frozenset({Grant.FLUX_BUNDLE}))
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(bundle) if d]
    assert names == [NAME, NAME, MIRRORS_NAME, MIRRORS_NAME]
