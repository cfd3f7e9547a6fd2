"""Marking a route free (ADR 0022): only platform admins, always with a reason, always audited, and the
gateway's routing table says so. Tenant admins, members, auditors and outsiders cannot."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from audit.selectors import events_for_object
from deployments.models import ModelRoute
from deployments.selectors import routing_table
from tests.deployments.factories import DeploymentFactory, RouteTargetFactory

pytestmark = pytest.mark.django_db
API = "/api/deployments"


@pytest.fixture
def route(db):
    return RouteTargetFactory(deployment=DeploymentFactory(status="RUNNING"), route__public_name="m-1").route


def _post(client, route, body):
    return client.post(
        f"{API}/routes/{route.pk}/free/", data=json.dumps(body), content_type="application/json"
    )


def test_admin_marks_a_route_free_with_a_reason_through_the_api(admin_client, route):
    assert routing_table()["m-1"]["free"] is False
    r = _post(admin_client, route, {"free": True, "reason": "internal evals"})
    assert r.status_code == 200, r.content
    assert r.json()["free_reason"] == "internal evals"
    assert routing_table()["m-1"]["free"] is True
    ev = [e for e in events_for_object(object_type="deployments.modelroute", object_id=route.pk)]
    assert [e.action for e in ev if e.action.startswith("model_route.free")] == ["model_route.free_set"]
    r = _post(admin_client, route, {"free": False, "reason": "evals over"})
    assert r.status_code == 200 and routing_table()["m-1"]["free"] is False


@pytest.mark.parametrize("body", [{"free": True}, {"free": True, "reason": "   "}, {"reason": "x"}])
def test_a_mark_without_a_reason_is_a_400_and_changes_nothing(admin_client, route, body):
    r = _post(admin_client, route, body)
    assert r.status_code == 400
    assert ModelRoute.objects.get(pk=route.pk).free_reason == ""
    assert not [
        e for e in events_for_object(object_type="deployments.modelroute", object_id=route.pk)
        if e.action.startswith("model_route.free")
    ]  # fmt: skip


def test_the_free_mark_is_not_writable_through_the_plain_update(admin_client, route):
    r = admin_client.patch(
        f"{API}/routes/{route.pk}/",
        data=json.dumps({"free_reason": "sneaky"}),
        content_type="application/json",
    )
    assert r.status_code == 200 and ModelRoute.objects.get(pk=route.pk).free_reason == ""


@pytest.mark.parametrize("role", ["auditor", "member", "outsider", "anon"])
def test_only_platform_admins_mark_routes_free(role_clients, route, role):
    r = _post(role_clients[role], route, {"free": True, "reason": "I want it free"})
    assert r.status_code == (401 if role == "anon" else 403)
    assert ModelRoute.objects.get(pk=route.pk).free_reason == ""


def test_a_tenant_admin_cannot_mark_routes_free(tenant_admin_client, route):
    r = _post(tenant_admin_client, route, {"free": True, "reason": "our own route"})
    assert r.status_code == 403 and ModelRoute.objects.get(pk=route.pk).free_reason == ""


def test_admin_marks_a_route_free_on_its_page(admin_client, route):
    page = admin_client.get(reverse("deployments:route_detail", args=[route.pk])).content.decode()
    assert 'id="route-not-free"' in page
    r = admin_client.post(
        reverse("deployments:route_free", args=[route.pk]), {"free": "on", "reason": "free tier"}
    )
    assert r.status_code == 302
    page = admin_client.get(reverse("deployments:route_detail", args=[route.pk])).content.decode()
    assert "Served at $0 on purpose: free tier" in page
    assert routing_table()["m-1"]["free"] is True


def test_the_page_form_without_a_reason_changes_nothing(admin_client, route):
    r = admin_client.post(
        reverse("deployments:route_free", args=[route.pk]), {"free": "on", "reason": ""}, follow=True
    )
    assert "reason" in r.content.decode() and ModelRoute.objects.get(pk=route.pk).free_reason == ""


@pytest.mark.parametrize("role", ["auditor", "member", "outsider"])
def test_only_admins_see_and_use_the_free_form(role_clients, route, role):
    c = role_clients[role]
    r = c.post(reverse("deployments:route_free", args=[route.pk]), {"free": "on", "reason": "mine"})
    assert r.status_code == 403 and ModelRoute.objects.get(pk=route.pk).free_reason == ""
