"""The one definition of the Flux kinds the module writes and of the module's label set.

Everything else derives from these: the plan's objects (plan/flux_objects.py), the API paths of the
adapter, what the informers list (observe/watches.py), the CRDs whose APIs the module needs
(plan/provision.py) and the label selector of the module's own objects.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FluxKind:
    """One Flux resource: its API group and version, kind and plural."""

    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    def path(self, namespace: str | None = None) -> str:
        """The API path of the collection, in one namespace or in all."""
        scope = f"/namespaces/{namespace}" if namespace else ""
        return f"/apis/{self.api_version}{scope}/{self.plural}"


_HELM = "helm.toolkit.fluxcd.io"
_SOURCE = "source.toolkit.fluxcd.io"

HELM_RELEASE = FluxKind(_HELM, "v2", "HelmRelease", "helmreleases")
HELM_REPOSITORY = FluxKind(_SOURCE, "v1", "HelmRepository", "helmrepositories")
OCI_REPOSITORY = FluxKind(_SOURCE, "v1", "OCIRepository", "ocirepositories")

FLUX_KINDS = (HELM_RELEASE, HELM_REPOSITORY, OCI_REPOSITORY)
"""The Flux kinds the plan renders (Flux 2.6 or newer serves all three)."""

FIELD_MANAGER = "kyma-gpu"
"""The module's field manager: every write of the manager names it."""

MODULE_LABEL = "kyma-project.io/module"
NAME_LABEL = "app.kubernetes.io/name"
PART_OF_LABEL = "app.kubernetes.io/part-of"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MODULE = "gpu"
PART_OF = "kyma-gpu"
OURS = f"{PART_OF_LABEL}={PART_OF}"
"""The label selector of the module's objects."""


def module_labels(name: str, *, managed_by: str | None = None) -> dict[str, str]:
    """The module's label set, for an object of the component `name`."""
    labels = {MODULE_LABEL: MODULE, NAME_LABEL: name, PART_OF_LABEL: PART_OF}
    if managed_by is not None:
        labels[MANAGED_BY_LABEL] = managed_by
    return labels
