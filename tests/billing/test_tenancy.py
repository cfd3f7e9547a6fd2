"""Tenancy: members see only their own tenant; admins and auditors see all; the API agrees."""

import pytest
from django.urls import reverse

from billing.models import Tenant


@pytest.mark.parametrize(
    "role,sees_acme,sees_globex",
    [
        ("admin", True, True),
        ("auditor", True, True),
        ("member", True, False),
        ("outsider", False, True),
    ],
)
def test_tenant_list_shows_only_visible_tenants(
    role_clients, tenant, other_tenant, role, sees_acme, sees_globex
):
    html = role_clients[role].get(reverse("billing:tenant_list")).content.decode()
    assert ("Acme Search" in html) == sees_acme
    assert ("Globex Support" in html) == sees_globex


@pytest.mark.parametrize(
    "role,expected", [("admin", 200), ("auditor", 200), ("member", 200), ("outsider", 404)]
)
def test_tenant_detail_is_hidden_from_other_tenants(role_clients, tenant, other_tenant, role, expected):
    assert role_clients[role].get(reverse("billing:tenant_detail", args=["acme"])).status_code == expected


def test_anonymous_tenant_pages_redirect_to_login(anon_client, tenant):
    for url in (reverse("billing:tenant_list"), reverse("billing:tenant_detail", args=["acme"])):
        response = anon_client.get(url)
        assert response.status_code == 302 and reverse("login") in response["Location"]


@pytest.mark.parametrize(
    "role,slugs",
    [
        ("admin", ["acme", "globex"]),
        ("auditor", ["acme", "globex"]),
        ("member", ["acme"]),
        ("outsider", ["globex"]),
    ],
)
def test_tenant_api_lists_only_visible_tenants(role_clients, tenant, other_tenant, role, slugs):
    data = role_clients[role].get("/api/billing/tenants/").json()
    assert sorted(t["slug"] for t in data["results"]) == slugs


def test_tenant_api_hides_other_tenants_memberships(member_client, outsider_user, member_user):
    data = member_client.get("/api/billing/memberships/").json()
    assert [m["username"] for m in data["results"]] == ["member"]


@pytest.mark.parametrize("role,expected", [("admin", 201), ("auditor", 403), ("member", 403), ("anon", 401)])
def test_only_admins_create_tenants(role_clients, tenant, other_tenant, role, expected):
    response = role_clients[role].post(
        "/api/billing/tenants/", {"name": "Initech", "slug": "initech"}, content_type="application/json"
    )
    assert response.status_code == expected
    assert Tenant.objects.filter(slug="initech").exists() == (expected == 201)


def test_tenant_api_rejects_bad_slug(admin_client, db):
    response = admin_client.post(
        "/api/billing/tenants/", {"name": "Bad", "slug": "not a slug!"}, content_type="application/json"
    )
    assert response.status_code == 400 and "slug" in response.json()
    assert not Tenant.objects.filter(name="Bad").exists()
