"""The admission policies of the manager's account are generated from the Flux bundle (issue 32).

The real API server runs them in tests/integration/test_rbac_manager.py; here: the committed file
is the generated one, and what the policy pins is what the bundle renders.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kyma_gpu.plan.manager_policy import (
    ACCOUNT,
    MIRRORS_NAME,
    NAME,
    WRITABLE,
    _image_pattern,
    manager_policy_yaml,
)
from kyma_gpu.plan.provision import bundle, bundle_crds

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "config" / "admission" / "manager_policy.yaml"


def _docs() -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(manager_policy_yaml()) if d]


def test_the_committed_policy_is_the_generated_one() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == manager_policy_yaml(), (
        "config/admission/manager_policy.yaml is stale: run `make manifests`"
    )


def test_two_policies_and_their_bindings_for_the_manager_only() -> None:
    docs = _docs()
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [  # type: ignore[index]
        ("ValidatingAdmissionPolicy", NAME),
        ("ValidatingAdmissionPolicyBinding", NAME),
        ("ValidatingAdmissionPolicy", MIRRORS_NAME),
        ("ValidatingAdmissionPolicyBinding", MIRRORS_NAME),
    ]
    assert ACCOUNT == "system:serviceaccount:kyma-system:gpu-manager"
    assert all(ACCOUNT in str(d["spec"]) for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    mirror_binding = docs[3]["spec"]
    assert mirror_binding["paramRef"]["parameterNotFoundAction"] == "Deny"  # type: ignore[index]


def test_the_policy_names_the_bundles_crds_args_and_images() -> None:
    text = manager_policy_yaml()
    flat = " ".join(text.split())
    for crd in bundle_crds():
        assert f"'{crd}'" in flat
    for obj in bundle():
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


def test_the_policy_matches_every_kind_the_managers_rbac_lets_it_write() -> None:
    """The policy matches the WRITABLE kinds only (Node and pod updates of the cluster never
    meet it); RBAC must not let the manager write a kind outside them."""
    rules = []
    for name in ("cluster_role.yaml", "role_kyma_system.yaml", "role_gpu_operator.yaml"):
        for doc in yaml.safe_load_all((ROOT / "config" / "rbac" / name).read_text()):
            if doc and doc["kind"] in ("Role", "ClusterRole"):
                rules += doc["rules"]
    written = {(g, r.split("/")[0]) for rule in rules if WRITES & set(rule["verbs"])
               for g in rule["apiGroups"] for r in rule["resources"]}  # fmt: skip
    matched = {(g, r) for g, resources in WRITABLE.items() for r in resources}
    assert written, "no write rule found: the RBAC files moved?"
    assert written <= matched, written - matched
