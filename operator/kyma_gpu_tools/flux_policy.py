"""The admission policies that hold the module's Flux objects to the allowed chart sources.

The manager's plan refuses a chart source the administrator does not allow (plan/allowed.py).
That alone left the allowlist to the manager: a compromised manager, or anyone who may write
HelmReleases or sources in kyma-system, could make the module's Flux install any chart as the
release account (issue 32, finding 4). These policies hold the objects themselves, whoever
writes them:

- kyma-gpu-flux-objects (no parameter) matches every create and update of a HelmRelease,
  HelmRepository or OCIRepository in kyma-system that is the module's: named like its release,
  carrying the module's sharding label (its own Flux reconciles only those), or (a HelmRelease)
  installing as the release account. Such a HelmRelease installs only as the release account
  into the chart's namespace, with the API server's credentials, from the module's source by
  name; without CHART_SOURCE_LABEL, a source is NVIDIA's public repository as it is (no Secret,
  not insecure) and the chart is gpu-operator.
- kyma-gpu-flux-sources (the ConfigMap kyma-system/kyma-gpu-chart-sources as parameter, Deny
  when it is missing) matches only the objects with CHART_SOURCE_LABEL, which the plan sets on
  any other source (plan/flux_objects.py): their URL, Secret, insecure flag and chart name must
  be ones the ConfigMap lists. CEL cannot read YAML, so the policy reads the key sources.yaml
  line by line (api/chart_sources.listed_lines), and the plan holds the ConfigMap to the same
  reading.

Both are written by `make manifests`; a unit test fails when the committed file differs.
"""

from __future__ import annotations

from typing import Any

from kyma_gpu.api.chart_sources import (
    CONFIG_MAP_KEY,
    CONFIG_MAP_NAME,
    NVIDIA_CHART,
    NVIDIA_REPOSITORY,
)
from kyma_gpu.api.resources import module_labels
from kyma_gpu.extensions.own_flux.bundle import SHARD, SHARD_LABEL, FluxBundle
from kyma_gpu.plan.flux_objects import CHART_SOURCE_LABEL, CHART_SOURCE_VALUE
from kyma_gpu.yamlio import dump

NAME = "kyma-gpu-flux-objects"
SOURCES_NAME = "kyma-gpu-flux-sources"
NAMESPACE = "kyma-system"
RELEASE = "gpu-operator"
"""The name of the module's HelmRelease and source (values-rules/defaults.yaml)."""
RELEASE_ACCOUNT = "gpu-operator-release"
TARGET_NAMESPACE = "gpu-operator"
WHO = "the module's Flux objects in kyma-system"


def _cel(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _rule(expression: str, words: str) -> dict[str, str]:
    message = f"{_cel(f'{WHO} {words}; refused: ')} + variables.what"
    return {"expression": expression, "messageExpression": message, "reason": "Forbidden"}


def _has_label(key: str, value: str) -> str:
    labels, k = "object.metadata.labels", _cel(key)
    return f"(has({labels}) && {k} in {labels} && {labels}[{k}] == {_cel(value)})"


def _labelled() -> str:
    return _has_label(CHART_SOURCE_LABEL, CHART_SOURCE_VALUE)


def _resource_rules() -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": ["helm.toolkit.fluxcd.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["helmreleases"],
        },
        {
            "apiGroups": ["source.toolkit.fluxcd.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["helmrepositories", "ocirepositories"],
        },
    ]


def _match_constraints(labelled: bool) -> dict[str, Any]:
    constraints: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
        "resourceRules": _resource_rules(),
    }
    if labelled:
        constraints["objectSelector"] = {"matchLabels": {CHART_SOURCE_LABEL: CHART_SOURCE_VALUE}}
    return constraints


def _the_modules() -> str:
    return (
        f"object.metadata.name == {_cel(RELEASE)} || {_has_label(SHARD_LABEL, SHARD)} || "
        "(request.resource.resource == 'helmreleases' && has(object.spec.serviceAccountName) && "
        f"object.spec.serviceAccountName == {_cel(RELEASE_ACCOUNT)})"
    )


def _variables() -> list[dict[str, str]]:
    return [
        {"name": "release", "expression": "request.resource.resource == 'helmreleases'"},
        {"name": "oci", "expression": "request.resource.resource == 'ocirepositories'"},
        {
            "name": "what",
            "expression": "request.operation + ' ' + request.resource.resource + ' ' + "
            "object.metadata.name",
        },
        {
            "name": "chart",
            "expression": "has(object.spec.chart) && has(object.spec.chart.spec) ? "
            "object.spec.chart.spec.chart : ''",
        },
    ]


def _release_rules() -> list[dict[str, str]]:
    s = "object.spec"
    helm_ref = (
        f"has({s}.chart) && !has({s}.chartRef) && {s}.chart.spec.sourceRef.kind == "
        f"'HelmRepository' && {s}.chart.spec.sourceRef.name == {_cel(RELEASE)} && "
        f"(!has({s}.chart.spec.sourceRef.namespace) || "
        f"{s}.chart.spec.sourceRef.namespace == {_cel(NAMESPACE)})"
    )
    oci_ref = (
        f"has({s}.chartRef) && !has({s}.chart) && {s}.chartRef.kind == 'OCIRepository' && "
        f"{s}.chartRef.name == {_cel(RELEASE)} && (!has({s}.chartRef.namespace) || "
        f"{s}.chartRef.namespace == {_cel(NAMESPACE)})"
    )
    return [
        _rule(
            f"!variables.release || (object.metadata.name == {_cel(RELEASE)} && "
            f"has({s}.serviceAccountName) && {s}.serviceAccountName == {_cel(RELEASE_ACCOUNT)} && "
            f"has({s}.targetNamespace) && {s}.targetNamespace == {_cel(TARGET_NAMESPACE)} && "
            f"(!has({s}.storageNamespace) || {s}.storageNamespace == {_cel(TARGET_NAMESPACE)}) && "
            f"!has({s}.kubeConfig))",
            f"are one HelmRelease {RELEASE} that installs as {RELEASE_ACCOUNT} into "
            f"{TARGET_NAMESPACE} with the API server's own credentials",
        ),
        _rule(
            f"!variables.release || ({helm_ref}) || ({oci_ref})",
            f"take the chart from the module's source {RELEASE} in {NAMESPACE} only",
        ),
        _rule(
            f"!variables.release || {_labelled()} || variables.chart == {_cel(NVIDIA_CHART)}",
            f"install the chart {NVIDIA_CHART} unless a cluster administrator lists another",
        ),
    ]


def _source_rules() -> list[dict[str, str]]:
    s = "object.spec"
    url = f"({s}.url.endsWith('/') ? {s}.url.substring(0, size({s}.url) - 1) : {s}.url)"
    return [
        _rule(
            f"variables.release || {_labelled()} || (!variables.oci && {url} == "
            f"{_cel(NVIDIA_REPOSITORY)} && !has({s}.secretRef) && "
            f"(!has({s}.insecure) || !{s}.insecure))",
            f"read charts only from {NVIDIA_REPOSITORY}, without a Secret, unless a cluster "
            "administrator allows another source",
        ),
        _rule(
            f"variables.release || (!has({s}.certSecretRef) && !has({s}.proxySecretRef) && "
            f"(!has({s}.provider) || {s}.provider == 'generic') && "
            f"(!has({s}.serviceAccountName)))",
            "send no other credentials than an administrator's secretRef",
        ),
    ]


def _lines() -> str:
    key = _cel(CONFIG_MAP_KEY)
    return (
        f"has(params.data) && {key} in params.data ? params.data[{key}].split('\\n')"
        ".map(l, l.trim()) : []"
    )


def _listed_variables() -> list[dict[str, str]]:
    """api/chart_sources.listed_lines, in CEL."""
    bare = "variables.lines.map(l, l.startsWith('- ') ? l.substring(2).trim() : l)"
    unquote = (
        "(size(v) > 1 && (v.startsWith('\"') || v.startsWith(\"'\")) && "
        "v.endsWith(v.substring(0, 1)) ? v.substring(1, size(v) - 1) : v)"
    )
    return [
        {"name": "lines", "expression": _lines()},
        {
            "name": "urls",
            "expression": f"{bare}.filter(l, l.startsWith('url:')).map(l, l.substring(4).trim())"
            f".map(v, {unquote}).map(u, u.endsWith('/') ? u.substring(0, size(u) - 1) : u)",
        },
        {
            "name": "chartNames",
            "expression": f"{bare}.filter(l, l.startsWith('chartName:'))"
            f".map(l, l.substring(10).trim()).map(v, {unquote})",
        },
        {
            "name": "items",
            "expression": "variables.lines.filter(l, l.startsWith('- '))"
            f".map(l, l.substring(2).trim()).map(v, {unquote}) + {bare}"
            ".filter(l, l.startsWith('secretRefs:')).map(l, l.substring(11).trim())"
            ".filter(l, l.startsWith('[') && l.endsWith(']'))"
            ".map(l, l.substring(1, size(l) - 1).split(',')).flatten()"
            f".map(v, v.trim()).map(v, {unquote})",
        },
        {"name": "insecure", "expression": f"{bare}.exists(l, l == 'insecure: true')"},
        *_variables(),
    ]


def _listed_rules() -> list[dict[str, str]]:
    s = "object.spec"
    url = f"({s}.url.endsWith('/') ? {s}.url.substring(0, size({s}.url) - 1) : {s}.url)"
    oci_url = (
        f"variables.urls.exists(u, {url} == u || ({url}.startsWith(u + '/') && "
        f"!{url}.substring(size(u) + 1).contains('/')))"
    )
    where = f"the ConfigMap {NAMESPACE}/{CONFIG_MAP_NAME}, key {CONFIG_MAP_KEY}"
    return [
        _rule(
            f"variables.release || (variables.oci ? {oci_url} : {url} in variables.urls)",
            f"read charts only from a source {where} lists",
        ),
        _rule(
            f"variables.release || !has({s}.secretRef) || {s}.secretRef.name in variables.items",
            f"send only a Secret {where} lists",
        ),
        _rule(
            f"variables.release || !has({s}.insecure) || !{s}.insecure || variables.insecure",
            f"read without TLS only where {where} allows it",
        ),
        _rule(
            f"!variables.release || variables.chart == '' || variables.chart == "
            f"{_cel(NVIDIA_CHART)} || variables.chart in variables.chartNames",
            f"install only a chart {where} lists",
        ),
    ]


MANAGER = f"system:serviceaccount:{NAMESPACE}:gpu-manager"
"""The manager's account: the one writer of the module's Flux objects."""
ADMINS = "system:masters"
"""Cluster administrators past RBAC, who may remove the policy anyway: never refused."""
CEL_RESERVED = frozenset({
    "as", "break", "const", "continue", "else", "false", "for", "function", "if", "import", "in",
    "let", "loop", "package", "namespace", "null", "return", "true", "var", "void", "while",
})  # fmt: skip
"""Property names CEL reaches as __name__ (Kubernetes' escaping)."""


def spec_fields(plural: str) -> tuple[str, ...]:
    """Every spec property of a Flux kind, in every version its CRD (the module's Flux bundle,
    flux/crds) serves: what a writer other than the manager may not change."""
    crd = next(o for o in FluxBundle().objects() if o["kind"] == "CustomResourceDefinition"
               and o["spec"]["names"]["plural"] == plural)  # fmt: skip
    return tuple(sorted({
        name
        for version in crd["spec"]["versions"] if version.get("served")
        for name in version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    }))  # fmt: skip


def _unchanged(plural: str) -> str:
    def field(name: str) -> str:
        return f"__{name}__" if name in CEL_RESERVED else name

    return " && ".join(f"object.spec.?{field(n)} == oldObject.spec.?{field(n)}"
                       for n in spec_fields(plural) if n not in USERS_FIELDS)  # fmt: skip


USERS_FIELDS = frozenset({"suspend"})
"""What others may change: `flux suspend` and `flux resume` (plan/ownership.py USERS)."""


def _writer_rule() -> dict[str, str]:
    """Only the manager (and system:masters) writes the module's Flux objects; others suspend,
    resume and annotate them. The manager removes whatever else another field manager wrote
    (plan/ownership.py): this holds the same line at admission, before Flux can install it."""
    sources = f"(variables.oci ? ({_unchanged('ocirepositories')}) : " \
        f"({_unchanged('helmrepositories')}))"  # fmt: skip
    return _rule(
        f"request.userInfo.username == {_cel(MANAGER)} || {_cel(ADMINS)} in "
        "request.userInfo.groups || (request.operation == 'UPDATE' && "
        "object.metadata.?labels == oldObject.metadata.?labels && (variables.release ? "
        f"({_unchanged('helmreleases')}) : {sources}))",
        "are written by the module's manager only: others may suspend and resume them "
        "(spec.suspend) and annotate them; the Gpu sets the rest",
    )


def _policy(name: str, labelled: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": _match_constraints(labelled),
        "matchConditions": [{"name": "the-modules", "expression": _the_modules()}],
    }
    if labelled:
        spec["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"}
        spec["variables"] = _listed_variables()
        spec["validations"] = _listed_rules()
    else:
        spec["variables"] = _variables()
        spec["validations"] = [_writer_rule(), *_release_rules(), *_source_rules()]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": module_labels("gpu-manager")},
        "spec": spec,
    }


def _binding(name: str, labelled: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
    if labelled:
        spec["paramRef"] = {
            "name": CONFIG_MAP_NAME,
            "namespace": NAMESPACE,
            "parameterNotFoundAction": "Deny",
        }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": module_labels("gpu-manager")},
        "spec": spec,
    }


DELETES_NAME = "kyma-gpu-flux-deletes"
DELETERS = (
    MANAGER,
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:serviceaccount:kube-system:namespace-controller",
    "system:kube-controller-manager",
)
"""Who deletes the module's Flux objects: the manager when the Gpu goes, the garbage collector
(they are owned by the Gpu) and the namespace controller, as their own accounts or as
kube-controller-manager's where it runs without per-controller accounts."""


def _deletes_policy() -> dict[str, Any]:
    """A delete of the module's HelmRelease uninstalls the GPU stack (Flux's finalizer), and
    the manager writes it again at once: a second install. Only the module and Kubernetes'
    own controllers delete them; a kyma-system writer deletes the Gpu instead."""
    rules = _resource_rules()
    for rule in rules:
        rule["operations"] = ["DELETE"]
    deleters = ", ".join(_cel(d) for d in DELETERS)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": DELETES_NAME, "labels": module_labels("gpu-manager")},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                "resourceRules": rules,
            },
            "matchConditions": [
                {
                    "name": "the-modules",
                    "expression": _the_modules().replace("object.", "oldObject."),
                }
            ],
            "validations": [
                {
                    "expression": f"request.userInfo.username in [{deleters}] || "
                    f"{_cel(ADMINS)} in request.userInfo.groups",
                    "messageExpression": _cel(
                        f"{WHO} are deleted by the module's manager only (when the Gpu goes; Flux "
                        "then uninstalls the GPU stack): delete the Gpu instead; refused: DELETE "
                    )
                    + " + request.resource.resource + ' ' + oldObject.metadata.name",
                    "reason": "Forbidden",
                }
            ],
        },
    }


def flux_policy_yaml() -> str:
    header = (
        "# Generated by `make manifests` from operator/kyma_gpu_tools/flux_policy.py "
        "(the allowed chart sources at admission). Do not edit.\n"
    )
    docs = [
        _policy(NAME, False),
        _binding(NAME, False),
        _policy(SOURCES_NAME, True),
        _binding(SOURCES_NAME, True),
        _deletes_policy(),
        _binding(DELETES_NAME, False),
    ]
    return header + "---\n".join(dump(d) for d in docs)
