"""The JSON Schema (Draft 2020-12) of a rollout plan: its steps, its checks, its failure limit (ADR 0024).

Every bound and choice a plan has lives here; ``plan.validate_plan`` runs this schema, then the
rules a schema cannot say (weights only move forward and end at 100 %, an analysis needs canary
traffic before it, a longest window no shorter than the window, a metric checked once per way,
checks when there are analyses, a failure limit below the number of checks). The API publishes
the same schema in the OpenAPI document.
"""

from __future__ import annotations

SET_WEIGHT, PAUSE, ANALYSIS = "set_weight", "pause", "analysis"
STEP_KINDS = (SET_WEIGHT, PAUSE, ANALYSIS)
METRIC_KEYS = ("ttft_p95_ms", "tpot_p95_ms", "error_rate", "sla_attainment", "cost_per_mtok_usd")
# Metrics whose absolute limit is a fraction (an error rate, an attainment), not a count or a time.
FRACTION_METRICS = ("error_rate", "sla_attainment")

MIN_WINDOW_S, MAX_WINDOW_S = 5, 86_400
MAX_PAUSE_S = 7 * 86_400
MAX_STEPS = 50
MAX_MIN_SAMPLES = 1_000_000


def _when(kind: str, then: dict) -> dict:
    return {"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]}, "then": then}


STEP = {
    "type": "object",
    "required": ["kind"],
    "properties": {"kind": {"enum": list(STEP_KINDS)}},
    "allOf": [
        _when(
            SET_WEIGHT,
            {
                "required": ["weight"],
                "properties": {
                    "weight": {"title": "percent of traffic", "type": "integer", "minimum": 0, "maximum": 100}
                },
            },
        ),
        _when(
            PAUSE,
            {
                "properties": {
                    "seconds": {
                        "title": "pause seconds; none waits for an admin",
                        "type": ["integer", "null"],
                        "minimum": 1,
                        "maximum": MAX_PAUSE_S,
                    }
                }
            },
        ),
        _when(
            ANALYSIS,
            {
                "required": ["window_s"],
                "properties": {
                    "window_s": {
                        "title": "analysis window seconds",
                        "type": "integer",
                        "minimum": MIN_WINDOW_S,
                        "maximum": MAX_WINDOW_S,
                    },
                    "max_window_s": {
                        "title": "longest analysis window seconds; default 3 × window_s",
                        "type": ["integer", "null"],
                        "minimum": MIN_WINDOW_S,
                        "maximum": MAX_WINDOW_S,
                    },
                },
            },
        ),
    ],
}

CHECK = {
    "type": "object",
    "required": ["metric", "limit"],
    "properties": {
        "metric": {"enum": list(METRIC_KEYS)},
        "limit": {"title": "ratio to stable when relative, else the value", "type": "number", "minimum": 0},
        "relative": {"type": "boolean", "default": False},
        "min_samples": {"type": "integer", "minimum": 1, "maximum": MAX_MIN_SAMPLES, "default": 20},
    },
    "allOf": [
        {  # a relative limit is a ratio to stable: zero would fail every canary
            "if": {"properties": {"relative": {"const": True}}, "required": ["relative"]},
            "then": {"properties": {"limit": {"title": "a ratio to stable", "exclusiveMinimum": 0}}},
        },
        {  # an absolute error rate or attainment is a fraction
            "if": {
                "properties": {"metric": {"enum": list(FRACTION_METRICS)}, "relative": {"const": False}},
                "required": ["metric"],
            },
            "then": {"properties": {"limit": {"title": "an absolute fraction", "maximum": 1}}},
        },
    ],
}

STEPS = {"type": "array", "minItems": 1, "maxItems": MAX_STEPS, "items": STEP}
CHECKS = {"type": "array", "items": CHECK}

PLAN = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Rollout plan",
    "type": "object",
    "required": ["steps", "checks", "failure_limit"],
    "properties": {
        "steps": STEPS,
        "checks": CHECKS,
        "failure_limit": {"title": "failed checks tolerated", "type": "integer", "minimum": 0},
    },
}
