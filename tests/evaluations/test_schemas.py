"""The JSON Schemas of workloads, SLAs, stages and gate policies (ADR 0024).

Each schema refuses representative bad documents with a message naming the field path and the
rule, accepts what the product itself writes (the demo's policies, the defaults, every arrival and
length kind ``engines.workload`` builds), and is published in the OpenAPI document.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from jsonschema import Draft202012Validator

from engines import workload as W
from evaluations import schemas
from evaluations.constants import DEFAULT_SLA, DEFAULT_STAGE, DEFAULT_WORKLOAD
from evaluations.models import GatePolicy
from evaluations.schemas import schema_check
from evaluations.services.gates import DEFAULT_PERFORMANCE, DEFAULT_QUALITY, DEFAULT_STABILITY
from governor.demo import seed_demo

FIXED = {"kind": "fixed", "value": 64}


def _wl(**over) -> dict:
    return {"arrival": {"kind": "poisson", "rate": 1.0}, "input": FIXED, "output": FIXED, **over}


def _messages(schema: dict, document: object, field: str | None = None) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as exc:
        schema_check(schema, document, field=field)
    return exc.value.message_dict


@pytest.mark.parametrize(
    "schema", [schemas.WORKLOAD, schemas.SLA, schemas.STAGE, schemas.GATE_POLICY], ids=lambda s: s["title"]
)
def test_every_schema_is_a_valid_draft_2020_12_schema(schema):
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("x", "workload (Benchmark workload): must be a JSON object"),
        ({"input": FIXED, "output": FIXED}, "workload.arrival (arrival process): is required"),
        (
            _wl(arrival={"kind": "sometimes", "rate": 1}),
            "workload.arrival.kind: must be one of constant, poisson, gamma, concurrency",
        ),
        (_wl(arrival={"kind": "poisson"}), "workload.arrival.rate: is required"),
        (
            _wl(arrival={"kind": "poisson", "rate": float("nan")}),
            "workload.arrival.rate (offered req/s): must be a number or empty",
        ),
        (
            _wl(arrival={"kind": "constant", "rate": 1e12}),
            "workload.arrival.rate (offered req/s): must be more than 0 and at most 100,000 (got 1,000,000,000,000)",
        ),
        (
            _wl(arrival={"kind": "gamma", "rate": 1, "burstiness": 0}),
            "workload.arrival.burstiness (gamma shape; 1 is Poisson): must be between 0.01 and 100 (got 0)",
        ),
        (
            _wl(arrival={"kind": "concurrency"}),
            "workload.arrival.concurrency: is required",
        ),
        (
            _wl(arrival={"kind": "concurrency", "concurrency": 2.5}),
            "workload.arrival.concurrency (closed-loop clients): must be a whole number or empty",
        ),
        (_wl(input={"kind": "uniform", "low": 1}), "workload.input.high: is required"),
        (_wl(input={"kind": "fixed", "value": 8, "vaule": 3}), "workload.input: unknown field vaule"),
        (
            _wl(input={"kind": "lognormal", "mean": 100, "sigma": 6}),
            "workload.input.sigma (log-normal shape): must be more than 0 and at most 5 (got 6)",
        ),
        (
            _wl(output={"kind": "normal", "mean": 100, "std": -1}),
            "workload.output.std (tokens): must be between 0 and 1,048,576 (got -1)",
        ),
        (_wl(empirical=[[1, 2, 3]]), "workload.empirical[0]: takes at most 2 items"),
        (
            _wl(empirical=[[1, 1]] * 100_001),
            "workload.empirical ((input_len, output_len) pairs): takes at most 100,000 items",
        ),
        (
            _wl(empirical_path="/etc/passwd"),
            "workload.empirical_path (give the pairs inline as empirical, not a path): is not allowed",
        ),
        (
            _wl(shared_prefix_ratio=1.5),
            "workload.shared_prefix_ratio (share of each prompt that is a shared prefix): must be between 0 and 1 (got 1.5)",
        ),
    ],
)
def test_bad_workloads_are_refused_naming_the_path_and_the_rule(workload, message):
    assert message in _messages(schemas.WORKLOAD, workload, "workload")["workload"]


@pytest.mark.parametrize(
    ("schema", "field", "document", "message"),
    [
        (
            schemas.SLA,
            "sla",
            {"ttft_ms": 0},
            "sla.ttft_ms (ms): must be more than 0 and at most 3,600,000 (got 0)",
        ),
        (schemas.SLA, "sla", {"ttft": 100}, "sla: unknown field ttft"),
        (schemas.SLA, "sla", {"e2e_ms": "1000"}, "sla.e2e_ms (ms): must be a number or empty"),
        (
            schemas.STAGE,
            "stage",
            {"processes": 65},
            "stage.processes (client processes, 0 = auto): must be between 0 and 64 (got 65)",
        ),
        (
            schemas.STAGE,
            "stage",
            {"num_requests": 0},
            "stage.num_requests (requests in a stage): must be between 1 and 1,000,000 (got 0)",
        ),
    ],
)
def test_bad_slas_and_stages_are_refused_naming_the_path_and_the_rule(schema, field, document, message):
    assert message in _messages(schema, document, field)[field]


def _policy(**gates) -> dict:
    return {"quality": dict(DEFAULT_QUALITY), "performance": dict(DEFAULT_PERFORMANCE), **gates}


SOAK = {"required": True, "duration_s": 60, "length_mix": [{"input": 8, "output": 8}],
        "waves": {"low_rps": 1, "high_rps": 2, "period_s": 10}}  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "key", "message"),
    [
        (
            _policy(quality={"baseline": "latest"}),
            "quality.baseline",
            "quality.baseline ('serving' or a version id): 'latest' is not in the expected form",
        ),
        (
            _policy(quality={"categories": {"needle": {"max_drop": 2}}}),
            "quality.categories.needle.max_drop",
            "quality.categories.needle.max_drop (score points, 0–1): must be between 0 and 1 (got 2)",
        ),
        (
            _policy(performance={"stage_duration_s": 1}),
            "performance.stage_duration_s",
            "performance.stage_duration_s (seconds per sweep stage): must be between 5 and 3,600 (got 1)",
        ),
        (
            _policy(performance={"kv_context_tokens": 100.5}),
            "performance.kv_context_tokens",
            "performance.kv_context_tokens (KV target context, tokens): must be a whole number or empty",
        ),
        (
            _policy(performance={"workload": {"input": {"kind": "zipf"}}}),
            "performance.workload.input.kind",
            "performance.workload.input.kind: must be one of fixed, uniform, normal, lognormal",
        ),
        (
            _policy(
                stability={"required": True, "duration_s": 60, "length_mix": [{"input": 8, "output": 8}]}
            ),
            "stability.waves",
            "stability.waves: is required",
        ),
        (
            _policy(stability={**SOAK, "length_mix": []}),
            "stability.length_mix",
            "stability.length_mix (a soak needs at least one (input, output) length): needs at least 1 item",
        ),
        (
            _policy(stability={**SOAK, "length_mix": [{"input": 8, "output": 8, "weight": 0}]}),
            "stability.length_mix.0.weight",
            "stability.length_mix[0].weight (relative weight): must be between 1 and 1,000 (got 0)",
        ),
        (
            _policy(stability={**SOAK, "waves": {"low_rps": 1, "high_rps": None, "period_s": 10}}),
            "stability.waves.high_rps",
            "stability.waves.high_rps: must be a number",
        ),
        (
            _policy(stability={**SOAK, "max_error_rate": 2}),
            "stability.max_error_rate",
            "stability.max_error_rate (fraction of requests): must be between 0 and 1 (got 2)",
        ),
    ],
)
def test_bad_gate_policies_are_refused_naming_the_path_and_the_rule(policy, key, message):
    assert message in _messages(schemas.GATE_POLICY, policy)[key]


def test_what_the_product_writes_is_accepted():
    """Defaults and every workload shape ``engines.workload`` builds pass the schemas unchanged."""
    shapes = [
        W.Workload(arrival=a, input=length, output=W.fixed(128), shared_prefix_ratio=0.5, prefix_groups=4)
        for a in (W.constant(5), W.poisson(2.5), W.gamma(3, 0.5), W.fixed_concurrency(8))
        for length in (W.fixed(64), W.uniform(16, 512), W.normal(200, 50, max=1000), W.lognormal(300, 0.8))
    ]
    shapes.append(W.Workload(arrival=W.poisson(1), empirical=[(10, 5), (300, 40)]))
    for wl in shapes:
        schema_check(schemas.WORKLOAD, wl.to_dict(), field="workload")
    schema_check(schemas.WORKLOAD, DEFAULT_WORKLOAD)
    schema_check(schemas.SLA, DEFAULT_SLA)
    schema_check(schemas.STAGE, DEFAULT_STAGE)
    schema_check(
        schemas.GATE_POLICY,
        {"quality": DEFAULT_QUALITY, "performance": DEFAULT_PERFORMANCE, "stability": DEFAULT_STABILITY},
    )


@pytest.mark.django_db
def test_the_demo_gate_policies_are_accepted():
    seed_demo()
    policies = list(GatePolicy.objects.all())
    assert policies
    for p in policies:
        schema_check(
            schemas.GATE_POLICY,
            {"quality": p.quality, "performance": p.performance, "stability": p.stability},
        )
        schema_check(schemas.WORKLOAD, p.performance["workload"], field="workload")


@pytest.mark.django_db
def test_the_openapi_document_publishes_the_workload_sla_stage_and_policy_schemas(admin_client):
    doc = admin_client.get("/api/schema/", {"format": "json"}).json()
    components = doc["components"]["schemas"]
    create = components["BenchmarkRunCreate"]["properties"]
    arrival = create["workload"]["properties"]["arrival"]
    assert arrival["properties"]["rate"]["maximum"] == schemas.MAX_RATE_RPS
    assert create["sla"]["properties"]["ttft_ms"]["maximum"] == schemas.MAX_SLA_MS
    assert create["stage"]["properties"]["processes"]["maximum"] == schemas.MAX_CLIENT_PROCESSES
    policy = components["GateStatus"]["properties"]["policy"]
    assert (
        policy["properties"]["stability"]["properties"]["duration_s"]["maximum"] == schemas.MAX_SOAK_SECONDS
    )
    # OpenAPI 3.0 has no if/then: the exact schema the server validates with rides along whole.
    assert create["workload"]["x-json-schema"]["properties"]["arrival"] == schemas.ARRIVAL
    assert policy["x-json-schema"]["properties"]["stability"] == schemas.STABILITY
    assert "$schema" not in policy and "$schema" not in create["workload"]
