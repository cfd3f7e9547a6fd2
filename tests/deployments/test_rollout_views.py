"""Rollout pages and API: every role, the create form's errors, actions, faults, the schema."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from deployments.models import Deployment, Rollout
from deployments.rollouts import services as S
from tests.deployments.rollout_fixtures import (
    FAST_STEPS,
    FAST_STEPS_STORED,
    TTFT_CHECK,
    route_with_canary,
    usage,
    weights,
)

pytestmark = pytest.mark.django_db

ROLES_READ = [("admin", 200), ("auditor", 200), ("member", 403), ("outsider", 403), ("anon", 302)]
ROLES_WRITE = [("admin", None), ("auditor", 403), ("member", 403), ("outsider", 403), ("anon", 302)]


@pytest.fixture
def setup():
    return route_with_canary()


@pytest.fixture
def rollout(setup):
    return S.rollout_create(
        route=setup.route,
        stable=setup.stable,
        canary=setup.canary,
        steps=FAST_STEPS,
        checks=TTFT_CHECK,
        actor="t",
    )


@pytest.mark.parametrize("role,expected", ROLES_READ)
@pytest.mark.parametrize("page", ["list", "detail", "live", "chart", "route"])
def test_rollout_pages_for_admins_and_auditors_only(role_clients, rollout, role, expected, page):
    url = {
        "list": reverse("deployments:rollout_list"),
        "detail": reverse("deployments:rollout_detail", args=[rollout.pk]),
        "live": reverse("deployments:rollout_detail", args=[rollout.pk]) + "?part=live",
        "chart": reverse("deployments:rollout_chart_data", args=[rollout.pk]),
        "route": reverse("deployments:route_detail", args=[rollout.route_id]),
    }[page]
    response = role_clients[role].get(url)
    assert response.status_code == expected
    if expected == 302:
        assert "/accounts/login/" in response["Location"]


def test_detail_shows_plan_checks_and_admin_buttons(admin_client, auditor_client, rollout):
    url = reverse("deployments:rollout_detail", args=[rollout.pk])
    html = admin_client.get(url).content.decode()
    assert "set canary weight 20 %" in html and "analysis over 30 s" in html
    assert "canary p95 TTFT ≤ 1.5 × stable" in html
    assert 'data-action="abort"' in html and 'data-action="promote"' in html
    assert "<script>" not in html and "onclick=" not in html
    assert 'data-action="abort"' not in auditor_client.get(url).content.decode()


def test_rollout_list_query_count_does_not_grow_with_rows(admin_client, django_assert_max_num_queries):
    for i in range(6):
        setup = route_with_canary(public_name=f"q-{i}")
        S.rollout_create(
            route=setup.route,
            stable=setup.stable,
            canary=setup.canary,
            steps=FAST_STEPS,
            checks=TTFT_CHECK,
            actor="t",
        )
    with django_assert_max_num_queries(8):
        response = admin_client.get(reverse("deployments:rollout_list") + "?phase=progressing")
    assert response.status_code == 200 and response.content.decode().count("rollout-phase") == 6


def test_route_page_lists_its_rollout_history(admin_client, rollout):
    html = admin_client.get(reverse("deployments:route_detail", args=[rollout.route_id])).content.decode()
    assert 'id="route-rollouts"' in html and rollout.get_absolute_url() in html


def test_chart_data_has_both_sides_and_the_limits(admin_client, setup, rollout):
    at = rollout.created_at  # the chart spans start → now
    usage(setup.stable, at=at, n=4, ttft_ms=100)
    usage(setup.canary, at=at, n=2, ttft_ms=300)
    data = admin_client.get(reverse("deployments:rollout_chart_data", args=[rollout.pk])).json()
    ttft = data["metrics"]["ttft_p95_ms"]
    assert [v for _, v in ttft["stable"]] == [100] and [v for _, v in ttft["canary"]] == [300]
    assert ttft["limits"] == [{"relative": True, "limit": 1.5}]
    assert data["requests"] == {"stable": 4, "canary": 2}


def _form(setup, **over):
    data = {
        "route": setup.route.pk,
        "stable": setup.stable.pk,
        "canary": setup.canary.pk,
        "template": "fast-demo",
        "steps": "",
        "checks": "",
        "failure_limit": "",
        "sla_ttft_ms": "1000",
        "sla_tpot_ms": "50",
    }
    data.update(over)
    return data


@pytest.mark.parametrize("role,expected", ROLES_WRITE)
def test_create_form_for_admins_only(role_clients, setup, role, expected):
    client = role_clients[role]
    assert client.get(reverse("deployments:rollout_create")).status_code == (expected or 200)
    response = client.post(reverse("deployments:rollout_create"), _form(setup))
    if expected:
        assert response.status_code == expected and not Rollout.objects.exists()
    else:
        rollout = Rollout.objects.get()
        assert response.status_code == 302 and response["Location"] == rollout.get_absolute_url()
        assert rollout.template == "fast-demo" and rollout.created_by.username == "admin"
        assert AuditEvent.objects.get(action="rollout.start").actor == "admin"


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"steps": '[{"kind": "set_weight", "weight": 50}]'}, "last weight must be 100"),
        ({"steps": "[{not json"}, "Not valid JSON"),
        ({"canary": "STABLE"}, "different deployment"),
        (
            {"checks": '[{"metric": "ttft_p95_ms", "limit": 1.5, "relative": true}]', "failure_limit": "4"},
            "smaller",
        ),
    ],
)
def test_create_form_errors_name_the_problem_and_save_nothing(admin_client, setup, over, message):
    if over.get("canary") == "STABLE":
        over = {"canary": setup.stable.pk}
    before = weights(setup.route)
    response = admin_client.post(reverse("deployments:rollout_create"), _form(setup, **over))
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Rollout.objects.exists() and weights(setup.route) == before


def test_create_form_refuses_an_unapproved_canary(admin_client):
    setup = route_with_canary(canary_lifecycle="candidate")
    response = admin_client.post(reverse("deployments:rollout_create"), _form(setup))
    assert response.status_code == 400 and "is candidate" in response.content.decode()


def test_create_form_refuses_a_second_active_rollout(admin_client, setup, rollout):
    other = Deployment.objects.create(
        name="other",
        slug="other-canary",
        model_version=setup.canary.model_version,
        gpu_type=setup.canary.gpu_type,
    )
    response = admin_client.post(reverse("deployments:rollout_create"), _form(setup, canary=other.pk))
    assert response.status_code == 400 and "already has an active rollout" in response.content.decode()


@pytest.mark.parametrize("role,expected", ROLES_WRITE)
def test_actions_for_admins_only(role_clients, rollout, role, expected):
    response = role_clients[role].post(
        reverse("deployments:rollout_action", args=[rollout.pk, "abort"]), {"reason": "x"}
    )
    rollout.refresh_from_db()
    if expected:
        assert response.status_code == expected and rollout.outcome == ""
    else:
        assert response.status_code == 302 and rollout.outcome == "aborted"
        assert AuditEvent.objects.get(action="rollout.abort").reason == "aborted by admin: x"


def test_an_action_the_state_no_longer_allows_is_a_message_not_an_error(admin_client, rollout):
    S.rollout_abort(rollout=rollout, actor="t")
    response = admin_client.post(
        reverse("deployments:rollout_action", args=[rollout.pk, "promote"]), follow=True
    )
    assert response.status_code == 200 and "Cannot promote this rollout" in response.content.decode()


def test_aborted_rollout_page_shows_the_failing_values(admin_client, setup, rollout):
    t0 = timezone.now() - dt.timedelta(seconds=60)
    S.rollout_advance(rollout_id=rollout.pk, now=t0)
    usage(setup.stable, at=t0 + dt.timedelta(seconds=2), n=10, ttft_ms=100)
    usage(setup.canary, at=t0 + dt.timedelta(seconds=2), n=10, ttft_ms=640)
    S.analysis_run_execute(run_id=rollout.analysis_runs.get().pk)
    html = admin_client.get(reverse("deployments:rollout_detail", args=[rollout.pk])).content.decode()
    assert "Aborted" in html and "ttft_p95_ms (p95 TTFT): canary 640.0 ms" in html
    assert "640.0 ms" in html and "≤ 150.0 ms" in html and "(1.5 × stable)" in html


# --- faults ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role,expected", ROLES_WRITE)
def test_faults_form_for_admins_only(role_clients, setup, role, expected):
    response = role_clients[role].post(
        reverse("deployments:faults", args=[setup.canary.pk]), {"ttft_extra_ms": "500", "reason": "drill"}
    )
    setup.canary.refresh_from_db()
    if expected:
        assert response.status_code == expected and setup.canary.faults == {}
    else:
        assert response.status_code == 302 and setup.canary.faults == {"ttft_extra_ms": 500.0}
        html = role_clients[role].get(setup.canary.get_absolute_url()).content.decode()
        assert "faults injected" in html
        assert "faults injected" in role_clients[role].get(reverse("deployments:list")).content.decode()


def test_faults_form_bad_values_change_nothing(admin_client, setup):
    response = admin_client.post(
        reverse("deployments:faults", args=[setup.canary.pk]), {"error_rate": "7"}, follow=True
    )
    setup.canary.refresh_from_db()
    assert setup.canary.faults == {} and "error_rate" in response.content.decode()


# --- API ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "role,expected", [("admin", 200), ("auditor", 200), ("member", 403), ("outsider", 403), ("anon", 403)]
)
def test_api_read_for_admins_and_auditors(role_clients, rollout, role, expected):
    response = role_clients[role].get(f"/api/deployments/rollouts/{rollout.pk}/")
    assert response.status_code in ((expected,) if expected != 403 else (401, 403))
    if expected == 200:
        assert response.json()["steps"] == FAST_STEPS_STORED


@pytest.mark.parametrize(
    "role,expected", [("auditor", 403), ("member", 403), ("outsider", 403), ("anon", 403)]
)
def test_api_writes_refused_for_non_admins(role_clients, setup, role, expected):
    body = {
        "route": setup.route.pk,
        "stable": setup.stable.pk,
        "canary": setup.canary.pk,
        "template": "fast-demo",
    }
    response = role_clients[role].post("/api/deployments/rollouts/", body, content_type="application/json")
    assert response.status_code in (401, 403) and not Rollout.objects.exists()


def test_api_create_and_act(admin_client, setup):
    body = {
        "route": setup.route.pk,
        "stable": setup.stable.pk,
        "canary": setup.canary.pk,
        "template": "fast-demo",
    }
    response = admin_client.post("/api/deployments/rollouts/", body, content_type="application/json")
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    response = admin_client.post(
        f"/api/deployments/rollouts/{pk}/promote/", {"reason": "ok"}, content_type="application/json"
    )
    assert response.status_code == 200 and response.json()["outcome"] == "promoted"
    response = admin_client.post(
        f"/api/deployments/rollouts/{pk}/abort/", {}, content_type="application/json"
    )
    assert response.status_code == 409 and "Cannot abort" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"steps": [{"kind": "set_weight", "weight": 40}], "checks": []}, "steps"),
        ({"template": "fast-demo", "canary": "STABLE"}, "canary"),
        ({"template": "fast-demo", "failure_limit": 9}, "failure_limit"),
        ({"template": "nope"}, "template"),
        ({}, "steps"),
    ],
)
def test_api_bad_input_is_a_400_naming_the_field(admin_client, setup, body, field):
    data = {"route": setup.route.pk, "stable": setup.stable.pk, "canary": setup.canary.pk, **body}
    if data["canary"] == "STABLE":
        data["canary"] = setup.stable.pk
    response = admin_client.post(
        "/api/deployments/rollouts/", json.dumps(data), content_type="application/json"
    )
    assert response.status_code == 400 and field in response.json(), response.content
    assert not Rollout.objects.exists()


def test_api_faults(admin_client, auditor_client, setup):
    url = f"/api/deployments/deployments/{setup.canary.pk}/faults/"
    assert auditor_client.post(url, {"error_rate": 0.5}, content_type="application/json").status_code == 403
    response = admin_client.post(url, {"error_rate": 0.5}, content_type="application/json")
    assert response.status_code == 200 and response.json()["faults"] == {"error_rate": 0.5}
    assert admin_client.post(url, {"error_rate": 2}, content_type="application/json").status_code == 400


def test_openapi_schema_lists_the_rollout_endpoints(admin_client):
    schema = admin_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content.decode()
    assert "/api/deployments/rollouts/{id}/abort/" in schema
    assert (
        "/api/deployments/deployments/{id}/faults/" in schema
        or "/api/deployments/deployments/{pk}/faults/" in schema
    )
