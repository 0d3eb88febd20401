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
