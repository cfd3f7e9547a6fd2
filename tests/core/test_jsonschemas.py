"""The floor module that runs JSON Schemas and phrases their errors (ADR 0024)."""

from __future__ import annotations

import math

import pytest
from jsonschema import Draft4Validator

from core.jsonschemas import dotted, openapi_30, schema_errors

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["kind"],
    "properties": {
        "kind": {"enum": ["a", "b", None]},
        "rate": {"title": "req/s", "type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 10},
        "items": {"type": "array", "items": {"type": "integer", "minimum": 1}},
    },
    "allOf": [
        {"if": {"properties": {"kind": {"const": "b"}}, "required": ["kind"]}, "then": {"required": ["rate"]}}
    ],
}


def test_paths_read_like_the_document():
    assert dotted(("steps", 2, "weight")) == "steps[2].weight"
    assert dotted(("empirical", 0, 1)) == "empirical[0][1]"
    assert dotted(()) == ""


@pytest.mark.parametrize(
    ("document", "messages"),
    [
        ({}, ["kind: is required"]),
        ({"kind": "b"}, ["rate: is required"]),
        ({"kind": "c"}, ["kind: must be one of a, b, None"]),
        ({"kind": "a", "rate": 11}, ["rate (req/s): must be more than 0 and at most 10 (got 11)"]),
        ({"kind": "a", "rate": math.nan}, ["rate (req/s): must be a number or empty"]),
        ({"kind": "a", "rate": math.inf}, ["rate (req/s): must be a number or empty"]),
        (
            {"kind": "a", "items": [1, 0, "x"]},
            ["items[1]: must be at least 1 (got 0)", "items[2]: must be a whole number"],
        ),
        ([], ["Must be a JSON object"]),
    ],
)
def test_every_violation_is_named_by_path_and_rule(document, messages):
    assert [m for _, m in schema_errors(SCHEMA, document)] == messages


def test_at_prefixes_the_path_with_where_the_document_was_sent():
    assert schema_errors(SCHEMA, {}, at=("body",)) == [(("body", "kind"), "body.kind: is required")]


def test_the_openapi_rendering_is_valid_in_the_3_0_dialect_and_keeps_the_exact_schema():
    rendered = openapi_30(SCHEMA)
    rate = rendered["properties"]["rate"]
    assert rate == {
        "title": "req/s",
        "type": "number",
        "nullable": True,
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 10,
    }
    assert rendered["properties"]["kind"] == {"enum": ["a", "b"], "nullable": True}
    assert "allOf" not in rendered and "$schema" not in rendered
    assert rendered["x-json-schema"] == {k: v for k, v in SCHEMA.items() if k != "$schema"}
    # OpenAPI 3.0's Schema Object is a JSON Schema Draft 4 dialect: the rendering must be valid there.
    Draft4Validator.check_schema({k: v for k, v in rendered.items() if not k.startswith("x-")})
