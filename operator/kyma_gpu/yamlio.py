"""YAML as people read it: no anchors, block style for multi-line strings, stable order."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(data: Any) -> str:
    """One YAML document."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
