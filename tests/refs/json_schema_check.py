#!/usr/bin/python3
"""Validates a JSON document against a JSON Schema (the draft-07 subset docs/report-schema.json uses).

An independent check of mhcdiff's hand-written JSON writer: Python's json module parses the document (so
escaping and number syntax are checked by a second implementation) and this walker checks it against the
schema. The jsonschema package is not installed on the build machines, hence this small walker; it supports
type, enum, const, properties, required, additionalProperties, items, minimum, maximum, minItems, maxItems,
oneOf/anyOf and local $ref, and fails on any keyword it does not know (so the schema cannot silently
outgrow it).

usage: json_schema_check.py SCHEMA.json DOCUMENT.json   (exit 0 valid, 1 invalid with the first error)
"""
import json
import sys

KNOWN = {"$schema", "$id", "$ref", "title", "description", "type", "enum", "const", "properties", "required",
         "additionalProperties", "items", "minimum", "maximum", "minItems", "maxItems", "oneOf", "anyOf",
         "definitions", "examples"}

TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class Invalid(Exception):
    pass


def resolve(root, ref):
    if not ref.startswith("#/"):
        raise Invalid(f"unsupported $ref {ref}")
    node = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def check(root, schema, value, path):
    unknown = set(schema) - KNOWN
    if unknown:
        raise Invalid(f"schema keyword(s) {sorted(unknown)} not supported by this checker (at {path})")
    if "$ref" in schema:
        check(root, resolve(root, schema["$ref"]), value, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(TYPES[t](value) for t in types):
            raise Invalid(f"{path}: {value!r} is not of type {types}")
    if "enum" in schema and value not in schema["enum"]:
        raise Invalid(f"{path}: {value!r} not in {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        raise Invalid(f"{path}: {value!r} != {schema['const']!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise Invalid(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise Invalid(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                raise Invalid(f"{path}: missing required field '{key}'")
        for key, v in value.items():
            if key in props:
                check(root, props[key], v, f"{path}.{key}")
            elif schema.get("additionalProperties", True) is False:
                raise Invalid(f"{path}: field '{key}' is not in the schema")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise Invalid(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise Invalid(f"{path}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, v in enumerate(value):
                check(root, schema["items"], v, f"{path}[{i}]")
    for key in ("oneOf", "anyOf"):
        if key in schema:
            ok = 0
            errors = []
            for sub in schema[key]:
                try:
                    check(root, sub, value, path)
                    ok += 1
                except Invalid as e:
                    errors.append(str(e))
            if ok == 0 or (key == "oneOf" and ok > 1):
                raise Invalid(f"{path}: {key} matched {ok} alternatives ({'; '.join(errors)})")


def main():
    schema = json.load(open(sys.argv[1]))
    with open(sys.argv[2]) as f:
        text = f.read()

    def no_constants(name):
        raise Invalid(f"non-standard JSON constant {name}")

    doc = json.loads(text, parse_constant=no_constants)
    try:
        check(schema, schema, doc, "$")
    except Invalid as e:
        print(f"INVALID: {e}")
        return 1
    print("valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
