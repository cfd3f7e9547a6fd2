"""JSON Schemas (Draft 2020-12) of the documents evaluations accepts (ADR 0024).

- ``WORKLOAD``, ``SLA``, ``STAGE``: what a benchmark run offers and how it is judged
  (``engines.workload.Workload.to_dict()``, ``loadtest.Sla``, ``loadtest.StageConfig``);
- ``QUALITY``, ``PERFORMANCE``, ``STABILITY`` (together ``GATE_POLICY``): a model's gate policy.

Every bound and choice lives here. The services run the schema first, then the rules a schema
cannot say, written beside them: lengths against the model's context, requests planned per stage,
a quality gate's suite existing, a wave's low rate under its high one, at least one limit per
required gate. The API publishes these schemas in its OpenAPI document.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError

from core.jsonschemas import schema_errors
from engines.workload import ARRIVAL_KINDS, LENGTH_KINDS, SPACINGS
from evaluations.constants import (
    MAX_CLIENT_PROCESSES,
    MAX_CONCURRENCY,
    MAX_EMPIRICAL_PAIRS,
    MAX_LOGNORMAL_SIGMA,
    MAX_PREFIX_GROUPS,
    MAX_RATE_RPS,
    MAX_REQUESTS_PER_STAGE,
    MAX_SLA_MS,
    MAX_STAGE_SECONDS,
    MAX_TOKENS_PER_REQUEST,
    MAX_WARMUP_REQUESTS,
)

MAX_SOAK_SECONDS = 24 * 3600


def _num(
    title: str, low: float, high: float, *, integer: bool = False, nullable: bool = False, **more
) -> dict:
    kind = "integer" if integer else "number"
    return {
        "title": title,
        "type": [kind, "null"] if nullable else kind,
        "minimum": low,
        "maximum": high,
        **more,
    }


def _positive(title: str, high: float, *, nullable: bool = False) -> dict:
    """A number above zero (no smallest value), up to ``high``."""
    return {
        "title": title,
        "type": ["number", "null"] if nullable else "number",
        "exclusiveMinimum": 0,
        "maximum": high,
    }


def _when(field: str, value, then: dict, otherwise: dict | None = None) -> dict:
    rule = {"if": {"properties": {field: {"const": value}}, "required": [field]}, "then": then}
    if otherwise is not None:
        rule["else"] = otherwise
    return rule


# --- benchmark workloads ------------------------------------------------------------------------------

TOKENS = MAX_TOKENS_PER_REQUEST

ARRIVAL = {
    "title": "arrival process",
    "type": "object",
    "required": ["kind"],
    "properties": {
        "kind": {"enum": list(ARRIVAL_KINDS)},
        "rate": _positive("offered req/s", MAX_RATE_RPS, nullable=True),
        "burstiness": _num("gamma shape; 1 is Poisson", 0.01, 100),
        "concurrency": _num("closed-loop clients", 1, MAX_CONCURRENCY, integer=True, nullable=True),
        "spacing": {"enum": [*SPACINGS, None]},
    },
    "allOf": [_when("kind", "concurrency", {"required": ["concurrency"]}, {"required": ["rate"]})],
}

LENGTH = {
    "title": "token-length distribution",
    "type": ["object", "null"],
    "required": ["kind"],
    "additionalProperties": False,
    "properties": {
        "kind": {"enum": list(LENGTH_KINDS)},
        "value": _num("tokens", 1, TOKENS, nullable=True),
        "low": _num("tokens", 1, TOKENS, integer=True, nullable=True),
        "high": _num("tokens", 1, TOKENS, integer=True, nullable=True),
        "mean": _positive("tokens", TOKENS, nullable=True),
        "std": _num("tokens", 0, TOKENS, nullable=True),
        "sigma": _positive("log-normal shape", MAX_LOGNORMAL_SIGMA, nullable=True),
        "min": _num("tokens", 1, TOKENS, integer=True),
        "max": _num("tokens", 1, TOKENS, integer=True, nullable=True),
    },
    "allOf": [
        _when("kind", "fixed", {"required": ["value"]}),
        _when("kind", "uniform", {"required": ["low", "high"]}),
        _when("kind", "normal", {"required": ["mean", "std"]}),
        _when("kind", "lognormal", {"required": ["mean", "sigma"]}),
    ],
}

WORKLOAD = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Benchmark workload",
    "type": "object",
    "required": ["arrival"],
    "properties": {
        "arrival": ARRIVAL,
        "input": LENGTH,
        "output": LENGTH,
        "empirical": {
            "title": "(input_len, output_len) pairs",
            "type": ["array", "null"],
            "minItems": 1,
            "maxItems": MAX_EMPIRICAL_PAIRS,
            "items": {
                "type": "array",
                "minItems": 2,
                "maxItems": 2,
                "items": _num("tokens", 1, TOKENS, integer=True),
            },
        },
        # A path would let a caller make the worker read any file on its host.
        "empirical_path": {"title": "give the pairs inline as empirical, not a path", "not": {}},
        "shared_prefix_ratio": _num("share of each prompt that is a shared prefix", 0, 1),
        "prefix_groups": _num("distinct shared prefixes", 1, MAX_PREFIX_GROUPS, integer=True),
    },
}

SLA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Per-request SLA, ms (empty: no limit)",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        name: _positive("ms", MAX_SLA_MS, nullable=True) for name in ("ttft_ms", "tpot_ms", "e2e_ms")
    },
}

STAGE = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "How each load stage runs",
    "type": "object",
    "properties": {
        "duration_s": _positive("stage duration, seconds", MAX_STAGE_SECONDS, nullable=True),
        "num_requests": _num("requests in a stage", 1, MAX_REQUESTS_PER_STAGE, integer=True, nullable=True),
        "warmup_requests": _num("Warm-up requests", 0, MAX_WARMUP_REQUESTS, integer=True, nullable=True),
        "processes": _num("client processes, 0 = auto", 0, MAX_CLIENT_PROCESSES, integer=True, nullable=True),
        "seed": {"type": ["integer", "null"]},
    },
}

# --- gate policies ------------------------------------------------------------------------------------

_SCORE_LIMITS = {
    "type": ["object", "null"],
    "properties": {
        "max_drop": _num("score points, 0–1", 0, 1, nullable=True),
        "min_score": _num("score, 0–1", 0, 1, nullable=True),
    },
}

QUALITY = {
    "title": "Quality gate: an eval suite against a baseline version",
    "type": "object",
    "properties": {
        "required": {"type": "boolean"},
        "suite": {"title": "eval suite name", "type": ["string", "null"], "maxLength": 128},
        "baseline": {
            "title": "'serving' or a version id",
            "type": ["string", "integer", "null"],
            "pattern": "^(serving|[0-9]+)$",
            "minimum": 1,
        },
        "default": _SCORE_LIMITS,
        "categories": {
            "type": ["object", "null"],
            "propertyNames": {"title": "category name", "pattern": "\\S"},
            "additionalProperties": _SCORE_LIMITS,
        },
    },
}

GATE_WORKLOAD = {**WORKLOAD, "required": [], "title": "Benchmark workload (arrival: the sweep's)"}
del GATE_WORKLOAD["$schema"]

PERFORMANCE = {
    "title": "Performance gate: a capacity sweep under an SLA",
    "type": "object",
    "properties": {
        "required": {"type": "boolean"},
        "workload": {**GATE_WORKLOAD, "type": ["object", "null"]},
        "sla": {
            "type": ["object", "null"],
            "properties": {
                "ttft_ms": _num("SLA TTFT, ms", 1, 600_000, nullable=True),
                "tpot_ms": _num("SLA TPOT, ms", 0.1, 60_000, nullable=True),
            },
        },
        "stage_duration_s": _num("seconds per sweep stage", 5, 3600, nullable=True),
        "min_goodput_ratio": _num("capacity vs baseline, ×", 0.01, 10, nullable=True),
        "max_p95_ttft_ms": _num("p95 TTFT, ms", 1, 600_000, nullable=True),
        "max_p95_tpot_ms": _num("p95 TPOT, ms", 0.1, 60_000, nullable=True),
        "kv_context_tokens": _num("KV target context, tokens", 16, 10_000_000, integer=True, nullable=True),
        "min_kv_seqs": _num("sequences at that context", 1, 100_000, integer=True, nullable=True),
        "max_usd_per_mtok": _num("$ per M output tokens", 0.000001, 100_000, nullable=True),
    },
}

_WAVES = ("low_rps", "high_rps", "period_s")

STABILITY = {
    "title": "Stability gate: a soak with a length mix and load waves",
    "type": "object",
    "properties": {
        "required": {"type": "boolean"},
        "duration_s": _num("soak seconds", 10, MAX_SOAK_SECONDS, nullable=True),
        "length_mix": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "required": ["input", "output"],
                "properties": {
                    "input": _num("input tokens", 1, 10_000_000, integer=True),
                    "output": _num("output tokens", 1, 1_000_000, integer=True),
                    "weight": _num("relative weight", 1, 1000, integer=True, default=1),
                },
            },
        },
        "waves": {
            "type": ["object", "null"],
            "properties": {
                "low_rps": _num("wave low, req/s", 0.01, 100_000, nullable=True),
                "high_rps": _num("wave high, req/s", 0.01, 100_000, nullable=True),
                "period_s": _num("wave period, seconds", 2, MAX_SOAK_SECONDS, nullable=True),
            },
        },
        "max_error_rate": _num("fraction of requests", 0, 1, nullable=True),
        "max_preemptions": _num("preemptions", 0, 10**9, integer=True, nullable=True),
        "max_restarts": _num("engine restarts", 0, 10**6, integer=True, nullable=True),
    },
    # A required soak needs its length, its mix and its waves.
    "allOf": [
        _when(
            "required",
            True,
            {
                "required": ["duration_s", "length_mix", "waves"],
                "properties": {
                    "duration_s": {"type": "number"},
                    "length_mix": {
                        "title": "a soak needs at least one (input, output) length",
                        "type": "array",
                        "minItems": 1,
                    },
                    "waves": {
                        "type": "object",
                        "required": list(_WAVES),
                        "properties": {w: {"type": "number"} for w in _WAVES},
                    },
                },
            },
        )
    ],
}

GATE_POLICY = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Gate policy",
    "type": "object",
    "properties": {"quality": QUALITY, "performance": PERFORMANCE, "stability": STABILITY},
}


def schema_check(schema: dict, document: object, *, field: str | None = None) -> None:
    """``ValidationError`` with every violation: under ``field``, else keyed by each dotted path."""
    errors: dict[str, list[str]] = {}
    for path, message in schema_errors(schema, document, at=(field,) if field else ()):
        key = field or ".".join(str(p) for p in path) or "__all__"
        errors.setdefault(key, []).append(message)
    if errors:
        raise ValidationError(errors)
