"""The ValidatingAdmissionPolicies that hold the manager's own account to what its code writes.

RBAC cannot limit `create` by name, and the manager must create its Flux (two Deployments and
seven CRDs, on a cluster without Flux), its Lease and the Flux objects of the release. A
compromised manager could otherwise create any Deployment in kyma-system, under any
ServiceAccount there, privileged and with the host's root mounted (issue 32, finding 1). So:

- kyma-gpu-manager (no parameter) matches every write of
  system:serviceaccount:kyma-system:gpu-manager to a kind its RBAC lets it write (WRITABLE; the
  rest RBAC refuses) and allows only:
  - namespaced objects in kyma-system only (its Events too: they are about the Gpu);
  - cluster-scoped: the Gpu and the bundle's CRDs by name, a CRD only while it carries
    PROVIDED_LABEL (created with it; changed, unlabelled or deleted only from a stored CRD with
    it: a Flux the module did not install is never written) and never its spec.conversion;
  - every name is the object's own (TARGET), so a DELETECOLLECTION is held like a DELETE;
  - Deployments by the bundle's names only, each as the bundle renders it where it matters:
    its own ServiceAccount, one container `manager` with the bundle's arguments, no command,
    only the bundle's environment names, no host namespaces, only emptyDir volumes, no init or
    ephemeral containers, the bundle's security contexts; the image is the bundle's (by tag, or
    by tag and digest), unless the Deployment carries MIRROR_LABEL, then any registry but the
    same path end, tag and optional digest (`.../fluxcd/helm-controller:v1.6.4@sha256:...`);
  - its Lease by name;
  - its HelmRelease and chart source by name (a HelmRelease of another name could be reconciled
    by a cluster's own Flux as cluster-admin), the HelmRelease installing as the release account
    into the chart's namespace only (what it installs: kyma_gpu_tools/flux_policy.py).
- kyma-gpu-manager-mirrors (the ConfigMap kyma-system/kyma-gpu-chart-sources as parameter,
  Deny when it is missing) matches only the Deployments with MIRROR_LABEL: their images must lie
  below a registry mirror the administrator lists (key `registries`). The label is in the match
  (objectSelector), which the API server evaluates before it looks the parameter up, so a
  cluster without the ConfigMap refuses mirrored images and is not otherwise affected.

- kyma-gpu-manager-nodes (issue 33) matches only UPDATE of nodes and nodes/status, the two writes
  of opt-in node marks for GPU health (NODE_WRITABLE; RBAC grants `patch` on both and nothing else
  of Nodes): on nodes/status only the condition NODE_CONDITION may change, and be True only on
  a node with GPU evidence; on nodes only spec.unschedulable and CORDON_ANNOTATION, the
  annotation added only with a cordon of a schedulable node with GPU evidence, an uncordon only
  of a node carrying it, dropping it. GPU evidence is what no tenant writes (issue 43, the
  manager's MarkGround): a GPU resource above zero in the old Node's capacity or allocatable, a
  machine-type label (MACHINE_TYPE_LABELS) naming a GPU machine type of the registry
  (gpu_machine_types, generated from values-rules/machine-types.yaml), or the mark True already;
  NFD's and GFD's labels never count. Everything else of the Node (NODE_METADATA_FIELDS, the
  other annotations, NODE_SPEC_FIELDS, NODE_STATUS_FIELDS, the other conditions) stays as it
  was. Every kubelet's status update meets its matchCondition (a string comparison), which is
  why kyma-gpu-manager itself never matches Nodes.

All are generated (the first two from the bundle, operator/kyma_gpu/extensions/own_flux/
flux.yaml) by `make manifests`; a unit test fails when config/admission/manager_policy.yaml
differs. What the Flux bundle and the Nodes need is there only while the extension that writes
them is registered (`GRANTS`: own-flux FLUX_BUNDLE, node-marks NODES): the Deployments' and
CRDs' kinds and rules of kyma-gpu-manager and kyma-gpu-manager-mirrors, and
kyma-gpu-manager-nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from kyma_gpu.api.chart_sources import CONFIG_MAP_NAME
from kyma_gpu.api.models import API_GROUP, PLURAL
from kyma_gpu.api.resources import module_labels
from kyma_gpu.extensions import EXTENSIONS
from kyma_gpu.extensions.node_marks.names import CORDON_ANNOTATION, NODE_CONDITION
from kyma_gpu.extensions.own_flux.bundle import MIRROR_LABEL, MIRROR_VALUE, FluxBundle
from kyma_gpu.facts.node import (
    GPU_RESOURCE,
    GPU_RESOURCE_PREFIXES,
    LABEL_INSTANCE_TYPE,
    LABEL_INSTANCE_TYPE_BETA,
)
from kyma_gpu.plan.provision import PROVIDED, PROVIDED_LABEL
from kyma_gpu.rules.catalog import Catalog
from kyma_gpu.yamlio import dump
from kyma_gpu_tools.image_policy import MIRRORS_EXPRESSION

NAME = "kyma-gpu-manager"
MIRRORS_NAME = "kyma-gpu-manager-mirrors"
NODES_NAME = "kyma-gpu-manager-nodes"
NAMESPACE = "kyma-system"
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:gpu-manager"
RELEASE_ACCOUNT = "gpu-operator-release"
RELEASE = "gpu-operator"
"""The name of the module's HelmRelease and its source (values-rules/defaults.yaml): a
HelmRelease of another name could be reconciled by a cluster's own Flux, as cluster-admin."""
FLUX_KINDS = (
    "helm.toolkit.fluxcd.io/helmreleases",
    "source.toolkit.fluxcd.io/helmrepositories",
    "source.toolkit.fluxcd.io/ocirepositories",
)
TARGET_NAMESPACE = "gpu-operator"
LEASE = "kyma-gpu-manager"


class Grant(StrEnum):
    """What an extension needs the manager's account to write beyond the core's objects (the
    Gpu, its HelmRelease and chart source, its Lease, Events): the policies' pieces that hold
    the account to these writes are there while the extension is registered."""

    FLUX_BUNDLE = "the Flux bundle: its Deployments and CRDs, by name"
    NODES = "Nodes: a condition (nodes/status), the cordon and its annotation (nodes)"


GRANTS: Mapping[str, Grant] = MappingProxyType(
    {"own-flux": Grant.FLUX_BUNDLE, "node-marks": Grant.NODES}
)
"""Which extension (by its name) writes what: the tools know the extensions' writes, the
runtime's interface holds none of this."""


def registered() -> frozenset[Grant]:
    """What the registered extensions need the manager to write (extensions/__init__.py): the
    policies hold the core's writes and these, no more."""
    return frozenset(GRANTS[e.name] for e in EXTENSIONS if e.name in GRANTS)


def writable(grants: frozenset[Grant]) -> Mapping[str, tuple[str, ...]]:
    """The kinds the manager writes, by API group: the core's, and the Flux bundle's
    Deployments and CRDs when an extension needs them (Grant.FLUX_BUNDLE)."""
    bundle = Grant.FLUX_BUNDLE in grants
    return MappingProxyType({
        API_GROUP: (PLURAL,),
        "helm.toolkit.fluxcd.io": ("helmreleases",),
        "source.toolkit.fluxcd.io": ("helmrepositories", "ocirepositories"),
        **({"apps": ("deployments",)} if bundle else {}),
        "coordination.k8s.io": ("leases",),
        "": ("events",),
        "events.k8s.io": ("events",),
        **({"apiextensions.k8s.io": ("customresourcedefinitions",)} if bundle else {}),
    })  # fmt: skip


WRITABLE = writable(registered())
"""The kinds the manager's RBAC lets it write (config/rbac; a unit test holds the two together):
the policy matches these only, so the rest of the cluster's requests (Node and pod updates,
above all) never meet it. RBAC refuses the manager everything else before admission."""
NODE_WRITABLE: Mapping[str, tuple[str, ...]] = MappingProxyType({"": ("nodes", "nodes/status")})
"""What the manager's RBAC lets it write of Nodes (patch, for GPU health's node marks, issue 33):
kyma-gpu-manager-nodes matches these, for UPDATE only (a PATCH is an UPDATE at admission), and
kyma-gpu-manager does not (WRITABLE has no Nodes): the kubelets' status updates meet only the
one matchCondition of kyma-gpu-manager-nodes."""
NODE_CONDITION_TYPE = NODE_CONDITION
"""The one Node condition the manager may write (extensions/node_marks/names.py)."""
NODE_CORDON_ANNOTATION = CORDON_ANNOTATION
"""The one Node annotation the manager may write, with a cordon (extensions/node_marks/names.py)."""
MACHINE_TYPE_LABELS = (LABEL_INSTANCE_TYPE, LABEL_INSTANCE_TYPE_BETA)
"""Where a Node names its machine type (the kubelet and the cloud provider set them; NFD may not
write kubernetes.io labels), read as facts/node.py reads them."""
NODE_METADATA_FIELDS = ("labels", "finalizers", "ownerReferences")
"""Node metadata the manager never changes (annotations: all but NODE_CORDON_ANNOTATION)."""
NODE_SPEC_FIELDS = ("taints", "podCIDR", "podCIDRs", "providerID", "configSource", "externalID")
"""NodeSpec but unschedulable: CEL cannot iterate a native object's fields, so each is named (an
integration test compares them with the API server's schema)."""
NODE_STATUS_FIELDS = (
    "capacity",
    "allocatable",
    "addresses",
    "daemonEndpoints",
    "nodeInfo",
    "images",
    "volumesInUse",
    "volumesAttached",
    "config",
    "phase",
    "runtimeHandlers",
    "features",
    "declaredFeatures",
)
"""NodeStatus but conditions, named for the same reason."""
LEASE_RENEWALS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "apiGroups": ("coordination.k8s.io",),
    "apiVersions": ("*",),
    "operations": ("UPDATE",),
    "resources": ("leases",),
})  # fmt: skip
"""Not matched: every kubelet renews its Lease every 10 s (a tenth of the Nodes each second), so
a match there costs every cluster; RBAC already limits the manager's Lease updates to its own
name (benchmarks/admission_cost.py measures it)."""
WHO = "the manager's account gpu-manager (kyma-system)"
TARGET = (
    "has(request.subResource) && request.subResource != '' ? request.name : "
    "(request.operation == 'DELETE' ? oldObject : object).metadata.name"
)
"""The name of the object written: its own (oldObject's on DELETE), not the request's. A
DELETECOLLECTION reaches admission once per item as a DELETE with an empty request name
(issue 43); a subresource's request always names its object (and a TokenRequest or Scale
need not)."""
CRD_KIND = "apiextensions.k8s.io/customresourcedefinitions"
DEPLOYMENT_KIND = "apps/deployments"
_SPEC = "object.spec.template.spec"
_CONTAINER = f"{_SPEC}.containers[0]"
_DIGEST = "(@sha256:[0-9a-f]{64})?$"


def _cel(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _list(items: Sequence[str]) -> str:
    return "[" + ", ".join(_cel(i) for i in items) + "]"


def _rule(expression: str, message: str) -> dict[str, str]:
    return {"expression": expression, "messageExpression": message, "reason": "Forbidden"}


def _refused(words: str) -> str:
    return f"{_cel(f'{WHO} {words}; refused: ')} + variables.what"


def _deployments() -> dict[str, Mapping[str, Any]]:
    return {o["metadata"]["name"]: o for o in FluxBundle().objects() if o["kind"] == "Deployment"}


def _image_pattern(image: str, mirrored: bool) -> str:
    """The bundle's image, or (mirrored) any registry with the same last two path segments and
    tag; a digest may follow either."""
    name, tag = image.rsplit(":", 1)
    if mirrored:
        tail = "/".join(name.split("/")[-2:])
        return f"^[^@:]+(:[0-9]+)?/([^@]+/)?{re.escape(tail)}:{re.escape(tag)}{_DIGEST}"
    return f"^{re.escape(name)}:{re.escape(tag)}{_DIGEST}"


def _by_name(values: Mapping[str, str], otherwise: str = "false") -> str:
    """A CEL expression choosing by variables.target."""
    out = otherwise
    for name, value in sorted(values.items(), reverse=True):
        out = f"(variables.target == {_cel(name)} ? {value} : {out})"
    return out


def _container_rules(deployments: Mapping[str, Mapping[str, Any]]) -> list[str]:
    args, envs, images, mirrored = {}, {}, {}, {}
    for name, obj in deployments.items():
        container = obj["spec"]["template"]["spec"]["containers"][0]
        args[name] = _list(container.get("args", []))
        envs[name] = _list([e["name"] for e in container.get("env", [])])
        images[name] = _cel(_image_pattern(container["image"], False))
        mirrored[name] = _cel(_image_pattern(container["image"], True))
    c = _CONTAINER
    label = f"object.metadata.labels[{_cel(MIRROR_LABEL)}]"
    mirror = f"{_cel(MIRROR_LABEL)} in object.metadata.labels && {label} == {_cel(MIRROR_VALUE)}"
    return [
        f"{_SPEC}.containers.size() == 1 && {c}.name == 'manager'",
        f"has({c}.args) && {c}.args == {_by_name(args, '[]')}",
        f"!has({c}.command) && !has({c}.envFrom)",
        f"!has({c}.env) || {c}.env.all(e, e.name in {_by_name(envs, '[]')})",
        f"{c}.image.matches(has(object.metadata.labels) && {mirror} ? "
        f"{_by_name(mirrored, _cel('^$'))} : {_by_name(images, _cel('^$'))})",
        f"has({c}.securityContext) && {c}.securityContext.allowPrivilegeEscalation == false"
        f" && {c}.securityContext.readOnlyRootFilesystem == true"
        f" && (!has({c}.securityContext.privileged) || {c}.securityContext.privileged == false)"
        f" && has({c}.securityContext.capabilities)"
        f" && {c}.securityContext.capabilities.drop == ['ALL']"
        f" && !has({c}.securityContext.capabilities.add)",
    ]


def _pod_rules() -> list[str]:
    s = _SPEC
    return [
        f"{s}.serviceAccountName == variables.target",
        f"!has({s}.hostNetwork) || !{s}.hostNetwork",
        f"!has({s}.hostPID) || !{s}.hostPID",
        f"!has({s}.hostIPC) || !{s}.hostIPC",
        f"!has({s}.initContainers) && !has({s}.ephemeralContainers)",
        f"!has({s}.volumes) || {s}.volumes.all(v, has(v.emptyDir))",
        f"has({s}.securityContext) && has({s}.securityContext.runAsNonRoot)"
        f" && {s}.securityContext.runAsNonRoot",
    ]


def _deployment_validation(deployments: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    checks = " && ".join(f"({r})" for r in _pod_rules() + _container_rules(deployments))
    shape = (
        "creates and changes only the Deployments of its Flux bundle as the bundle renders "
        "them (their own ServiceAccount, the bundle's image, arguments, environment and "
        "security contexts, no host namespaces, only emptyDir volumes)"
    )
    return _rule(f"!variables.deployment || ({checks})", _refused(shape))


def _helm_release_validation() -> dict[str, str]:
    spec = "object.spec"
    checks = (
        f"has({spec}.serviceAccountName) && {spec}.serviceAccountName == {_cel(RELEASE_ACCOUNT)}"
        f" && has({spec}.targetNamespace) && {spec}.targetNamespace == {_cel(TARGET_NAMESPACE)}"
        f" && (!has({spec}.storageNamespace)"
        f" || {spec}.storageNamespace == {_cel(TARGET_NAMESPACE)})"
        f" && !has({spec}.kubeConfig)"
    )
    words = (
        f"writes HelmReleases that install only as {RELEASE_ACCOUNT} into {TARGET_NAMESPACE}, "
        "with the API server's own credentials (no kubeConfig)"
    )
    return _rule(f"!variables.helmRelease || ({checks})", _refused(words))


def _crd_validations() -> list[dict[str, str]]:
    """A Flux CRD only while it is the module's own (PROVIDED_LABEL: on the new object when
    created, on the stored one when changed or deleted; dropping the label is the hand-over),
    and never its spec.conversion: a webhook there would receive every Flux object of the
    cluster (issue 43)."""
    crd = f"variables.kind != {_cel(CRD_KIND)}"
    label, value = _cel(PROVIDED_LABEL), _cel(PROVIDED)
    own = {
        side: f"(has({side}.metadata.labels) && {label} in {side}.metadata.labels"
        f" && {side}.metadata.labels[{label}] == {value})"
        for side in ("object", "oldObject")
    }
    new, old = "object.spec.conversion", "oldObject.spec.conversion"
    none = f"(!has({new}) || ({new}.strategy == 'None' && !has({new}.webhook)))"
    same = f"(has({new}) ? has({old}) && {new} == {old} : !has({old}))"
    return [
        _rule(
            f"{crd} || (request.operation == 'CREATE' ? {own['object']} : {own['oldObject']})",
            _refused(
                f"writes a Flux CRD only while it carries {PROVIDED_LABEL}: {PROVIDED} "
                "(the module's own Flux; a Flux it did not install is never written)"
            ),
        ),
        _rule(
            f"{crd} || request.operation == 'DELETE' || "
            f"(request.operation == 'CREATE' ? {none} : {same})",
            _refused("never sets or changes a Flux CRD's spec.conversion"),
        ),
    ]


def _variables(grants: frozenset[Grant]) -> list[dict[str, str]]:
    writes = "request.operation in ['CREATE', 'UPDATE']"
    return [
        {"name": "ns", "expression": "has(request.namespace) ? request.namespace : ''"},
        {"name": "target", "expression": TARGET},
        {
            "name": "subresource",
            "expression": "has(request.subResource) ? request.subResource : ''",
        },
        {"name": "kind", "expression": "request.resource.group + '/' + request.resource.resource"},
        {
            "name": "what",
            "expression": "request.operation + ' ' + request.resource.resource + "
            "(variables.subresource != '' ? '/' + variables.subresource : '') + "
            "(variables.target != '' ? ' ' + variables.target : '') + "
            "(variables.ns != '' ? ' in namespace ' + variables.ns : '')",
        },
        *(
            [
                {
                    "name": "deployment",
                    "expression": f"{writes} && variables.kind == 'apps/deployments' "
                    "&& variables.subresource == ''",
                }
            ]
            if Grant.FLUX_BUNDLE in grants
            else []
        ),
        {
            "name": "helmRelease",
            "expression": f"{writes} && variables.kind == 'helm.toolkit.fluxcd.io/helmreleases' "
            "&& variables.subresource == ''",
        },
    ]


def _validations(grants: frozenset[Grant]) -> list[dict[str, str]]:
    """The core's rules; the Flux bundle's among them when an extension writes it."""
    bundle = Grant.FLUX_BUNDLE in grants
    namespaced = (*FLUX_KINDS, *([DEPLOYMENT_KIND] if bundle else []),
                  "coordination.k8s.io/leases", "/events", "events.k8s.io/events")  # fmt: skip
    cluster = (f"{API_GROUP}/{PLURAL}", *([CRD_KIND] if bundle else []))
    among = "the Gpu and the Flux CRDs" if bundle else "the Gpu"
    return [
        _rule(
            f"variables.ns == '' || "
            f"(variables.ns == {_cel(NAMESPACE)} && variables.kind in {_list(namespaced)})",
            _refused(f"writes only the module's kinds in namespace {NAMESPACE}"),
        ),
        _rule(
            f"variables.ns != '' || variables.kind in {_list(cluster)}",
            _refused(f"writes only {among} among cluster-scoped objects"),
        ),
        *(_bundle_names() if bundle else []),
        _rule(
            f"!(variables.kind in {_list(FLUX_KINDS)}) || variables.target == {_cel(RELEASE)}",
            _refused(f"writes only its own HelmRelease and chart source, {RELEASE}"),
        ),
        _rule(
            f"variables.kind != 'coordination.k8s.io/leases' || variables.target == {_cel(LEASE)}",
            _refused(f"writes only its own Lease {LEASE}"),
        ),
        *([_deployment_validation(_deployments())] if bundle else []),
        _helm_release_validation(),
        *(_crd_validations() if bundle else []),
    ]


def _bundle_names() -> list[dict[str, str]]:
    """The Flux bundle's CRDs and Deployments, by name (Grant.FLUX_BUNDLE)."""
    return [
        _rule(
            "variables.kind != 'apiextensions.k8s.io/customresourcedefinitions' || "
            f"variables.target in {_list(FluxBundle().crds())}",
            _refused("writes only the CRDs of its Flux bundle, by name"),
        ),
        _rule(
            "variables.kind != 'apps/deployments' || "
            f"variables.target in {_list(sorted(_deployments()))}",
            _refused("writes only the Deployments of its Flux bundle, by name"),
        ),
    ]


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": module_labels("gpu-manager")}


def policy(grants: frozenset[Grant]) -> dict[str, Any]:
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE", "CONNECT"],
                    "resources": [r for resource in resources for r in (resource, f"{resource}/*")],
                    "scope": "*",
                }
                for group, resources in writable(grants).items()
            ],
            "excludeResourceRules": [{k: list(v) for k, v in LEASE_RENEWALS.items()}],
        },
        "matchConditions": [
            {
                "name": "the-manager-account",
                "expression": f"request.userInfo.username == {_cel(ACCOUNT)}",
            }
        ],
        "variables": _variables(grants),
        "validations": _validations(grants),
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(NAME),
        "spec": spec,
    }


def mirrors_policy() -> dict[str, Any]:
    images = f"{_SPEC}.containers.all(c, variables.mirrors.exists(m, c.image.startsWith(m + '/')))"
    words = (
        "runs its Flux controllers from a registry mirror only if a cluster administrator "
        "lists it (ConfigMap kyma-system/kyma-gpu-chart-sources, key registries); refused: "
    )
    spec = {
        "failurePolicy": "Fail",
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            "objectSelector": {"matchLabels": {MIRROR_LABEL: MIRROR_VALUE}},
            "resourceRules": [
                {
                    "apiGroups": ["apps"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["deployments"],
                    "resourceNames": sorted(_deployments()),
                }
            ],
        },
        "matchConditions": [
            {
                "name": "the-manager-account",
                "expression": f"request.userInfo.username == {_cel(ACCOUNT)}",
            }
        ],
        "variables": [{"name": "mirrors", "expression": MIRRORS_EXPRESSION}],
        "validations": [
            _rule(images, f"{_cel(WHO + ' ' + words)} + {_CONTAINER}.image"),
        ],
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(MIRRORS_NAME),
        "spec": spec,
    }


def _same(path: str) -> str:
    """object.<path> is oldObject.<path>, absent in both or equal."""
    new, old = f"object.{path}", f"oldObject.{path}"
    return f"(has({new}) ? has({old}) && {new} == {old} : !has({old}))"


def gpu_machine_types(catalog: Catalog | None = None) -> list[str]:
    """Every GPU machine type of the registry, of any provider, sorted."""
    registry = (catalog or Catalog()).machine_types
    return sorted({name for types in registry.types.values() for name in types})


def _reported(resources: str) -> str:
    """CEL: the old Node's `resources` (capacity or allocatable) has a GPU resource above zero
    (the API server writes a quantity in canonical form: zero is '0')."""
    names = " || ".join(f"k.startsWith({_cel(p)})" for p in GPU_RESOURCE_PREFIXES)
    return (
        f"has({resources}) && {resources}.exists(k, (k == {_cel(GPU_RESOURCE)} || {names})"
        f" && {resources}[k] != '0')"
    )


def _gpu_evidence() -> dict[str, str]:
    """The variables that say a Node has GPU evidence no tenant writes (issue 43)."""
    labels = "oldObject.metadata.labels"
    machine = " || ".join(
        f"({_cel(label)} in {labels} && {labels}[{_cel(label)}] in variables.gpuMachineTypes)"
        for label in MACHINE_TYPE_LABELS
    )
    return {
        "gpuMachineTypes": _list(gpu_machine_types()),
        "reported": f"({_reported('oldObject.status.capacity')}) || "
        f"({_reported('oldObject.status.allocatable')})",
        "gpuMachineType": f"has({labels}) && ({machine})",
        "marked": "variables.oldMarks.exists(c, c.status == 'True')",
        "gpu": "variables.reported || variables.gpuMachineType || variables.marked",
    }


def _node_variables() -> list[dict[str, str]]:
    cordon = _cel(NODE_CORDON_ANNOTATION)
    kind = _cel(NODE_CONDITION_TYPE)
    conditions = {
        f"{side}{name}": f"has({obj}.status.conditions) ? "
        f"{obj}.status.conditions.filter(c, c.type {op} {kind}) : []"
        for side, obj in (("new", "object"), ("old", "oldObject"))
        for name, op in (("Marks", "=="), ("Others", "!="))
    }
    annotations = {
        f"{side}Annotations": f"has({obj}.metadata.annotations) ? {obj}.metadata.annotations : {{}}"
        for side, obj in (("new", "object"), ("old", "oldObject"))
    }
    unschedulable = {
        f"{side}Unschedulable": f"has({obj}.spec.unschedulable) && {obj}.spec.unschedulable"
        for side, obj in (("new", "object"), ("old", "oldObject"))
    }
    plain = {
        "subresource": "has(request.subResource) ? request.subResource : ''",
        "status": "variables.subresource == 'status'",
        "what": "request.operation + ' nodes' + "
        "(variables.subresource != '' ? '/' + variables.subresource : '') + ' ' + "
        "oldObject.metadata.name",
        **conditions,
        **_gpu_evidence(),
        **annotations,
        **unschedulable,
        "newCordoned": f"{cordon} in variables.newAnnotations",
        "oldCordoned": f"{cordon} in variables.oldAnnotations",
        "cordonAdded": "variables.newCordoned && !(variables.oldCordoned && "
        f"variables.newAnnotations[{cordon}] == variables.oldAnnotations[{cordon}])",
    }
    return [{"name": name, "expression": expression} for name, expression in plain.items()]


EVIDENCE_WORDS = (
    f"{GPU_RESOURCE} above zero in status.capacity or allocatable, a GPU machine type of the "
    f"registry in {LABEL_INSTANCE_TYPE}, or the condition True already; NFD's and GPU feature "
    "discovery's labels never count"
)
"""What the policy's refusals call GPU evidence."""


def _node_validations() -> list[dict[str, str]]:
    cordon = _cel(NODE_CORDON_ANNOTATION)
    new, old = "variables.newAnnotations", "variables.oldAnnotations"
    other_annotations = (
        f"{new}.all(k, k == {cordon} || (k in {old} && {old}[k] == {new}[k]))"
        f" && {new}.size() - (variables.newCordoned ? 1 : 0)"
        f" == {old}.size() - (variables.oldCordoned ? 1 : 0)"
    )
    metadata = " && ".join(_same(f"metadata.{f}") for f in NODE_METADATA_FIELDS)
    spec = " && ".join(_same(f"spec.{f}") for f in NODE_SPEC_FIELDS)
    status = " && ".join(_same(f"status.{f}") for f in NODE_STATUS_FIELDS)
    condition = NODE_CONDITION_TYPE
    return [
        _rule(metadata, _refused("changes no label, finalizer or owner of a Node")),
        _rule(
            other_annotations,
            _refused(f"changes no annotation of a Node but {NODE_CORDON_ANNOTATION}"),
        ),
        _rule(spec, _refused("changes nothing of a Node's spec but unschedulable (a cordon)")),
        _rule(
            f"{status} && variables.newOthers == variables.oldOthers",
            _refused(f"changes nothing of a Node's status but its condition {condition}"),
        ),
        _rule(
            "variables.status || variables.newMarks == variables.oldMarks",
            _refused(f"writes the condition {condition} only through nodes/status"),
        ),
        _rule(
            "!variables.status || (variables.newUnschedulable == variables.oldUnschedulable"
            " && variables.newCordoned == variables.oldCordoned"
            f" && (!variables.newCordoned || variables.newAnnotations[{cordon}]"
            f" == variables.oldAnnotations[{cordon}]))",
            _refused(f"cordons and writes {NODE_CORDON_ANNOTATION} only through nodes"),
        ),
        _rule(
            "!variables.newMarks.exists(c, c.status == 'True') || variables.gpu",
            _refused(
                f"sets the condition {condition} True only on a Node with GPU evidence "
                f"({EVIDENCE_WORDS})"
            ),
        ),
        _rule(
            "!variables.cordonAdded || "
            "(variables.newUnschedulable && !variables.oldUnschedulable && variables.gpu)",
            _refused(
                f"adds {NODE_CORDON_ANNOTATION} only when it cordons a schedulable Node "
                "with GPU evidence in the same write"
            ),
        ),
        _rule(
            "!variables.newUnschedulable || variables.oldUnschedulable || "
            "(variables.newCordoned && variables.gpu)",
            _refused(f"cordons only a Node with GPU evidence, marking it {NODE_CORDON_ANNOTATION}"),
        ),
        _rule(
            "variables.newUnschedulable || !variables.oldUnschedulable || "
            "(variables.oldCordoned && !variables.newCordoned)",
            _refused(
                f"uncordons only a Node it cordoned ({NODE_CORDON_ANNOTATION}), "
                "removing the annotation in the same write"
            ),
        ),
    ]


def nodes_policy() -> dict[str, Any]:
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["*"],
                    "operations": ["UPDATE"],
                    "resources": list(resources),
                    "scope": "Cluster",
                }
                for group, resources in NODE_WRITABLE.items()
            ],
        },
        "matchConditions": [
            {
                "name": "the-manager-account",
                "expression": f"request.userInfo.username == {_cel(ACCOUNT)}",
            }
        ],
        "variables": _node_variables(),
        "validations": _node_validations(),
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(NODES_NAME),
        "spec": spec,
    }


def _binding(name: str, param_ref: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
    if param_ref is not None:
        spec["paramRef"] = dict(param_ref)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(name),
        "spec": spec,
    }


def manager_policy_yaml(grants: frozenset[Grant] | None = None) -> str:
    """The policies of the core's writes and of `grants` (the registered extensions' if None):
    kyma-gpu-manager always, kyma-gpu-manager-mirrors with the Flux bundle, and
    kyma-gpu-manager-nodes with Nodes."""
    grants = registered() if grants is None else grants
    header = (
        "# Generated by `make manifests` from the Flux bundle\n"
        "# (operator/kyma_gpu/extensions/own_flux/flux.yaml) and\n"
        "# operator/kyma_gpu/extensions/node_marks/names.py\n"
        "# by operator/kyma_gpu_tools/manager_policy.py. Do not edit.\n"
    )
    param_ref = {"name": CONFIG_MAP_NAME, "namespace": NAMESPACE, "parameterNotFoundAction": "Deny"}
    docs = [policy(grants), _binding(NAME)]
    if Grant.FLUX_BUNDLE in grants:
        docs += [mirrors_policy(), _binding(MIRRORS_NAME, param_ref)]
    if Grant.NODES in grants:
        docs += [nodes_policy(), _binding(NODES_NAME)]
    return header + "---\n".join(dump(d) for d in docs)
