"""spec.sharing -> the NVIDIA device plugin's configuration files. Pure.

The chart turns devicePlugin.config.data into a ConfigMap and the NVIDIA operator mounts it
into the device plugin; its config manager picks a file per node from the node label
nvidia.com/device-plugin.config, else the default. The NVIDIA operator does not watch the
ConfigMap's data, so the ConfigMap's name carries a hash of it: a change is a new name, a new
device plugin DaemonSet template, a rollout.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kyma_gpu.api.operations import (
    DEFAULT_PROFILE,
    SHARING_CONFIG_MAP,
    MigStrategy,
    SharingConfig,
    SharingMode,
    SharingSpec,
)
from kyma_gpu.yamlio import dump

RESOURCE = "nvidia.com/gpu"
"""The one resource that time-slicing and MPS replicate (MPS supports no other)."""


def device_plugin_config(
    config: SharingConfig, fail_on_init_error: bool, mig: MigStrategy
) -> dict[str, Any]:
    """One configuration file of the device plugin (config version v1)."""
    document: dict[str, Any] = {
        "version": "v1",
        "flags": {"migStrategy": str(mig).lower(), "failOnInitError": fail_on_init_error},
    }
    if config.mode is SharingMode.NONE:
        return document
    resources = [{"name": RESOURCE, "replicas": config.replicas}]
    if config.mode is SharingMode.TIME_SLICING:
        sharing: dict[str, Any] = {
            "timeSlicing": {
                "renameByDefault": config.rename_by_default,
                "failRequestsGreaterThanOne": config.fail_requests_greater_than_one,
                "resources": resources,
            }
        }
    else:
        sharing = {"mps": {"renameByDefault": config.rename_by_default, "resources": resources}}
    document["sharing"] = sharing
    return document


def device_plugin_configs(spec: SharingSpec, mig: MigStrategy) -> dict[str, str]:
    """Configuration name -> file text: the default, then each profile."""
    configs = {DEFAULT_PROFILE: spec, **{p.name: p for p in spec.profiles}}
    return {
        name: dump(device_plugin_config(config, spec.fail_on_init_error, mig))
        for name, config in configs.items()
    }


def config_map_name(configs: dict[str, str]) -> str:
    """kyma-gpu-device-plugin-config-<hash of the files>."""
    digest = hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()[:8]
    return f"{SHARING_CONFIG_MAP}-{digest}"
