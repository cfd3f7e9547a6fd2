"""Routes restricted to tenants: form, API, audit trail and the gateway's routing table."""

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


def _events(route):
    return list(events_for_object(object_type="deployments.modelroute", object_id=route.pk))


def test_admin_restricts_a_route_in_the_form_and_it_is_audited(admin_client, route, tenant, other_tenant):
    assert routing_table()["m-1"]["tenant_ids"] is None  # no restriction: every tenant
    page = admin_client.get(reverse("deployments:route_edit", args=[route.pk])).content.decode()
    assert 'name="allowed_tenants"' in page and tenant.name in page
    r = admin_client.post(
        reverse("deployments:route_edit", args=[route.pk]),
        {"public_name": "m-1", "allowed_tenants": [tenant.pk]},
    )
    assert r.status_code == 302
    assert routing_table()["m-1"]["tenant_ids"] == [tenant.pk]
    (event,) = [e for e in _events(route) if e.action == "model_route.tenants_set"]
    assert event.before == {"allowed_tenants": []} and event.after == {"allowed_tenants": [tenant.pk]}
    # Clearing the list opens the route to every tenant again.
    admin_client.post(reverse("deployments:route_edit", args=[route.pk]), {"public_name": "m-1"})
    assert routing_table()["m-1"]["tenant_ids"] is None


def test_the_form_names_an_unknown_tenant_and_saves_nothing(admin_client, route):
    r = admin_client.post(
        reverse("deployments:route_edit", args=[route.pk]),
        {"public_name": "m-1", "allowed_tenants": [999999]},
    )
    assert r.status_code == 200 and "999999" in r.content.decode()
    assert not ModelRoute.objects.get(pk=route.pk).allowed_tenants.exists()


def test_api_reads_and_writes_allowed_tenants(admin_client, route, tenant, other_tenant):
    url = f"{API}/routes/{route.pk}/"
    assert admin_client.get(url).json()["allowed_tenants"] == []
    r = admin_client.patch(
        url,
        data=json.dumps({"allowed_tenants": [tenant.pk, other_tenant.pk]}),
        content_type="application/json",
    )
    assert r.status_code == 200, r.content
    assert sorted(r.json()["allowed_tenants"]) == sorted([tenant.pk, other_tenant.pk])
    assert routing_table()["m-1"]["tenant_ids"] == sorted([tenant.pk, other_tenant.pk])
    # A PATCH that does not name the field leaves it alone.
    admin_client.patch(url, data=json.dumps({"description": "d"}), content_type="application/json")
    assert routing_table()["m-1"]["tenant_ids"] == sorted([tenant.pk, other_tenant.pk])
    r = admin_client.post(
        f"{API}/routes/",
        data=json.dumps({"public_name": "m-2", "allowed_tenants": [tenant.pk]}),
        content_type="application/json",
    )
    assert r.status_code == 201 and routing_table()["m-2"]["tenant_ids"] == [tenant.pk]
    bad = admin_client.patch(
        url, data=json.dumps({"allowed_tenants": [999999]}), content_type="application/json"
    )
    assert bad.status_code == 400 and "allowed_tenants" in bad.json()


@pytest.mark.parametrize("role", ["auditor", "member", "outsider", "anon"])
def test_only_admins_restrict_routes(role_clients, route, tenant, role):
    c = role_clients[role]
    r = c.patch(
        f"{API}/routes/{route.pk}/",
        data=json.dumps({"allowed_tenants": [tenant.pk]}),
        content_type="application/json",
    )
    assert r.status_code == (401 if role == "anon" else 403)
    r = c.post(
        reverse("deployments:route_edit", args=[route.pk]),
        {"public_name": "m-1", "allowed_tenants": [tenant.pk]},
    )
    assert r.status_code in (302, 403) and (role == "anon") == (r.status_code == 302)
    assert not ModelRoute.objects.get(pk=route.pk).allowed_tenants.exists()
