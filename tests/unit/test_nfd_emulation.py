"""The harness's NFD emulation (tests/harness/nfd.py): the labels the chart's NFD worker
would publish, computed from the module's own rendered worker configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import nfd

ROOT = Path(__file__).resolve().parents[2]
P = nfd.PREFIX


def _installer_nfd_config(tag: str = "1.17.0") -> dict[str, Any]:
    """The NFD worker config the module renders for Garden Linux (from the installer's values),
    merged with the chart's pci defaults as Helm would."""
    values = yaml.safe_load(
        (ROOT / "values-rules" / "installer" / tag / "gpu-operator-values.yaml").read_text()
    )
    config: dict[str, Any] = values["node-feature-discovery"]["worker"]["config"]
    config["sources"]["pci"] = {"deviceLabelFields": ["vendor"]}
    return config


def _node(os_image: str, kernel: str = "6.12.47-cloud-amd64", gpus: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "labels": {}},
        "status": {
            "nodeInfo": {"osImage": os_image, "kernelVersion": kernel},
            "capacity": {"nvidia.com/gpu": str(gpus)},
        },
    }


def test_garden_linux_version_id_comes_from_the_rendered_template() -> None:
    labels = nfd.node_labels(_node("Garden Linux 1877.21"), _installer_nfd_config())
    assert labels[f"{P}system-os_release.ID"] == "gardenlinux"
    assert labels[f"{P}system-os_release.VERSION_ID"] == "0"  # the custom rule, not 1877.21
    assert labels[f"{P}kernel-version.full"] == "6.12.47-cloud-amd64"
    assert labels[f"{P}kernel-version.major"] == "6"
    assert labels[f"{P}pci-10de.present"] == "true"


def test_without_the_custom_rule_garden_linux_keeps_its_release_number() -> None:
    labels = nfd.node_labels(_node("Garden Linux 1877.21"), {"sources": {}})
    assert labels[f"{P}system-os_release.VERSION_ID"] == "1877.21"


def test_ubuntu_is_not_matched_by_the_garden_linux_rule() -> None:
    labels = nfd.node_labels(
        _node("Ubuntu 22.04.5 LTS", "5.15.0-1063-aws"), _installer_nfd_config()
    )
    assert labels[f"{P}system-os_release.ID"] == "ubuntu"
    assert labels[f"{P}system-os_release.VERSION_ID"] == "22.04"  # as in Ubuntu's os-release
    assert labels[f"{P}system-os_release.VERSION_ID.major"] == "22"


def test_a_version_without_a_dot_has_a_major_and_no_minor() -> None:
    """What the real NFD v0.19.0 labelled on a Debian 12 node (tests/e2e/test_real_nfd.py)."""
    labels = nfd.node_labels(_node("Debian GNU/Linux 12 (bookworm)", gpus=0), {"sources": {}})
    assert labels[f"{P}system-os_release.ID"] == "debian"
    assert labels[f"{P}system-os_release.VERSION_ID"] == "12"
    assert labels[f"{P}system-os_release.VERSION_ID.major"] == "12"
    assert f"{P}system-os_release.VERSION_ID.minor" not in labels


def test_a_cpu_node_has_no_nvidia_pci_label() -> None:
    labels = nfd.node_labels(_node("Garden Linux 1877.21", gpus=0), _installer_nfd_config())
    assert f"{P}pci-10de.present" not in labels


def test_template_values_are_substituted() -> None:
    match = {
        "feature": "system.osrelease",
        "matchExpressions": {"ID": {"op": "In", "value": ["ubuntu"]}},
    }
    template = "{{ range .system.osrelease }}example.com/os-{{ .Name }}={{ .Value }}\n{{ end }}"
    rule = {"name": "copy", "matchFeatures": [match], "labelsTemplate": template}
    config = {"sources": {"custom": [rule]}}
    labels = nfd.node_labels(_node("Ubuntu 22.04"), config)
    assert labels["example.com/os-ID"] == "ubuntu"
    assert "example.com/os-ID" not in nfd.node_labels(_node("Garden Linux 1877.21"), config)


@pytest.mark.parametrize(
    "template",
    [
        "{{ range .system.osrelease }}VERSION_ID={{ .Vale }}{{ end }}",  # misspelt field
        "{{ range .system.osrelease }}VERSION_ID=0",  # no end
        "{{ range .system.osrelease }}VERSION_ID0\n{{ end }}",  # not key=value
        "{{ range .kernel.loadedmodule }}x=1{{ end }}",  # not a matched feature
    ],
)
def test_a_broken_template_fails_instead_of_guessing(template: str) -> None:
    config = _installer_nfd_config()
    config["sources"]["custom"][0]["labelsTemplate"] = template
    with pytest.raises(nfd.NfdConfigError):
        nfd.node_labels(_node("Garden Linux 1877.21"), config)


def test_an_unknown_operator_fails() -> None:
    config = _installer_nfd_config()
    config["sources"]["custom"][0]["matchFeatures"][0]["matchExpressions"] = {
        "GARDENLINUX_VERSION": {"op": "IsTrue"}
    }
    with pytest.raises(nfd.NfdConfigError, match="IsTrue"):
        nfd.node_labels(_node("Garden Linux 1877.21"), config)


def test_a_fake_host_can_declare_its_pci_devices() -> None:
    node = _node("Ubuntu 22.04", gpus=0)
    node["metadata"]["annotations"] = {nfd.PCI_ANNOTATION: "10de"}
    assert nfd.node_labels(node, {})[f"{P}pci-10de.present"] == "true"


def test_a_node_before_nfd_has_no_partial_os_labels() -> None:
    """The scenario Nodes carry the OS ID and kernel without VERSION_ID; as they join, before
    NFD, they carry none of those (the real controller's first pass must not see half), and
    keep what the module detects a GPU node by."""
    path = Path(__file__).parents[1] / "golden/scenarios/gardenlinux-pool-past-matrix/nodes.yaml"
    node = yaml.safe_load(path.read_text())["items"][0]
    labels = node["metadata"]["labels"]
    assert nfd.PREFIX + "kernel-version.full" in labels  # the case this is for

    joined = nfd.before_nfd(node)["metadata"]["labels"]

    owned = (nfd.PREFIX + "system-os_release.", nfd.PREFIX + "kernel-version.")
    assert not [k for k in joined if k.startswith(owned)]
    assert joined[nfd.PREFIX + "pci-10de.present"] == "true"
    assert joined["worker.gardener.cloud/pool"] == labels["worker.gardener.cloud/pool"]
    assert nfd.PREFIX + "kernel-version.full" in labels  # the scenario is not changed
