#!/usr/bin/env python3
"""Strict offline check of Kubernetes manifests against CRD openAPIV3Schemas.

Usage: validate.py CRD_DIR MANIFEST...

Every YAML document in each MANIFEST whose apiVersion/kind is defined by a
CustomResourceDefinition in CRD_DIR is validated against that version's
openAPIV3Schema. Unknown fields are rejected the way the API server's strict
field validation does: an object schema with `properties`, without
`additionalProperties` and without `x-kubernetes-preserve-unknown-fields: true`
accepts no other keys. CEL rules (`x-kubernetes-validations`) and defaulting
are NOT evaluated; `format` is ignored.

Output: `PASS file kind/name` or `FAIL file kind/name: path: message`.
Exit status: 0 all passed, 1 some document failed, 2 (when nothing failed)
some document's apiVersion/kind has no CRD in CRD_DIR.

Needs: PyYAML, jsonschema (>= 4).
"""
import pathlib
import sys

import jsonschema
import yaml

# Keys that only matter to the API server (or are documentation) and that
# jsonschema would otherwise ignore anyway; dropped to keep schemas small.
DROPPED = {
    "description", "example", "format", "nullable",
    "x-kubernetes-validations", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
    "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource",
    "x-kubernetes-preserve-unknown-fields",
}
OBJECT = {"type": "object"}


class Loader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings (as the API server sees them)."""


Loader.yaml_implicit_resolvers = {
    ch: [r for r in rs if r[0] != "tag:yaml.org,2002:timestamp"]
    for ch, rs in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def convert(s: dict) -> dict:
    """Translate one structural-schema node into strict JSON Schema."""
    out = {k: v for k, v in s.items() if k not in DROPPED}
    if s.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    props = {k: convert(v) for k, v in s.get("properties", {}).items()}
    if s.get("x-kubernetes-embedded-resource"):
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props["metadata"] = OBJECT  # ObjectMeta is checked by the API server itself
    if props or "properties" in s:
        out["properties"] = props
        preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
        if not preserve and "additionalProperties" not in s:
            out["additionalProperties"] = False
    if isinstance(s.get("additionalProperties"), dict):
        out["additionalProperties"] = convert(s["additionalProperties"])
    if isinstance(s.get("items"), dict):
        out["items"] = convert(s["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in s:
            out[key] = [convert(x) for x in s[key]]
    if isinstance(s.get("not"), dict):
        out["not"] = convert(s["not"])
    if s.get("nullable"):
        return {"anyOf": [{"type": "null"}, out]}
    return out


def load_crds(crd_dir: pathlib.Path) -> dict:
    """Map (apiVersion, kind) -> compiled validator for every CRD version."""
    crds = {}
    for path in sorted(crd_dir.glob("*.y*ml")):
        for doc in yaml.load_all(path.read_text(), Loader=Loader):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for ver in spec["versions"]:
                schema = convert(ver["schema"]["openAPIV3Schema"])
                schema.setdefault("properties", {})["metadata"] = OBJECT
                key = (f"{spec['group']}/{ver['name']}", spec["names"]["kind"])
                crds[key] = jsonschema.Draft202012Validator(schema)
    return crds


def where(err: jsonschema.ValidationError) -> str:
    path = ""
    for p in err.absolute_path:
        path += f"[{p}]" if isinstance(p, int) else f".{p}"
    return path.lstrip(".") or "<root>"


def message(err: jsonschema.ValidationError) -> str:
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        known = err.schema.get("properties", {})
        extra = sorted(k for k in err.instance if k not in known)
        return "unknown field(s): " + ", ".join(extra)
    return err.message


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 64
    crds = load_crds(pathlib.Path(argv[1]))
    if not crds:
        print(f"no CustomResourceDefinition found in {argv[1]}", file=sys.stderr)
        return 64
    failed = missing = False
    for name in argv[2:]:
        for doc in yaml.load_all(pathlib.Path(name).read_text(), Loader=Loader):
            if not doc:
                continue
            api, kind = doc.get("apiVersion"), doc.get("kind")
            obj = f"{kind}/{(doc.get('metadata') or {}).get('name', '?')}"
            validator = crds.get((api, kind))
            if validator is None:
                print(f"NOCRD {name} {obj}: no CRD for {api} {kind} in {argv[1]}")
                missing = True
                continue
            errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
            for err in errors:
                print(f"FAIL {name} {obj}: {where(err)}: {message(err)}")
            if errors:
                failed = True
            else:
                print(f"PASS {name} {obj}")
    return 1 if failed else 2 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
