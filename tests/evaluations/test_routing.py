"""Router policies in the console (ADR 0040): trained from two eval runs' per-case results, refused
with clear errors when the settings cannot make a router, judged by a gate against the strong version
alone, activated (audited) and published for the gateway; pages for admins and auditors only."""

from __future__ import annotations

import orjson
import pytest
import redis
from django.conf import settings

from audit.models import AuditEvent
from benchmarks.routing import CHEAP_PROFILE, CHEAP_SEED, STRONG_PROFILE, STRONG_SEED, simulated_results
from evalkit import builtin
from evalkit.suites import dump_jsonl
from evaluations.models import EvalCaseResult, EvalRun, RouterPolicy
from evaluations.selectors.routing import routers_table
from evaluations.services import routing as services
from evaluations.services.evals import eval_suite_upload
from snapshot.contract import parse_snapshot
from tests.deployments.factories import DeploymentFactory, ModelRouteFactory, RouteTargetFactory
from tests.factories import ModelFactory, ModelVersionFactory

API = "/api/evaluations/router-policies/"


def _run(suite_version, version, profile: dict, *, seed: int, cases) -> EvalRun:
    """A finished eval run of ``version``: the simulated engine's answers to every case (as
    ``engines.quality`` gives them), stored as an eval run stores them."""
    run = EvalRun.objects.create(
        suite_version=suite_version, model_version=version, label="simulated", base_url="http://sim/v1",
        model_name=str(version), status="succeeded", cases_total=len(cases), cases_done=len(cases),
    )  # fmt: skip
    rows = simulated_results(cases, profile, seed=seed)
    EvalCaseResult.objects.bulk_create(
        EvalCaseResult(run=run, case_id=r["case_id"], category=r["category"], score=r["score"],
                       output=r["output"], prompt_tokens=r["prompt_tokens"], output_tokens=r["output_tokens"])
        for r in rows
    )  # fmt: skip
    return run


@pytest.fixture
def world(admin_user):
    model = ModelFactory()
    cheap = ModelVersionFactory(model=model, label="small", lifecycle="serving")
    strong = ModelVersionFactory(model=model, label="large", lifecycle="serving")
    cases = builtin.generate("arithmetic_graded", seed=4, n=800)
    sv = eval_suite_upload(name="graded", content=dump_jsonl(cases), actor=admin_user)
    return {
        "route": ModelRouteFactory(public_name="assistant"),
        "cheap": cheap,
        "strong": strong,
        "cases": cases,
        "suite_version": sv,
        "cheap_run": _run(sv, cheap, CHEAP_PROFILE, seed=CHEAP_SEED, cases=cases),
        "strong_run": _run(sv, strong, STRONG_PROFILE, seed=STRONG_SEED, cases=cases),
    }


def _body(world, **over) -> dict:
    return {
        "route": "assistant",
        "cheap_eval_run": world["cheap_run"].pk,
        "strong_eval_run": world["strong_run"].pk,
        "quality_target": 0.95,
        "cheap_usd_per_mtok": 0.06,
        "strong_usd_per_mtok": 0.54,
    } | over


def test_train_judge_activate_and_publish_a_router_policy(admin_client, world):
    r = admin_client.post(API, _body(world), content_type="application/json")
    assert r.status_code == 201, r.content
    p = r.json()
    assert p["status"] == "draft" and p["label"] == "simulated" and p["number"] == 1
    test = p["summary"]["test"]
    # Easy levels go cheap: at least a third of the test cases, at most 70 % of the cost, the quality kept.
    assert test["cheap_share"] > 0.33 and test["cost_ratio"] < 0.7 and test["quality_ratio"] >= 0.95
    assert len(p["curve"]) > 5 and p["curve"][0]["cheap_share"] == 1.0 and p["curve"][-1]["cost_ratio"] == 1.0

    # Not yet served: activation needs a passed gate (or a reason) and both versions on the route.
    r = admin_client.post(f"{API}{p['id']}/activate/", {}, content_type="application/json")
    assert r.status_code == 400 and "gate has not been run" in r.json()["override_reason"][0]
    r = admin_client.post(f"{API}{p['id']}/gate/", content_type="application/json")
    assert r.status_code == 200 and r.json()["gate_verdict"] == "passed"
    assert "over" in r.json()["gate_checks"][0]["detail"]
    r = admin_client.post(f"{API}{p['id']}/activate/", {}, content_type="application/json")
    assert r.status_code == 400 and "has no deployment of" in r.json()["__all__"][0]
    for version in (world["cheap"], world["strong"]):
        RouteTargetFactory(
            route=world["route"], deployment=DeploymentFactory(model_version=version), weight=50
        )
    r = admin_client.post(f"{API}{p['id']}/activate/", {}, content_type="application/json")
    assert r.status_code == 200 and r.json()["status"] == "active"

    # The routers section carries it as the gateway parses it.
    table = routers_table()
    assert table["assistant"]["threshold"] == p["threshold"]
    services.routers_section_publish()
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        raw = client.get(getattr(settings, "GATEWAY_KEY_PREFIX", "gw:") + "snapshot:routers")
    finally:
        client.close()
    routes = {"assistant": {"targets": []}}
    snap = parse_snapshot(orjson.dumps({"routes": routes} | orjson.loads(raw)))
    assert snap.routes["assistant"].router.cheap_version_id == world["cheap"].pk

    # A second policy replaces it; every step is in the audit trail.
    second = services.router_policy_train(route=world["route"], cheap_run=world["cheap_run"],
                                          strong_run=world["strong_run"], quality_target=0.9,
                                          cheap_usd_per_mtok=0.06, strong_usd_per_mtok=0.54, actor="t", seed=1)  # fmt: skip
    services.router_policy_activate(policy=second, actor="t", override_reason="trial on a quiet day")
    assert RouterPolicy.objects.get(pk=p["id"]).status == "retired" and second.override_reason
    actions = list(
        AuditEvent.objects.filter(action__startswith="router_policy.").values_list("action", flat=True)
    )
    for action in (
        "router_policy.train",
        "router_policy.gate",
        "router_policy.activate",
        "router_policy.retire",
    ):
        assert action in actions


def test_a_policy_is_judged_on_newer_runs_and_fails_when_the_cheap_version_got_worse(world):
    policy = services.router_policy_train(route=world["route"], cheap_run=world["cheap_run"],
                                          strong_run=world["strong_run"], quality_target=0.95,
                                          cheap_usd_per_mtok=0.06, strong_usd_per_mtok=0.54, actor="t")  # fmt: skip
    worse = _run(world["suite_version"], world["cheap"], {"default": 0.3}, seed=7, cases=world["cases"])
    services.router_policy_judge(policy=policy, actor="t", cheap_run=worse, strong_run=world["strong_run"])
    policy.refresh_from_db()
    assert policy.gate_verdict == "failed" and "below the target" in policy.gate_checks[0]["detail"]


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ("same", "strong_eval_run", "same"),
        ({"quality_target": 1.5}, "quality_target", "(0, 1]"),
        ({"quality_target": 0}, "quality_target", "(0, 1]"),
        ({"cheap_usd_per_mtok": 0.6}, "cheap_usd_per_mtok", "must cost less"),
    ],
)
def test_settings_that_cannot_make_a_router_are_refused_with_a_clear_message(
    admin_client, world, over, field, words
):
    body = _body(world, strong_eval_run=world["cheap_run"].pk) if over == "same" else _body(world, **over)
    r = admin_client.post(API, body, content_type="application/json")
    assert r.status_code == 400 and words in str(r.json()[field])
    assert not RouterPolicy.objects.exists()


def test_too_few_cases_are_refused(admin_client, world, admin_user):
    few = builtin.generate("arithmetic_graded", seed=8, n=30)
    sv = eval_suite_upload(name="few", content=dump_jsonl(few), actor=admin_user)
    a = _run(sv, world["cheap"], CHEAP_PROFILE, seed=1, cases=few)
    b = _run(sv, world["strong"], STRONG_PROFILE, seed=2, cases=few)
    r = admin_client.post(
        API, _body(world, cheap_eval_run=a.pk, strong_eval_run=b.pk), content_type="application/json"
    )
    assert r.status_code == 400 and "needs at least" in r.json()["__all__"][0]
    # The form says the same on the page.
    r = admin_client.post("/gates/routers/train/", _body(world, route=world["route"].pk, cheap_eval_run=a.pk,
                                                         strong_eval_run=b.pk))  # fmt: skip
    assert r.status_code == 400 and b"needs at least" in r.content
    assert not RouterPolicy.objects.exists()


def test_the_pages_show_the_curve_to_admins_and_auditors_and_nobody_else(
    admin_client, auditor_client, member_client, outsider_client, world
):
    r = admin_client.post("/gates/routers/train/", _body(world, route=world["route"].pk))
    assert r.status_code == 302
    policy = RouterPolicy.objects.get()
    page = auditor_client.get(f"/gates/routers/{policy.pk}/")
    assert page.status_code == 200
    assert b'id="router-curve-data"' in page.content and b"chart-router-curve" in page.content
    assert b"Activate on" not in page.content  # auditors read, never change
    assert admin_client.get("/gates/routers/").status_code == 200
    assert auditor_client.post(f"/gates/routers/{policy.pk}/gate/").status_code == 403
    for c in (member_client, outsider_client):
        assert c.get("/gates/routers/").status_code == 403
        assert c.get(f"/gates/routers/{policy.pk}/").status_code == 403
        assert c.get(API).status_code == 403
    assert admin_client.get(f"/gates/routers/{policy.pk}/").status_code == 200
