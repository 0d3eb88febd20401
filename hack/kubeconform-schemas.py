#!/usr/bin/env python3
"""Write JSON schemas for kubeconform, offline, from Kubernetes' OpenAPI and CRD files.

kubeconform fetches its schemas from GitHub by default, which is not reachable here. This
writes the same kind of schemas from local sources instead:

  * the built-in kinds from api/openapi-spec/swagger.json of the k8s.io/kubernetes Go
    module (the module tools/build.sh builds kube-apiserver from, so the same version);
  * custom resources from the openAPIV3Schema of every CustomResourceDefinition found in
    the given YAML files (the Gpu CRD, the Flux bundle's CRDs, lifecycle-manager's CRDs).

Layout: DIR/GROUP/KIND_VERSION.json (GROUP is the version for the core group: v1/pod_v1.json),
read by kubeconform with -schema-location 'DIR/{{ .Group }}/{{ .ResourceKind }}_{{
.ResourceAPIVersion }}.json'. Every schema is strict: an object with `properties` admits no
other field unless the source says so (additionalProperties, x-kubernetes-preserve-unknown-
fields). Shared definitions stay as local $refs in each file (`definitions`), which keeps
recursive types (JSONSchemaProps) finite. Custom resources get Kubernetes' ObjectMeta for
their metadata, as the API server applies it.

    hack/kubeconform-schemas.py --swagger SWAGGER.json --out DIR CRD.yaml...
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]
REF = "#/definitions/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING: list[Schema] = [{"type": "string"}, {"type": "integer"}]


SCHEMA_MAPS = ("properties", "patternProperties", "definitions")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
SCHEMAS = ("additionalProperties", "items", "not")


def strict(node: Schema) -> Schema:
    """A copy of a schema with closed objects, int-or-string and nullable spelled out."""
    out = {**node, **_strict_children(node)}
    open_object = "additionalProperties" in node or node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node and not open_object:
        out["additionalProperties"] = False
    if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.pop("format", None)
        out["anyOf"] = INT_OR_STRING
    if node.get("nullable") is True and isinstance(node.get("type"), str):
        out["type"] = [node["type"], "null"]
    return out


def _strict_children(node: Schema) -> Schema:
    """The subschemas of a schema, each made strict."""
    out: Schema = {}
    for key in SCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            out[key] = {name: strict(sub) for name, sub in node[key].items()}
    for key in SCHEMA_LISTS:
        if isinstance(node.get(key), list):
            out[key] = [strict(sub) for sub in node[key]]
    for key in SCHEMAS:
        if isinstance(node.get(key), dict):
            out[key] = strict(node[key])
        elif isinstance(node.get(key), list):
            out[key] = [strict(sub) for sub in node[key]]
    return out


def refs(node: Schema) -> Iterator[str]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(REF):
        yield ref[len(REF) :]
    for key in SCHEMA_MAPS:
        if key != "definitions" and isinstance(node.get(key), dict):
            for sub in node[key].values():
                yield from refs(sub)
    for key in (*SCHEMA_LISTS, *SCHEMAS):
        value = node.get(key)
        for sub in value if isinstance(value, list) else [value]:
            if isinstance(sub, dict):
                yield from refs(sub)


def with_definitions(root: Schema, definitions: dict[str, Schema]) -> Schema:
    """root plus the (transitively) referenced definitions, for a standalone file."""
    needed: dict[str, Schema] = {}
    todo = list(refs(root))
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed[name] = definitions[name]
        todo.extend(refs(needed[name]))
    schema = dict(root)
    if needed:
        schema["definitions"] = dict(sorted(needed.items()))
    return schema


def path_for(group: str, version: str, kind: str) -> str:
    return f"{group or version}/{kind.lower()}_{version}.json"


def builtin_schemas(swagger: Schema) -> tuple[dict[str, Schema], dict[str, Schema]]:
    """(file path -> schema, transformed definitions) for every kind of the OpenAPI spec."""
    definitions = {name: strict(d) for name, d in swagger["definitions"].items()}
    if QUANTITY in definitions:  # "1", 1 and 0.5 are all quantities
        description = definitions[QUANTITY].get("description", "")
        definitions[QUANTITY] = {
            "description": description,
            "anyOf": [{"type": "string"}, {"type": "number"}],
        }
    files: dict[str, Schema] = {}
    for name, definition in definitions.items():
        for gvk in swagger["definitions"][name].get("x-kubernetes-group-version-kind") or []:
            files[path_for(gvk["group"], gvk["version"], gvk["kind"])] = with_definitions(
                definition, definitions
            )
    return files, definitions


def crd_schemas(crd: Schema, definitions: dict[str, Schema]) -> dict[str, Schema]:
    spec = crd["spec"]
    files: dict[str, Schema] = {}
    for version in spec["versions"]:
        source = (version.get("schema") or {}).get("openAPIV3Schema")
        if source is None:
            raise SystemExit(f"{crd['metadata']['name']} {version['name']}: no openAPIV3Schema")
        root = strict(source)
        properties = root.setdefault("properties", {})
        properties["apiVersion"] = {"type": "string"}
        properties["kind"] = {"type": "string"}
        properties["metadata"] = {"$ref": REF + OBJECT_META}
        if not source.get("x-kubernetes-preserve-unknown-fields"):
            root["additionalProperties"] = False
        path = path_for(spec["group"], version["name"], spec["names"]["kind"])
        files[path] = with_definitions(root, definitions)
    return files


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--swagger", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("crds", nargs="*", type=Path)
    args = parser.parse_args(argv)
    files, definitions = builtin_schemas(json.loads(args.swagger.read_text()))
    count = len(files)
    for source in args.crds:
        for doc in yaml.safe_load_all(source.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                files.update(crd_schemas(doc, definitions))
    for path, schema in files.items():
        target = args.out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(schema, sort_keys=True) + "\n")
    print(f"kubeconform-schemas: {count} built-in, {len(files) - count} custom in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
