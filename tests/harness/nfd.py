"""What NVIDIA's chart's node-feature-discovery (NFD) worker would label on a fake node.

On the local cluster the NFD worker DaemonSet's pods are kwok pods that do nothing. The
NVIDIA controller, though, needs NFD's labels to pick a driver image: the OS ID and
VERSION_ID, the full kernel version and the NVIDIA PCI vendor. This module computes them
the way NFD would, from two inputs:

- the host, as the Node shows it: ``status.nodeInfo`` (osImage, kernelVersion) and its PCI
  vendors: the annotation ``harness.kyma-gpu.test/pci-vendors`` (e.g. ``10de``) of a fake
  node, or NVIDIA for a node with ``nvidia.com/gpu`` capacity or the pci-10de label;
- the worker configuration the chart rendered (``nfd-worker.conf`` in the worker
  ConfigMap), i.e. the pci ``deviceLabelFields`` and every ``sources.custom`` rule.

The custom rules are evaluated, not assumed: the module's Garden Linux rule sets
``system-os_release.VERSION_ID`` through a ``labelsTemplate``, and the driver image tag
the controller computes depends on its result. A rule or template this emulation does not
understand raises NfdConfigError, so a broken template fails the test instead of being
replaced by a guess. Supported: ``matchFeatures`` on ``system.osrelease`` and
``kernel.version`` (ops Exists, DoesNotExist, In, NotIn), static ``labels``, and a
``labelsTemplate`` made of literal lines and ``{{ range .<feature> }}...{{ end }}`` blocks
that may use ``{{ .Name }}`` and ``{{ .Value }}``.

Pure functions; tests/harness/nvidia.py applies the result to the Nodes.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

PREFIX = "feature.node.kubernetes.io/"
NVIDIA_VENDOR = "10de"
WORKER_CONF_KEY = "nfd-worker.conf"
PCI_ANNOTATION = "harness.kyma-gpu.test/pci-vendors"


def before_nfd(node: Mapping[str, Any]) -> dict[str, Any]:
    """``node`` as it joins, before NFD labelled it: without the OS and kernel labels
    (``system-os_release.*``, ``kernel-version.*``), which NFD publishes in one update.

    The golden scenarios' Nodes carry some of them (the ID and the kernel, no VERSION_ID).
    Created as they are, the real controller's first pass can come before the emulation
    labels the Node, and it then names a precompiled driver DaemonSet after the OS without
    its VERSION_ID (``...-gardenlinux``, beside the ``...-gardenlinux0`` of the next pass). It
    removes a driver DaemonSet only when it selects no node, and this one still selects the
    kernel's nodes, so its pods never get ready and the Gpu waits for ever (seen once in
    test_pools). The PCI label stays: the module detects GPU nodes before NFD by it. A deep
    copy: the caller may change it."""
    copied: dict[str, Any] = copy.deepcopy(dict(node))
    metadata = copied.setdefault("metadata", {})
    owned = (PREFIX + "system-os_release.", PREFIX + "kernel-version.")
    labels = metadata.get("labels") or {}
    metadata["labels"] = {k: v for k, v in labels.items() if not k.startswith(owned)}
    return copied


class NfdConfigError(ValueError):
    """The rendered NFD worker configuration has something NFD would reject or that this
    emulation cannot evaluate faithfully."""


@dataclass(frozen=True)
class Host:
    """What NFD reads on the host, in its own feature names."""

    osrelease: Mapping[str, str]
    kernel: Mapping[str, str]
    pci_vendors: tuple[str, ...]


# osImage prefix -> /etc/os-release ID (and, for Garden Linux, its own version key).
_OS_RELEASE = (
    (re.compile(r"^Garden Linux\s+(\S+)"), "gardenlinux"),
    (re.compile(r"^Ubuntu\s+([0-9]+\.[0-9]+)"), "ubuntu"),  # VERSION_ID="22.04", not 22.04.5
    (re.compile(r"^SUSE Linux Micro\s+(\S+)"), "sl-micro"),
    (re.compile(r"^SUSE Linux Enterprise Server\s+([0-9.]+)"), "sles"),
    (re.compile(r"^Red Hat Enterprise Linux(?: CoreOS)?\s+([0-9.]+)"), "rhel"),
    (re.compile(r"^Flatcar Container Linux.*?([0-9]+\.[0-9]+\.[0-9]+)"), "flatcar"),
    (re.compile(r"^Debian GNU/Linux\s+([0-9]+)"), "debian"),  # the test machines' own OS
)
_VERSION_PARTS = re.compile(r"^(?P<major>\d+)(\.(?P<minor>\d+))?(\..*)?$")
"""NFD's split of VERSION_ID into the VERSION_ID.major and .minor features (source/system)."""


def os_release(os_image: str) -> dict[str, str]:
    """/etc/os-release of the host, from the kubelet's osImage (PRETTY_NAME)."""
    for pattern, os_id in _OS_RELEASE:
        match = pattern.match(os_image.strip())
        if match:
            release = {"ID": os_id, "VERSION_ID": match.group(1), "PRETTY_NAME": os_image}
            if os_id == "gardenlinux":
                release["GARDENLINUX_VERSION"] = match.group(1)
            parts = _VERSION_PARTS.match(match.group(1))
            for part in ("major", "minor"):
                if parts and parts.group(part):
                    release[f"VERSION_ID.{part}"] = parts.group(part)
            return release
    return {"PRETTY_NAME": os_image}


def kernel_version(full: str) -> dict[str, str]:
    """NFD's kernel.version feature: full, major, minor, revision."""
    features = {"full": full}
    numbers = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", full)
    if numbers:
        features["major"], features["minor"] = numbers.group(1), numbers.group(2)
        if numbers.group(3) is not None:
            features["revision"] = numbers.group(3)
    return features


def host_of(node: Mapping[str, Any]) -> Host:
    info = (node.get("status") or {}).get("nodeInfo") or {}
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    declared = str((meta.get("annotations") or {}).get(PCI_ANNOTATION, ""))
    vendors = {v.strip() for v in declared.split(",") if v.strip()}
    if (
        labels.get(f"{PREFIX}pci-{NVIDIA_VENDOR}.present") == "true"
        or int(str(capacity.get("nvidia.com/gpu", "0")) or 0) > 0
    ):
        vendors.add(NVIDIA_VENDOR)
    return Host(
        osrelease=os_release(str(info.get("osImage", ""))),
        kernel=kernel_version(str(info.get("kernelVersion", ""))),
        pci_vendors=tuple(sorted(vendors)),
    )


def worker_config(configmap_data: Mapping[str, str]) -> dict[str, Any]:
    text = configmap_data.get(WORKER_CONF_KEY)
    if text is None:
        raise NfdConfigError(f"the NFD worker ConfigMap has no {WORKER_CONF_KEY!r}")
    config = yaml.safe_load(text) or {}
    if not isinstance(config, dict):
        raise NfdConfigError(f"{WORKER_CONF_KEY} is not a mapping: {text[:200]!r}")
    return config


def builtin_labels(host: Host, config: Mapping[str, Any]) -> dict[str, str]:
    """The labels of NFD's built-in system, kernel and pci sources."""
    labels: dict[str, str] = {}
    for key in ("ID", "VERSION_ID", "VERSION_ID.major", "VERSION_ID.minor"):
        if key in host.osrelease:
            labels[f"{PREFIX}system-os_release.{key}"] = host.osrelease[key]
    for key, value in host.kernel.items():
        labels[f"{PREFIX}kernel-version.{key}"] = value
    fields = ((config.get("sources") or {}).get("pci") or {}).get("deviceLabelFields")
    if fields not in (None, ["vendor"]):
        raise NfdConfigError(f"pci deviceLabelFields {fields!r}: only [vendor] is emulated")
    for vendor in host.pci_vendors:
        labels[f"{PREFIX}pci-{vendor}.present"] = "true"
    return labels


def _features(host: Host, name: str) -> Mapping[str, str]:
    if name == "system.osrelease":
        return host.osrelease
    if name == "kernel.version":
        return host.kernel
    raise NfdConfigError(f"custom rule matches feature {name!r}, which is not emulated")


def _expression_holds(values: Mapping[str, str], key: str, expr: Mapping[str, Any]) -> bool:
    op = expr.get("op")
    wanted = [str(v) for v in expr.get("value") or []]
    if op == "Exists":
        return key in values
    if op == "DoesNotExist":
        return key not in values
    if op == "In":
        return key in values and values[key] in wanted
    if op == "NotIn":
        return key in values and values[key] not in wanted
    raise NfdConfigError(f"matchExpressions op {op!r} for {key!r} is not emulated")


def _matched(host: Host, rule: Mapping[str, Any]) -> dict[str, dict[str, str]] | None:
    """Per matched feature, the elements its expressions matched; None if the rule fails."""
    matched: dict[str, dict[str, str]] = {}
    for term in rule.get("matchFeatures") or []:
        name = str(term.get("feature"))
        values = _features(host, name)
        hits: dict[str, str] = {}
        for key, expr in (term.get("matchExpressions") or {}).items():
            if not _expression_holds(values, str(key), expr or {}):
                return None
            if key in values:
                hits[str(key)] = values[str(key)]
        matched[name] = hits
    if rule.get("matchAny"):
        raise NfdConfigError(f"rule {rule.get('name')!r}: matchAny is not emulated")
    return matched


_RANGE = re.compile(r"\{\{-?\s*range\s+\.([\w.]+)\s*-?\}\}(.*?)\{\{-?\s*end\s*-?\}\}", re.S)
_FIELD = re.compile(r"\{\{-?\s*\.(Name|Value)\s*-?\}\}")


def render_template(template: str, matched: Mapping[str, Mapping[str, str]]) -> str:
    """NFD's labelsTemplate (a Go template over the matched features), for the subset the
    module's rules use; anything else raises NfdConfigError."""

    def expand(block: re.Match[str]) -> str:
        feature, body = block.group(1), block.group(2)
        if feature not in matched:
            raise NfdConfigError(f"labelsTemplate ranges over {feature!r}, not a matched feature")
        out = []
        for name, value in matched[feature].items():
            fields = {"Name": name, "Value": value}
            out.append(_FIELD.sub(lambda f, fields=fields: fields[f.group(1)], body))
        return "".join(out)

    text = _RANGE.sub(expand, template)
    if "{{" in text or "}}" in text:
        raise NfdConfigError(
            f"labelsTemplate has template syntax this emulation cannot run: {text!r}"
        )
    return text


def _template_labels(text: str, rule_name: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key:
            raise NfdConfigError(
                f"rule {rule_name!r}: labelsTemplate line {line!r} is not key=value"
            )
        labels[key] = value
    return labels


def _qualified(labels: Mapping[str, Any]) -> dict[str, str]:
    return {(k if "/" in k else PREFIX + k): str(v) for k, v in labels.items()}


def custom_labels(host: Host, config: Mapping[str, Any]) -> dict[str, str]:
    """The labels of the ``sources.custom`` rules that match the host."""
    labels: dict[str, str] = {}
    for rule in (config.get("sources") or {}).get("custom") or []:
        name = str(rule.get("name", "?"))
        matched = _matched(host, rule)
        if matched is None:
            continue
        labels.update(_qualified(rule.get("labels") or {}))
        template = rule.get("labelsTemplate")
        if template:
            labels.update(
                _qualified(_template_labels(render_template(str(template), matched), name))
            )
    return labels


def node_labels(node: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, str]:
    """Every label NFD would publish for ``node`` under ``config`` (custom rules win)."""
    host = host_of(node)
    return {**builtin_labels(host, config), **custom_labels(host, config)}
