"""The rollout plan's JSON Schema (ADR 0024): bad plans are refused naming the path and the rule,
the templates pass, the API answers 400 with the same message, and /api/schema/ publishes it."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from deployments.models import Rollout
from deployments.rollouts import schemas
from deployments.rollouts.plan import METRICS, TEMPLATES, PlanError, validate_plan
from tests.deployments.rollout_fixtures import route_with_canary

STEPS = [
    {"kind": "set_weight", "weight": 10},
    {"kind": "analysis", "window_s": 30},
    {"kind": "set_weight", "weight": 100},
]
CHECK = {"metric": "ttft_p95_ms", "limit": 1.5, "relative": True, "min_samples": 5}


def test_the_plan_schema_is_a_valid_draft_2020_12_schema_and_knows_every_metric():
    Draft202012Validator.check_schema(schemas.PLAN)
    assert set(schemas.METRIC_KEYS) == set(METRICS)


@pytest.mark.parametrize(
    ("plan", "field", "message"),
    [
        ({"steps": {"kind": "pause"}}, "steps", "steps: must be a list"),
        ({"steps": [{"kind": "pause"}] * 51}, "steps", "steps: takes at most 50 items"),
        ({"steps": [{"weight": 10}]}, "steps", "steps[0].kind: is required"),
        ({"steps": [{"kind": "set_weight"}]}, "steps", "steps[0].weight (percent of traffic): is required"),
        (
            {"steps": [*STEPS[:1], {"kind": "pause", "seconds": 10**7}, *STEPS[2:]]},
            "steps",
            "steps[1].seconds (pause seconds; none waits for an admin): must be between 1 and 604,800 (got 10,000,000)",
        ),
        (
            {"steps": [*STEPS[:1], {"kind": "analysis", "window_s": 100_000}, *STEPS[2:]]},
            "steps",
            "steps[1].window_s (analysis window seconds): must be between 5 and 86,400 (got 100,000)",
        ),
        (
            {"steps": [*STEPS[:2], {"kind": "set_weight", "weight": True}]},
            "steps",
            "steps[2].weight (percent of traffic): must be a whole number",
        ),
        ({"checks": [{**CHECK, "relative": "yes"}]}, "checks", "checks[0].relative: must be true or false"),
        (
            {"checks": [{"metric": "error_rate"}]},
            "checks",
            "checks[0].limit (ratio to stable when relative, else the value): is required",
        ),
        (
            {"checks": [{**CHECK, "min_samples": 0}]},
            "checks",
            "checks[0].min_samples: must be between 1 and 1,000,000 (got 0)",
        ),
        (
            {"checks": [{**CHECK, "metric": "sla_attainment", "relative": False, "limit": 90}]},
            "checks",
            "checks[0].limit (an absolute fraction): must be at most 1 (got 90)",
        ),
        (
            {"failure_limit": -1},
            "failure_limit",
            "failure_limit (failed checks tolerated): must be at least 0 (got -1)",
        ),
        (
            {"failure_limit": "1"},
            "failure_limit",
            "failure_limit (failed checks tolerated): must be a whole number",
        ),
    ],
)
def test_bad_plans_are_refused_naming_the_path_and_the_rule(plan, field, message):
    with pytest.raises(PlanError) as exc:
        validate_plan(**{"steps": STEPS, "checks": [CHECK], "failure_limit": 0, **plan})
    assert message in exc.value.errors[field], exc.value.errors


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_template_passes_the_schema_as_it_is(name):
    t = TEMPLATES[name]
    assert not list(
        Draft202012Validator(schemas.PLAN).iter_errors(
            {k: t[k] for k in ("steps", "checks", "failure_limit")}
        )
    )


@pytest.mark.django_db
def test_the_api_answers_400_with_the_path_and_the_rule(admin_client):
    setup = route_with_canary()
    body = {
        "route": setup.route.pk,
        "stable": setup.stable.pk,
        "canary": setup.canary.pk,
        "steps": [{"kind": "set_weight", "weight": 150}],
        "checks": [],
    }
    response = admin_client.post(
        "/api/deployments/rollouts/", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["steps"] == [
        "steps[0].weight (percent of traffic): must be between 0 and 100 (got 150)"
    ]
    assert not Rollout.objects.exists()


@pytest.mark.django_db
def test_the_openapi_document_publishes_the_steps_and_checks_schemas(admin_client):
    doc = admin_client.get("/api/schema/", {"format": "json"}).json()
    create = doc["components"]["schemas"]["RolloutCreate"]["properties"]
    assert create["steps"]["maxItems"] == schemas.MAX_STEPS
    assert create["steps"]["items"]["properties"]["kind"]["enum"] == list(schemas.STEP_KINDS)
    assert create["checks"]["items"]["properties"]["metric"]["enum"] == list(schemas.METRIC_KEYS)
    assert create["steps"]["x-json-schema"] == schemas.STEPS  # with its if/then rules, which 3.0 lacks
