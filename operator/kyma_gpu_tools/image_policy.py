"""The ValidatingAdmissionPolicy kyma-gpu-images: a Gpu names only image registries that a
cluster administrator allows.

The allowed mirrors are the key `registries` of the ConfigMap kyma-system/kyma-gpu-chart-sources
(api/chart_sources.py), which the policy takes as its parameter: one mirror per line, the registry
first. A Gpu that sets or changes spec.source.imageRegistry, or spec.components.vgpuManagerImage,
must name a listed mirror; anything else is refused with the words of the plan's
ImageRegistryNotAllowed.

Without the ConfigMap the binding lets every Gpu through (parameterNotFoundAction Allow): the API
server looks the parameter up before it evaluates matchConditions, so Deny would refuse every
Gpu of a cluster without the ConfigMap, the default. There the plan is the refusal: no mirror is
allowed, a Gpu naming one gets ImageRegistryNotAllowed and nothing is applied
(tests/integration/test_image_registries.py shows both). `make manifests` writes the policy to
config/admission/; a unit test fails when the committed file differs.
"""

from __future__ import annotations

from typing import Any

from kyma_gpu.api.chart_sources import (
    CONFIG_MAP_NAME,
    PUBLIC,
    REGISTRIES_KEY,
    REGISTRY_NOT_ALLOWED,
    VGPU_IMAGE_NOT_ALLOWED,
)
from kyma_gpu.api.models import API_GROUP, PLURAL
from kyma_gpu.api.resources import module_labels
from kyma_gpu.yamlio import dump

NAME = "kyma-gpu-images"
NAMESPACE = "kyma-system"

_SOURCE = "object.spec.source.imageRegistry"
_VGPU = "object.spec.components.vgpuManagerImage"
_HAS_SOURCE = "has(object.spec.source) && has(object.spec.source.imageRegistry)"
_HAS_VGPU = "has(object.spec.components) && has(object.spec.components.vgpuManagerImage)"
_OLD_SOURCE = "has(oldObject.spec.source) && has(oldObject.spec.source.imageRegistry)"
_OLD_VGPU = "has(oldObject.spec.components) && has(oldObject.spec.components.vgpuManagerImage)"


def _changed(has_new: str, has_old: str, field: str) -> str:
    """The field is set, and new or changed: a Gpu stored before the policy stays deletable."""
    old = field.replace("object.", "oldObject.", 1)
    return f"({has_new}) && (request.operation == 'CREATE' || !({has_old}) || {field} != {old})"


def _cel(text: str) -> str:
    """A CEL single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _message(template: str, placeholder: str, field: str) -> str:
    """The template's words with the field's value where the placeholder stands."""
    before, after = template.split(placeholder, 1)
    return f"{_cel(before)} + {field} + {_cel(after)}"


MIRRORS_EXPRESSION = (
    f"has(params.data) && {_cel(REGISTRIES_KEY)} in params.data ? "
    f"params.data[{_cel(REGISTRIES_KEY)}].split('\\n').map(l, l.trim().split(' ')[0])"
    f".filter(w, w != '' && !w.startsWith('#') && w != {_cel(PUBLIC)}) : []"
)
"""The first word of every line of the key but comments and `public`: the listed mirrors, as
api/chart_sources.parse_registries reads them."""


def policy() -> dict[str, Any]:
    source = _changed(_HAS_SOURCE, _OLD_SOURCE, _SOURCE)
    vgpu = _changed(_HAS_VGPU, _OLD_VGPU, _VGPU)
    spec = {
        "failurePolicy": "Fail",
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [API_GROUP],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [PLURAL],
                }
            ]
        },
        "matchConditions": [
            {"name": "names-an-image-registry", "expression": f"{source} || {vgpu}"}
        ],
        "variables": [{"name": "mirrors", "expression": MIRRORS_EXPRESSION}],
        "validations": [
            {
                "expression": f"!({source}) || {_SOURCE} in variables.mirrors",
                "messageExpression": _message(REGISTRY_NOT_ALLOWED, "{registry}", _SOURCE),
                "reason": "Forbidden",
            },
            {
                "expression": f"!({vgpu}) || variables.mirrors.exists(m, "
                f"{_VGPU}.startsWith(m + '/'))",
                "messageExpression": _message(VGPU_IMAGE_NOT_ALLOWED, "{image}", _VGPU),
                "reason": "Forbidden",
            },
        ],
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": module_labels("gpu-manager")},
        "spec": spec,
    }


def binding() -> dict[str, Any]:
    param_ref = {
        "name": CONFIG_MAP_NAME,
        "namespace": NAMESPACE,
        "parameterNotFoundAction": "Allow",
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME, "labels": module_labels("gpu-manager")},
        "spec": {"policyName": NAME, "validationActions": ["Deny"], "paramRef": param_ref},
    }


def images_policy_yaml() -> str:
    header = (
        "# Generated by `make manifests` from operator/kyma_gpu/api/chart_sources.py "
        "(kyma_gpu_tools/image_policy.py). Do not edit.\n"
    )
    return header + dump(policy()) + "---\n" + dump(binding())
