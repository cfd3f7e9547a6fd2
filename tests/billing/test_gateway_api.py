"""REST API of keys, prices, budgets, limits and usage, walked through every role."""

from __future__ import annotations

import pytest
from django.urls import reverse

from billing.models import ApiKey, Budget, Price, TenantLimits
from billing.services.budgets import budget_set
from billing.services.keys import api_key_create, hash_api_key
from tests.billing.test_gateway_views import make_event

pytestmark = pytest.mark.django_db

DENIED = (401, 403)


@pytest.mark.parametrize("name", ["api-key-list", "api-price-list", "api-budget-list", "api-usage-list"])
@pytest.mark.parametrize("role", ["admin", "auditor", "member", "outsider", "anon"])
def test_list_endpoints_by_role(role_clients, name, role):
    r = role_clients[role].get(reverse(name))
    if role == "anon":
        assert r.status_code in DENIED
    else:
        assert r.status_code == 200


def test_key_list_is_tenant_scoped(role_clients, tenant, other_tenant, admin_user):
    api_key_create(tenant=tenant, name="acme-app", actor=admin_user)
    api_key_create(tenant=other_tenant, name="globex-app", actor=admin_user)
    names = {
        role: {k["name"] for k in role_clients[role].get(reverse("api-key-list")).json()["results"]}
        for role in ("admin", "auditor", "member", "outsider")
    }
    assert names == {
        "admin": {"acme-app", "globex-app"},
        "auditor": {"acme-app", "globex-app"},
        "member": {"acme-app"},
        "outsider": {"globex-app"},
    }


@pytest.mark.parametrize(
    "role,status",
    [
        ("admin", 201),
        ("tenant_admin", 201),
        ("auditor", 403),
        ("member", 403),
        ("outsider", 400),
        ("anon", DENIED),
    ],
)
def test_key_create_by_role(role, status, role_clients, tenant_admin_client, tenant):
    client = tenant_admin_client if role == "tenant_admin" else role_clients[role]
    r = client.post(
        reverse("api-key-list"),
        {"tenant": tenant.slug, "name": "svc", "allowed_models": ["sim-llama"], "rpm_limit": 10},
        content_type="application/json",
    )
    assert r.status_code in (status if isinstance(status, tuple) else (status,))
    if r.status_code == 201:
        body = r.json()
        key = ApiKey.objects.get(pk=body["id"])
        assert hash_api_key(body["key"]) == key.key_hash and body["key"].startswith(body["prefix"])
        assert key.allowed_models == ["sim-llama"] and key.rpm_limit == 10
        assert "key" not in client.get(reverse("api-key-list")).json()["results"][0]
    else:
        assert not ApiKey.objects.exists()


def test_key_create_rejects_bad_input(admin_client, tenant):
    r = admin_client.post(
        reverse("api-key-list"),
        {"tenant": tenant.slug, "name": "x", "allowed_models": "all"},
        content_type="application/json",
    )
    assert r.status_code == 400
    r = admin_client.post(
        reverse("api-key-list"),
        {"tenant": tenant.slug, "name": "x", "expires_at": "2001-01-01T00:00:00Z"},
        content_type="application/json",
    )
    assert r.status_code == 400 and not ApiKey.objects.exists()


@pytest.mark.parametrize(
    "role,status",
    [
        ("admin", 200),
        ("tenant_admin", 200),
        ("auditor", 403),
        ("member", 403),
        ("outsider", 404),
        ("anon", DENIED),
    ],
)
def test_key_revoke_by_role(role, status, role_clients, tenant_admin_client, tenant, admin_user):
    key, _ = api_key_create(tenant=tenant, name="k", actor=admin_user)
    client = tenant_admin_client if role == "tenant_admin" else role_clients[role]
    r = client.post(reverse("api-key-revoke", args=[key.pk]))
    assert r.status_code in (status if isinstance(status, tuple) else (status,))
    key.refresh_from_db()
    assert key.is_revoked == (status == 200)


@pytest.mark.parametrize(
    "role,status", [("admin", 201), ("auditor", 403), ("member", 403), ("outsider", 403), ("anon", DENIED)]
)
def test_price_create_by_role(role, status, role_clients):
    from tests.deployments.factories import ModelRouteFactory

    ModelRouteFactory(public_name="sim-llama")
    r = role_clients[role].post(
        reverse("api-price-list"),
        {"public_model": "sim-llama", "input_per_million": "0.2", "output_per_million": "0.6"},
        content_type="application/json",
    )
    assert r.status_code in (status if isinstance(status, tuple) else (status,))
    assert Price.objects.exists() == (status == 201)


def test_price_create_rejects_negative(admin_client):
    r = admin_client.post(
        reverse("api-price-list"),
        {"public_model": "m", "input_per_million": "-1", "output_per_million": "1"},
        content_type="application/json",
    )
    assert r.status_code == 400


@pytest.mark.parametrize(
    "role,get_status,put_status",
    [
        ("admin", 200, 200),
        ("auditor", 200, 403),
        ("member", 200, 403),
        ("outsider", 404, 403),
        ("anon", DENIED, DENIED),
    ],
)
def test_budget_and_limits_by_role(role, get_status, put_status, role_clients, tenant):
    budget_set(actor="system:test", tenant=tenant, amount_usd=5)
    c = role_clients[role]

    def ok(r, s):
        return r.status_code in (s if isinstance(s, tuple) else (s,))

    assert ok(c.get(reverse("api-budget-detail", args=[tenant.slug])), get_status)
    assert ok(c.get(reverse("api-limits-detail", args=[tenant.slug])), get_status)
    r = c.put(
        reverse("api-budget-detail", args=[tenant.slug]),
        {"amount_usd": "50", "period": "weekly", "soft_threshold_percents": [80], "hard_cap_percent": 120},
        content_type="application/json",
    )
    assert ok(r, put_status)
    r = c.put(
        reverse("api-limits-detail", args=[tenant.slug]),
        {"rpm_limit": 5, "tpm_limit": 500, "max_input_tokens": 100, "max_output_tokens": 50},
        content_type="application/json",
    )
    assert ok(r, put_status)
    b = Budget.objects.get(tenant=tenant)
    if role == "admin":
        assert b.period == "weekly" and b.hard_cap_percent == 120 and b.soft_threshold_percents == [80]
        assert TenantLimits.objects.get(tenant=tenant).tpm_limit == 500
    else:
        assert b.amount_usd == 5 and not TenantLimits.objects.exists()


def test_a_limits_put_missing_a_field_is_a_400_naming_it_and_changes_nothing(admin_client, tenant):
    """The API fuzz found a 500 here: an empty PUT reached the service without its four limits."""
    url = reverse("api-limits-detail", args=[tenant.slug])
    r = admin_client.put(url, {}, content_type="application/json")
    assert r.status_code == 400
    assert set(r.json()) == {"rpm_limit", "tpm_limit", "max_input_tokens", "max_output_tokens"}
    r = admin_client.put(url, {"rpm_limit": 5}, content_type="application/json")
    assert r.status_code == 400 and "rpm_limit" not in r.json()
    assert not TenantLimits.objects.exists()


def test_usage_api_is_tenant_scoped_and_filterable(role_clients, tenant, other_tenant):
    make_event(tenant, model="a")
    make_event(tenant, model="b", status="error")
    make_event(other_tenant, model="c")
    counts = {
        r: role_clients[r].get(reverse("api-usage-list")).json()["count"]
        for r in ("admin", "auditor", "member", "outsider")
    }
    assert counts == {"admin": 3, "auditor": 3, "member": 2, "outsider": 1}
    member = role_clients["member"]
    assert member.get(reverse("api-usage-list"), {"status": "error"}).json()["count"] == 1
    assert member.get(reverse("api-usage-list"), {"tenant": other_tenant.slug}).json()["count"] == 0
    assert member.get(reverse("api-usage-list"), {"status": "bogus"}).status_code == 400


@pytest.mark.parametrize(
    "role,status", [("admin", 204), ("auditor", 403), ("member", 403), ("outsider", 403), ("anon", DENIED)]
)
def test_budget_delete_by_role(role, status, role_clients, tenant):
    budget_set(actor="system:test", tenant=tenant, amount_usd=5)
    r = role_clients[role].delete(reverse("api-budget-detail", args=[tenant.slug]))
    assert r.status_code in (status if isinstance(status, tuple) else (status,))
    assert Budget.objects.filter(tenant=tenant).exists() == (role != "admin")
