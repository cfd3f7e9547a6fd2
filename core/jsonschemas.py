"""JSON Schema (Draft 2020-12) validation with messages a person can act on (ADR 0024).

Each app keeps its documents' schemas in one ``schemas`` module; this module only runs them and
turns ``jsonschema``'s errors into ``(path, message)`` pairs such as
``("steps", 2, "weight"), "must be between 0 and 100 (got 150)"``. Callers key the messages by
the path the way their form, API or service names fields. A subschema's ``title`` is added to its
messages, so units and meaning travel with the bound (``rate (req/s): must be at most 100,000``).

Two libraries, one verdict. ``jsonschema`` walks a document in Python at about 0.2 ms per array
item here, so a workload of 100,000 length pairs (the most it may hold) took 20 s to validate,
inside a request. ``jsonschema-rs`` (a compiled Draft 2020-12 validator) answers "valid?" for the
same document in about 60 ms; only a document it refuses goes through ``jsonschema``, whose errors
carry the paths, titles and bounds the messages are made of. The two agree on what is valid (a
test holds them to it on generated documents): where ``jsonschema-rs`` cannot read a Python value
(bytes, a set, a date) or refuses it, ``jsonschema`` decides. An array longer than its ``maxItems``
is refused for that alone, without checking each item, so an oversized document costs no more than
a valid one.
"""

from __future__ import annotations

import math

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError
from jsonschema.validators import extend

_CHECKER = Draft202012Validator.TYPE_CHECKER
_ITEMS = Draft202012Validator.VALIDATORS["items"]


def _items_unless_too_many(validator, items, instance, schema):
    if validator.is_type(instance, "array") and len(instance) > schema.get("maxItems", math.inf):
        return  # ``maxItems`` reports it; the items of an array that is refused anyway are not read
    yield from _ITEMS(validator, items, instance, schema)


Validator = extend(
    Draft202012Validator,
    validators={"items": _items_unless_too_many},
    type_checker=_CHECKER.redefine_many(
        {
            # JSON has no NaN or infinity, but Python callers can pass them and they slip past every
            # bound (NaN compares false both ways): a number here is finite.
            "number": lambda checker, value: _CHECKER.is_type(value, "number") and math.isfinite(value),
            # A tuple is a list to a Python caller, and to jsonschema-rs.
            "array": lambda checker, value: isinstance(value, list | tuple),
        }
    ),
)

_COMPILED: dict[int, tuple[dict, object]] = {}


def _compiled(schema: dict):
    """``jsonschema-rs``'s validator for ``schema``, compiled once per schema object."""
    hit = _COMPILED.get(id(schema))
    if hit is None or hit[0] is not schema:
        if len(_COMPILED) >= 512:  # schemas built per call would otherwise pile up
            _COMPILED.clear()
        hit = _COMPILED[id(schema)] = (schema, jsonschema_rs.validator_for(schema))
    return hit[1]


_TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "object": "a JSON object",
    "array": "a list",
    "null": "empty",
}


def _n(value) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _rule(error: SchemaError) -> str:
    keyword, bound, schema, got = error.validator, error.validator_value, error.schema, error.instance
    if keyword == "type":
        kinds = bound if isinstance(bound, list) else [bound]
        return "must be " + " or ".join(_TYPE_WORDS.get(k, k) for k in kinds)
    if keyword in ("minimum", "maximum") and "minimum" in schema and "maximum" in schema:
        return f"must be between {_n(schema['minimum'])} and {_n(schema['maximum'])} (got {_n(got)})"
    if keyword in ("exclusiveMinimum", "maximum") and "exclusiveMinimum" in schema and "maximum" in schema:
        return f"must be more than {_n(schema['exclusiveMinimum'])} and at most {_n(schema['maximum'])} (got {_n(got)})"
    words = {
        "minimum": "must be at least",
        "maximum": "must be at most",
        "exclusiveMinimum": "must be more than",
        "exclusiveMaximum": "must be less than",
    }
    if keyword in words:
        return f"{words[keyword]} {_n(bound)} (got {_n(got)})"
    if keyword == "enum":
        return "must be one of " + ", ".join(str(v) for v in bound)
    if keyword == "const":
        return f"must be {bound!r}"
    if keyword == "minItems":
        return f"needs at least {bound} item{'s' if bound != 1 else ''}"
    if keyword == "maxItems":
        return f"takes at most {bound:,} items"
    if keyword == "minLength":
        return "must not be empty"
    if keyword == "maxLength":
        return f"takes at most {bound:,} characters"
    if keyword in ("false", "not"):
        return "is not allowed"
    if keyword == "pattern":
        return f"{got!r} is not in the expected form"
    return error.message


def _where(error: SchemaError) -> tuple[tuple, str, str]:
    """The path of the failing value, the title of its schema and the rule it breaks."""
    path = tuple(error.absolute_path)
    if error.validator == "required":
        missing = next((k for k in error.validator_value if k not in error.instance), "?")
        title = error.schema.get("properties", {}).get(missing, {}).get("title", "")
        return (*path, missing), title, "is required"
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return path, "", f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(map(str, extra))}"
    title = error.schema.get("title", "") if isinstance(error.schema, dict) else ""
    return path, title, _rule(error)


def dotted(path: tuple) -> str:
    """``steps[2].weight`` for ``("steps", 2, "weight")``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def schema_errors(schema: dict, document: object, *, at: tuple = ()) -> list[tuple[tuple, str]]:
    """Every violation of ``schema`` by ``document`` as ``(path, message)``, in document order.

    The message starts with the dotted path (``steps[2].weight: must be at most 100``) so it reads
    alone; the path tuple lets callers key it by field. ``at`` is where the document sits in what
    the caller received (``("workload",)``), so the messages name the field as the caller sent it.
    """
    try:
        if _compiled(schema).is_valid(document):
            return []
    except (ValueError, TypeError, OverflowError):
        pass  # a Python value JSON has no word for: jsonschema says what is wrong with it
    found = []
    for error in Validator(schema).iter_errors(document):
        path, title, rule = _where(error)
        path = (*at, *path)
        where = " ".join(filter(None, (dotted(path), f"({title})" if title else "")))
        found.append((path, f"{where}: {rule}" if where else rule[0].upper() + rule[1:]))
    return found


_DRAFT_ONLY = ("$schema", "if", "then", "else", "propertyNames")


def openapi_30(schema: dict) -> dict:
    """``schema`` as an OpenAPI 3.0 Schema Object, with the exact Draft 2020-12 schema beside it.

    The API document is OpenAPI 3.0 (drf-spectacular's default), whose dialect has no ``if``/``then``,
    no ``null`` type and a boolean ``exclusiveMinimum``. Client generators and the API fuzz read
    the 3.0 rendering (every bound and choice, without the conditional rules); ``x-json-schema``
    carries the schema the server validates with, for anyone who wants it whole.
    """
    return {**_to_30(schema), "x-json-schema": {k: v for k, v in schema.items() if k != "$schema"}}


def _to_30(node):
    if isinstance(node, list):
        return [_to_30(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_30(v) for k, v in node.items() if k not in _DRAFT_ONLY}
    kinds = out.get("type")
    if isinstance(kinds, list):
        real = [k for k in kinds if k != "null"]
        out.pop("type")
        if len(real) == 1:
            out["type"] = real[0]
        if "null" in kinds:
            out["nullable"] = True
    if isinstance(out.get("exclusiveMinimum"), int | float) and not isinstance(out["exclusiveMinimum"], bool):
        out["minimum"], out["exclusiveMinimum"] = out["exclusiveMinimum"], True
    if "const" in out:
        out["enum"] = [out.pop("const")]
    if "enum" in out and None in out["enum"]:
        out["enum"] = [v for v in out["enum"] if v is not None]
        out["nullable"] = True
    if "allOf" in out:
        out["allOf"] = [s for s in out["allOf"] if s]
        if not out["allOf"]:
            out.pop("allOf")
    return out
