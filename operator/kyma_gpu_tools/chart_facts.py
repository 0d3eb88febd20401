"""Facts about a chart version, derived from its values.yaml: which images it runs and the
default driver version. `kyma-gpu chart-facts CHART.tgz` writes them to values-rules/charts/.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def _images(values: Mapping[str, Any], prefix: str) -> Iterator[dict[str, Any]]:
    for key, value in values.items():
        if not isinstance(value, Mapping):
            continue
        path = f"{prefix}{key}"
        repo = value.get("repository")
        # An image: a repository plus its name or tag; NFD style `image: {repository: ...}`
        # may leave the tag out entirely (v26.3.3 does).
        named = "image" in value or "tag" in value or key == "image"
        if isinstance(repo, str) and repo and named:
            version = value.get("version", value.get("tag"))
            yield {
                "path": path,
                "repository": repo,
                "image": value.get("image"),
                "version": None if version in (None, "") else str(version),
            }
        yield from _images(value, path + ".")


def chart_facts(
    version: str,
    values: Mapping[str, Any],
    subcharts: Mapping[str, Mapping[str, Any]],
    app_versions: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Facts as the YAML document stored in values-rules/charts/<version>.yaml.

    app_versions: appVersion per chart ("" for the chart itself, else the subchart's name);
    an image without a version in the values runs that appVersion (Helm charts' convention).
    """
    app_versions = app_versions or {}
    images = [_default_version(i, app_versions.get("")) for i in _images(values, "")]
    for name, sub_values in sorted(subcharts.items()):
        # The parent's values for a subchart (under its name) win over the subchart's own.
        known = {i["path"] for i in images}
        images.extend(
            _default_version(i, app_versions.get(name))
            for i in _images(sub_values, f"{name}.")
            if i["path"] not in known
        )
    driver = values.get("driver") or {}
    return {
        "version": version,
        "defaultDriverVersion": str(driver.get("version", "")),
        "stacks": stacks(values),
        "images": sorted(images, key=lambda i: str(i["path"])),
    }


def stacks(values: Mapping[str, Any]) -> list[str]:
    """The GPU stacks the chart can deploy: the ClusterPolicy (device plugin) always; the
    GPUCluster (DRA) when its values have the gpuCluster.deployCR switch (v26.7.0 and newer)."""
    found = ["DevicePlugin"]
    if isinstance(values.get("gpuCluster"), Mapping) and "deployCR" in values["gpuCluster"]:
        found.append("DRA")
    return found


def _default_version(image: dict[str, Any], app_version: str | None) -> dict[str, Any]:
    if image["version"] is None and app_version:
        return {**image, "version": app_version}
    return image
