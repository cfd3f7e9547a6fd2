"""Playbook actions: proposed from an incident's diagnosis, applied through the audited services (in
automatic mode at once, in approval mode by an on-call), time-boxed, undone when the SLOs held again
or the time box ended, never over a person's later change; who may do what; bad input refused."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from audit.models import AuditEvent
from billing.models import TenantLimits, UsageEvent
from deployments.models import RouteTarget
from events.models import Event
from notify.models import Notification
from operations import playbooks
from operations.models import Incident, Mitigation, PlaybookPolicy, SloBreach
from operations.reactions import incident_open
from operations.services import (
    mitigation_apply,
    mitigation_extend,
    mitigation_revert,
    mitigations_review,
    playbook_policy_set,
    slo_create,
    slo_evaluate,
)
from tests.deployments.factories import DeploymentFactory, ModelRouteFactory

pytestmark = pytest.mark.django_db
# A fixed time: the incident is diagnosed, and its actions time-boxed, as of the breach's own time.
NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


def _req(route, tenant, dep, *, at, ttft=120.0, prompt=100, output=50):
    return UsageEvent(
        event_id=uuid.uuid4(), tenant=tenant, public_model=route.public_name, deployment_id=dep.pk,
        deployment_slug=dep.slug, prompt_tokens=prompt, completion_tokens=output, cost_nanos=1, status="ok",
        http_status=200, started_at=at, finished_at=at, received_at=at, ttft_ms=ttft, tpot_ms=20.0,
    )  # fmt: skip


@pytest.fixture
def two_deployments(db):
    route = ModelRouteFactory(public_name="sim-llama")
    a, b = DeploymentFactory(slug="sim-a"), DeploymentFactory(slug="sim-b")
    RouteTarget.objects.create(route=route, deployment=a, weight=50)
    RouteTarget.objects.create(route=route, deployment=b, weight=50)
    return route, a, b


def _breach(route, admin_user, rows):
    UsageEvent.objects.bulk_create(rows)
    slo = slo_create(route=route, kind="ttft", threshold_ms=500, target="0.99", window_scale=0.01, min_requests=5,
                     actor=admin_user)  # fmt: skip
    assert slo_evaluate(slo, now=NOW) == "firing"
    breach = SloBreach.objects.get(slo=slo)
    event = Event.objects.create(
        kind="operations.slo_breached", subject=f"x:{breach.pk}", payload={"breach": breach.pk}
    )
    incident_open(event)
    incident_open(event)  # at least once: one set of proposals
    return slo, Incident.objects.get(route=route)


def _regression(route, tenant, a, b):
    """sim-b's first tokens slowed 20× in the last 10 s while sim-a held."""
    rows = [_req(route, tenant, (a, b)[s % 2], at=NOW - dt.timedelta(seconds=250 - s)) for s in range(240)]
    for s in range(10):
        at = NOW - dt.timedelta(seconds=10 - s)
        rows += [_req(route, tenant, a, at=at), _req(route, tenant, b, at=at, ttft=2500)]
    return rows


def _flood(route, tenant, other_tenant, a):
    """Prompts of 300 tokens, then ``other_tenant`` floods 6,000-token prompts and everyone's first
    token slows."""
    rows = [_req(route, (tenant, other_tenant)[s % 2], a, at=NOW - dt.timedelta(seconds=250 - s), prompt=300)
            for s in range(240)]  # fmt: skip
    for s in range(10):
        at = NOW - dt.timedelta(seconds=10 - s)
        rows += [_req(route, other_tenant, a, at=at, prompt=6000, ttft=3000),
                 _req(route, tenant, a, at=at, prompt=300, ttft=2000)]  # fmt: skip
    return rows


def _weights(route):
    return dict(RouteTarget.objects.filter(route=route).values_list("deployment__slug", "weight"))


def test_automatic_mode_drains_the_regressed_deployment_and_undoes_it_once_the_slo_held(
    two_deployments, tenant, admin_user
):
    route, a, b = two_deployments
    playbook_policy_set(route=route, actor=admin_user, mode="auto", hold_minutes=5, time_box_minutes=60)
    slo, incident = _breach(route, admin_user, _regression(route, tenant, a, b))
    assert incident.diagnosis["cause"] == "deployment_regression"
    m = Mitigation.objects.get(incident=incident)
    assert (m.kind, m.params, m.state, m.applied_by) == ("shift_weight", {"deployment": "sim-b", "weight": 0},
                                                         "applied", "playbook")  # fmt: skip
    assert _weights(route) == {"sim-a": 50, "sim-b": 0}
    # Applied through the audited service, with the playbook as the actor and the incident as the reason.
    ev = AuditEvent.objects.filter(action="route.weights_set").latest("seq")
    assert ev.actor == "playbook" and f"incident #{incident.pk}" in ev.reason
    assert ev.after == {"weights": {"sim-b": 0}}

    # Still breaching: nothing is undone.
    assert mitigations_review(now=NOW + dt.timedelta(minutes=6)) == {}
    # Traffic recovers (sim-a alone, fast); the SLO evaluates OK; after the hold time the weight returns.
    later = NOW + dt.timedelta(minutes=10)
    UsageEvent.objects.bulk_create(
        [_req(route, tenant, a, at=later - dt.timedelta(seconds=100 - s)) for s in range(100)]
    )
    assert slo_evaluate(slo, now=later) == "ok"
    assert mitigations_review(now=later + dt.timedelta(minutes=1)) == {}  # the breach ended < 5 min ago
    assert mitigations_review(now=later + dt.timedelta(minutes=6)) == {m.pk: "reverted"}
    m.refresh_from_db()
    assert m.ended_by == "playbook" and m.outcome.startswith("the SLOs held for 5 min")
    assert _weights(route) == {"sim-a": 50, "sim-b": 50}
    kinds = [e.text.split(" ")[0] for e in incident.entries.filter(kind="action")]
    assert kinds == ["Proposed", "Applied", "Reverted"]
    # The postmortem lists the action with who applied and who undid it.
    from operations.incidents import postmortem_json, postmortem_markdown

    pm = postmortem_json(incident)
    assert pm["mitigations"][0]["state"] == "reverted" and pm["mitigations"][0]["applied_by"] == "playbook"
    assert "## Actions" in postmortem_markdown(incident)


def test_the_time_box_ends_an_action_unless_a_person_extends_it(two_deployments, tenant, admin_user):
    route, a, b = two_deployments
    playbook_policy_set(route=route, actor=admin_user, mode="auto", time_box_minutes=30, hold_minutes=10)
    _slo, incident = _breach(route, admin_user, _regression(route, tenant, a, b))
    m = Mitigation.objects.get(incident=incident)
    t0 = m.applied_at
    assert m.expires_at == t0 + dt.timedelta(minutes=30)
    with pytest.raises(ValidationError, match="Only a person"):
        mitigation_extend(mitigation=m, actor="playbook", now=t0 + dt.timedelta(minutes=20))
    mitigation_extend(mitigation=m, actor=admin_user, now=t0 + dt.timedelta(minutes=20))
    m.refresh_from_db()
    assert m.expires_at == t0 + dt.timedelta(minutes=60) and m.extended_by == admin_user.username
    assert AuditEvent.objects.filter(action="mitigation.extend", actor=admin_user.username).exists()
    # The SLO is still breaching, yet at the end of the (extended) time box the action is undone.
    assert mitigations_review(now=t0 + dt.timedelta(minutes=59)) == {}
    assert mitigations_review(now=t0 + dt.timedelta(minutes=60)) == {m.pk: "reverted"}
    m.refresh_from_db()
    assert m.outcome.startswith("its time box ended") and _weights(route)["sim-b"] == 50


def test_undoing_leaves_a_persons_later_change_alone(two_deployments, tenant, admin_user):
    from deployments.services import route_weights_set

    route, a, b = two_deployments
    playbook_policy_set(route=route, actor=admin_user, mode="auto")
    _slo, incident = _breach(route, admin_user, _regression(route, tenant, a, b))
    m = Mitigation.objects.get(incident=incident)
    route_weights_set(route=route, weights={b: 10}, actor=admin_user, reason="canary at 10 %")
    mitigation_revert(mitigation=m, actor=admin_user, reason="done")
    m.refresh_from_db()
    assert m.state == "reverted" and "changed since" in m.outcome
    assert _weights(route)["sim-b"] == 10


def test_approval_mode_pages_the_oncall_and_applies_only_when_approved(
    two_deployments, tenant, admin_user, admin_client, tenant_admin_client, auditor_client
):
    route, a, b = two_deployments
    playbook_policy_set(route=route, actor=admin_user, mode="approve")
    _slo, incident = _breach(route, admin_user, _regression(route, tenant, a, b))
    m = Mitigation.objects.get(incident=incident)
    assert m.state == "proposed" and _weights(route)["sim-b"] == 50
    note = Notification.objects.get(kind="operations.mitigation_proposed")
    assert note.audience == "oncall" and "sim-b" in note.body
    url = reverse("operations:mitigation_action", args=[m.pk, "apply"])
    # A tenant admin and an auditor cannot act; the page shows them no buttons.
    assert tenant_admin_client.post(url).status_code in (403, 404)
    assert auditor_client.post(url).status_code == 403
    assert (
        b'name="apply"'
        not in auditor_client.get(reverse("operations:incident_detail", args=[incident.pk])).content
    )
    m.refresh_from_db()
    assert m.state == "proposed"
    page = admin_client.get(reverse("operations:incident_detail", args=[incident.pk]))
    assert b'name="apply"' in page.content
    r = admin_client.post(url)
    assert r.status_code == 302
    m.refresh_from_db()
    assert m.state == "applied" and m.applied_by == admin_user.username
    assert _weights(route)["sim-b"] == 0
    assert AuditEvent.objects.filter(action="route.weights_set", actor=admin_user.username).exists()
    # Applying twice is refused with a message, and changes nothing.
    r = admin_client.post(url, follow=True)
    assert b"not waiting to be applied" in r.content


def test_suggest_mode_applies_nothing_even_when_asked(two_deployments, tenant, admin_user, admin_client):
    route, a, b = two_deployments  # no policy: the default suggests only
    _slo, incident = _breach(route, admin_user, _regression(route, tenant, a, b))
    m = Mitigation.objects.get(incident=incident)
    assert m.state == "proposed" and m.mode == "suggest"
    r = admin_client.post(reverse("operations:mitigation_action", args=[m.pk, "apply"]), follow=True)
    assert b"only suggests" in r.content
    m.refresh_from_db()
    assert m.state == "proposed" and _weights(route)["sim-b"] == 50
    assert not Notification.objects.filter(kind="operations.mitigation_proposed").exists()


def test_long_prompts_cap_the_flooding_tenant_and_the_cap_is_undone(
    two_deployments, tenant, other_tenant, admin_user
):
    route, a, b = two_deployments
    playbook_policy_set(route=route, actor=admin_user, mode="auto", min_input_tokens=512)
    TenantLimits.objects.create(tenant=other_tenant, rpm_limit=600)
    _slo, incident = _breach(route, admin_user, _flood(route, tenant, other_tenant, a))
    assert incident.diagnosis["cause"] == "long_prompts"
    m = Mitigation.objects.get(incident=incident)
    assert m.kind == "cap_input_tokens" and m.params == {
        "tenant_id": other_tenant.pk,
        "max_input_tokens": 600,
    }
    limits = TenantLimits.objects.get(tenant=other_tenant)
    assert (limits.max_input_tokens, limits.rpm_limit) == (600, 600)  # the other limits kept
    assert not TenantLimits.objects.filter(tenant=tenant, max_input_tokens__gt=0).exists()
    mitigation_revert(mitigation=m, actor="playbook", reason="test")
    limits.refresh_from_db()
    assert (limits.max_input_tokens, limits.rpm_limit) == (0, 600)


def test_an_action_outside_the_route_fails_with_its_reason(two_deployments, tenant, admin_user):
    route, a, b = two_deployments
    elsewhere = DeploymentFactory(slug="elsewhere")
    playbook_policy_set(route=route, actor=admin_user, mode="approve")
    _slo, incident = _breach(route, admin_user, _regression(route, tenant, a, b))
    m = Mitigation.objects.create(incident=incident, kind="shift_weight", params={"deployment": elsewhere.slug, "weight": 0},
                                  summary="drain elsewhere", mode="approve", proposed_at=NOW)  # fmt: skip
    m = mitigation_apply(mitigation=m, actor=admin_user, now=NOW)
    assert m.state == "failed" and "does not serve sim-llama" in m.outcome
    assert _weights(route) == {"sim-a": 50, "sim-b": 50}


@pytest.mark.parametrize(
    "form, field, message",
    [
        ({"min_rpm": "0"}, "min_rpm", "stops the tenant"),
        ({"min_output_tokens": "9000"}, "min_output_tokens", "above the route&#x27;s context (8192 tokens)"),
        ({"min_input_tokens": "lots"}, "min_input_tokens", "whole number"),
        ({"mode": "yolo"}, "mode", "Choose one of"),
        ({"time_box_minutes": "0"}, "time_box_minutes", "greater than or equal to 1"),
    ],
)
def test_the_policy_form_refuses_limits_that_make_no_sense(
    two_deployments, admin_client, form, field, message
):
    route, _a, _b = two_deployments
    data = {"mode": "auto", "time_box_minutes": "30", "hold_minutes": "10", "min_rpm": "60",
            "min_input_tokens": "1024", "min_output_tokens": "256", "max_extra_replicas": "1", **form}  # fmt: skip
    r = admin_client.post(reverse("operations:playbook_policy", args=[route.pk]), data)
    assert r.status_code == 400 and message.encode() in r.content
    assert not PlaybookPolicy.objects.filter(route=route).exists()


def test_the_policy_form_saves_audits_and_is_for_platform_admins(
    two_deployments, admin_client, tenant_admin_client, auditor_client
):
    route, _a, _b = two_deployments
    url = reverse("operations:playbook_policy", args=[route.pk])
    data = {"mode": "approve", "time_box_minutes": "45", "hold_minutes": "15", "min_rpm": "30",
            "min_input_tokens": "2048", "min_output_tokens": "512", "max_extra_replicas": "2",
            "actions": ["shift_weight", "rate_limit"]}  # fmt: skip
    assert tenant_admin_client.post(url, data).status_code in (403, 404)
    assert auditor_client.post(url, data).status_code == 403
    assert admin_client.get(url).status_code == 200
    r = admin_client.post(url, data)
    assert r.status_code == 302
    p = PlaybookPolicy.objects.get(route=route)
    assert (p.mode, p.time_box_minutes, p.actions) == ("approve", 45, ["rate_limit", "shift_weight"])
    assert AuditEvent.objects.filter(object_type="operations.playbookpolicy").exists()
    r = admin_client.post(url, {**data, "actions": ["launch_missiles"]})
    assert r.status_code == 400 and b"Unknown action: launch_missiles" in r.content


# --- the plan, as plain data ----------------------------------------------------------------------

POLICY = {
    "actions": [],
    "min_rpm": 60,
    "min_input_tokens": 1024,
    "min_output_tokens": 256,
    "max_extra_replicas": 1,
}


def _diag(cause, **evidence):
    return {"cause": cause, "branches": [{"cause": cause, "verdict": "likely", "evidence": evidence}],
            "tenants": evidence.pop("tenants", {})}  # fmt: skip


def test_the_plan_never_drains_a_routes_only_deployment():
    state = {"targets": {"solo": {"weight": 100, "num_replicas": 1, "scaling_mode": "fixed", "max_model_len": 8192}},
             "rollout": None, "policy": POLICY}  # fmt: skip
    assert playbooks.plan(_diag("errors_one_deployment", by_deployment={"solo": 9}), state) == []


def test_the_plan_pauses_a_running_rollout_before_it_drains():
    targets = {
        d: {"weight": 50, "num_replicas": 1, "scaling_mode": "fixed", "max_model_len": 8192} for d in "ab"
    }
    state = {"targets": targets, "rollout": {"id": 7, "phase": "progressing"}, "policy": POLICY}
    kinds = [a["kind"] for a in playbooks.plan(_diag("deployment_regression", worst="b"), state)]
    assert kinds == ["pause_rollout", "shift_weight"]
    state["policy"] = {**POLICY, "actions": ["shift_weight"]}
    assert [a["kind"] for a in playbooks.plan(_diag("deployment_regression", worst="b"), state)] == [
        "shift_weight"
    ]


def test_the_plan_rate_limits_the_surging_tenant_at_the_floor_or_its_own_baseline():
    targets = {"a": {"weight": 100, "num_replicas": 2, "scaling_mode": "fixed", "max_model_len": 8192}}
    tenants = {"1": {"rpm": 900.0, "baseline_rpm": 100.0}, "2": {"rpm": 40.0, "baseline_rpm": 38.0},
               "3": {"rpm": 300.0, "baseline_rpm": 10.0}}  # fmt: skip
    state = {"targets": targets, "rollout": None, "policy": POLICY, "limits": {"3": {"rpm_limit": 50}}}
    actions = playbooks.plan(_diag("load_surge", tenants=tenants), state)
    assert [(a["kind"], a["params"]) for a in actions] == [
        ("rate_limit", {"tenant_id": 1, "rpm_limit": 120}),  # 1.2 × its baseline
        ("add_replicas", {"deployment": "a", "num_replicas": 3}),
    ]  # tenant 3 already has a tighter limit (50) than the floor (60); tenant 2 did not surge


def test_long_prompts_go_to_the_long_context_pool_where_the_route_has_one_and_come_back_after(
    two_deployments, tenant, other_tenant, admin_user
):
    """Isolation before refusal: with a long-context deployment on the route, the playbook sets the
    route's threshold (no tenant is capped), the gateway's routing table carries it, and undoing it
    restores the route as it was."""
    from deployments.selectors import routing_table

    route, a, b = two_deployments
    long = DeploymentFactory(slug="sim-long", pool="long-context")
    RouteTarget.objects.create(route=route, deployment=long, weight=10)
    playbook_policy_set(route=route, actor=admin_user, mode="auto", min_input_tokens=512)
    _slo, incident = _breach(route, admin_user, _flood(route, tenant, other_tenant, a))
    assert incident.diagnosis["cause"] == "long_prompts"
    m = Mitigation.objects.get(incident=incident)
    assert (m.kind, m.params, m.state) == ("isolate_long_prompts", {"threshold": 600}, "applied")
    assert "sim-long" in m.summary
    route.refresh_from_db()
    assert route.long_context_threshold_tokens == 600
    assert routing_table()["sim-llama"]["long_context_threshold"] == 600
    assert not TenantLimits.objects.filter(max_input_tokens__gt=0).exists()  # nobody refused
    assert AuditEvent.objects.filter(action="modelroute.update", actor="playbook").exists()
    mitigation_revert(mitigation=m, actor="playbook", reason="test")
    route.refresh_from_db()
    assert route.long_context_threshold_tokens is None
    assert "threshold back to none" in Mitigation.objects.get(pk=m.pk).outcome


def test_isolation_is_refused_on_a_route_without_a_long_context_pool_and_not_undone_over_a_person(
    two_deployments, tenant, admin_user
):
    from deployments.services import model_route_save

    route, a, b = two_deployments
    playbook_policy_set(route=route, actor=admin_user, mode="approve")
    _slo, incident = _breach(route, admin_user, _regression(route, tenant, a, b))
    m = Mitigation.objects.create(incident=incident, kind="isolate_long_prompts", params={"threshold": 2000},
                                  summary="isolate", mode="approve", proposed_at=NOW)  # fmt: skip
    m = mitigation_apply(mitigation=m, actor=admin_user, now=NOW)
    assert m.state == "failed" and "no long-context deployment" in m.outcome
    route.refresh_from_db()
    assert route.long_context_threshold_tokens is None

    long = DeploymentFactory(slug="sim-long", pool="long-context")
    RouteTarget.objects.create(route=route, deployment=long, weight=10)
    m2 = Mitigation.objects.create(incident=incident, kind="isolate_long_prompts", params={"threshold": 99999},
                                   summary="isolate", mode="approve", proposed_at=NOW)  # fmt: skip
    assert (
        "between 1 and the pool's context"
        in mitigation_apply(mitigation=m2, actor=admin_user, now=NOW).outcome
    )
    m3 = Mitigation.objects.create(incident=incident, kind="isolate_long_prompts", params={"threshold": 1500},
                                   summary="isolate", mode="approve", proposed_at=NOW)  # fmt: skip
    assert mitigation_apply(mitigation=m3, actor=admin_user, now=NOW).state == "applied"
    route.refresh_from_db()
    route.long_context_threshold_tokens = 3000  # a person changes it meanwhile
    model_route_save(route=route, actor=admin_user, reason="by hand")
    m3 = mitigation_revert(mitigation=m3, actor="playbook", reason="test")
    assert "was changed since" in m3.outcome
    route.refresh_from_db()
    assert route.long_context_threshold_tokens == 3000


def _targets(**extra):
    base = {"weight": 50, "num_replicas": 1, "scaling_mode": "fixed", "max_model_len": 8192}
    return {d: {**base, **extra.get(d, {})} for d in extra}


def test_the_plan_isolates_long_prompts_where_a_long_pool_has_weight_and_caps_them_otherwise():
    diag = _diag("long_prompts", baseline_p90_prompt_tokens=700,
                 tenants={"4": {"p90_prompt_tokens": 7000.0, "baseline_p90_prompt_tokens": 700.0}})  # fmt: skip
    targets = _targets(a={}, long={"pool": "long-context", "weight": 10, "max_model_len": 131072})
    state = {"targets": targets, "rollout": None, "policy": POLICY, "route": {"long_context_threshold": None}}
    assert [(a["kind"], a["params"]) for a in playbooks.plan(diag, state)] == [
        ("isolate_long_prompts", {"threshold": 1400})  # twice the usual p90 prompt, over the floor
    ]
    state["route"] = {"long_context_threshold": 1000}  # already isolating below that: nothing to tighten
    assert playbooks.plan(diag, state) == []
    for no_pool in (
        {**state, "targets": _targets(a={}, long={"pool": "long-context", "weight": 0})},  # no weight
        {**state, "policy": {**POLICY, "actions": ["cap_input_tokens"]}},  # not allowed by the policy
    ):
        assert [(a["kind"], a["params"]) for a in playbooks.plan(diag, no_pool)] == [
            ("cap_input_tokens", {"tenant_id": 4, "max_input_tokens": 1400})
        ]


def test_the_plan_shifts_weight_to_a_smaller_models_deployment_when_the_kv_cache_is_full():
    diag = _diag("kv_pressure", deployments={"big": {"kv_usage": 0.99, "preemptions_per_s": 2.0},
                                              "small": {"kv_usage": 0.4, "preemptions_per_s": 0.0}})  # fmt: skip
    state = {"targets": _targets(big={"parameters": 70_000_000_000, "weight": 80},
                                 small={"parameters": 8_000_000_000, "weight": 20}),
             "rollout": None, "policy": POLICY}  # fmt: skip
    actions = [(a["kind"], a["params"]) for a in playbooks.plan(diag, state)]
    assert actions == [
        ("shift_weight", {"deployment": "big", "weight": 40}),
        ("add_replicas", {"deployment": "big", "num_replicas": 2}),
    ]
    same = {
        **state,
        "targets": _targets(big={"parameters": 8_000_000_000}, small={"parameters": 8_000_000_000}),
    }
    assert [a["kind"] for a in playbooks.plan(diag, same)] == ["add_replicas"]  # no smaller model to shift to
