"""The whole module moves into a sovereign registry with the ocm CLI (issue 31).

`hack/module.py release` puts into the module's OCM component every image the release can run
(the manager, the module's Flux, the operands of both charts, NVIDIA's driver per OS) and the
supported charts. Registry A stands in for the public registries: the release names its
operands there (`--operand-registry`), and A holds a stand-in under each name (an empty config,
no layers: `ocm` copies artifacts, it never runs them). `ocm transfer --copy-resources` moves
the component from A to B. Before, the component in A names every operand by tag and the
digest A holds for it (the release asked A), and the release's image-digests.yaml is a file
the manager's catalog loads; then A is stopped, and everything is asserted on B alone: every
image resource names B (by digest), B answers for each, and B serves each chart as an OCI chart
that Helm pulls byte for byte. Both registries speak TLS (the ocm CLI and KLM reach registries
by https only), with the local cluster's CA.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kyma_gpu.rules.catalog import IMAGE_DIGESTS, Catalog
from kyma_gpu_tools.registry import Presence, manifest_digest, parse_reference, presence
from tests.harness.air_gapped import CHARTS, resources, stand_ins, transfer
from tests.harness.binaries import REPO_ROOT, require
from tests.harness.cluster import LocalCluster
from tests.harness.klm import Registry

pytestmark = pytest.mark.integration

VERSION = "0.9.1"


def _run(argv: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900,
                            check=False)  # fmt: skip
    assert result.returncode == 0, f"{argv[:3]} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _release(a: Registry, rel: Path, env: dict[str, str]) -> list[str]:
    """Release into A with every image it names pushed there first."""
    held = stand_ins(a, VERSION)
    _run([sys.executable, str(REPO_ROOT / "hack" / "module.py"), "release",
          "--version", VERSION, "--image-repository", f"{a.host}/kyma-project",
          "--component-repository", a.url, "--team", "kyma/gpu-local", "--no-image",
          "--operand-registry", a.host, "--out", str(rel)], env)  # fmt: skip
    return held


def test_the_whole_module_moves_into_a_sovereign_registry(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    helm = require("helm")["helm"]
    a = Registry(local_cluster, tls=True, name="registry-a").start()
    b = Registry(local_cluster, tls=True, name="registry-b").start()
    env = {**os.environ, "SSL_CERT_FILE": str(a.ca), "HOME": str(tmp_path)}
    held = _release(a, tmp_path / "release", env)
    _pinned_in_a(a, tmp_path)

    transfer(a, b, VERSION)
    a.stop()

    # no scheme: https, and references KLM can parse
    images = [r for r in resources(b, VERSION) if r["access"]["type"] == "ociArtifact"]
    references = [str(r["access"]["imageReference"]) for r in images]
    assert len(references) == len(held) + len(list(CHARTS.glob("gpu-operator-v*.tgz"))), references
    elsewhere = [r for r in references if not r.startswith(f"{b.host}/")]
    assert elsewhere == [], elsewhere
    unpinned = [r for r in references if "@sha256:" not in r]
    assert unpinned == [], unpinned
    os.environ["SSL_CERT_FILE"] = str(b.ca)  # urllib reads it per request
    try:
        answers = {r: presence(r)[0] for r in references}
    finally:
        del os.environ["SSL_CERT_FILE"]
    assert {r for r, found in answers.items() if found is not Presence.PRESENT} == set()

    for version in Catalog().chart_versions():
        chart = next(r for r in images
                     if r["type"] == "helmChart" and r["version"] == version)  # fmt: skip
        ref = parse_reference(chart["access"]["imageReference"])
        assert ref is not None
        pulled = tmp_path / "pulled" / version
        pulled.mkdir(parents=True)
        _run([str(helm), "pull", f"oci://{ref.host}/{ref.name}", "--version", version,
              "--ca-file", str(b.ca), "--destination", str(pulled)], env)  # fmt: skip
        (tgz,) = pulled.glob("*.tgz")
        original = CHARTS / f"gpu-operator-{version}.tgz"
        assert (
            hashlib.sha256(tgz.read_bytes()).digest()
            == hashlib.sha256(original.read_bytes()).digest()
        ), version


def _pinned_in_a(a: Registry, tmp_path: Path) -> None:
    """The released component names each operand by tag@digest, the digest A holds for it; the
    release's digests file loads in the catalog the manager's image carries."""
    operands = [r for r in resources(a, VERSION) if str(r["name"]).startswith("operand-")]
    assert operands, "the component's operand images"
    os.environ["SSL_CERT_FILE"] = str(a.ca)
    try:
        for resource in operands:
            tagged, _, digest = str(resource["access"]["imageReference"]).partition("@")
            assert digest, f"{resource['name']} by tag only: {tagged}"
            assert manifest_digest(tagged)[0] == digest, tagged
    finally:
        del os.environ["SSL_CERT_FILE"]
    rules = tmp_path / "values-rules"
    shutil.copytree(Catalog().root, rules)
    shutil.copy(tmp_path / "release" / IMAGE_DIGESTS, rules / IMAGE_DIGESTS)
    loaded = Catalog(rules)
    loaded.check()
    assert len(loaded.image_digests) == len(operands), "one digest per operand image"
    assert set(loaded.image_digests.values()) == {
        str(r["access"]["imageReference"]).rsplit("@", 1)[1] for r in operands
    }
