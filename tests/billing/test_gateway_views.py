"""Console pages of the gateway's billing side, walked through every role."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import ApiKey, Budget, Price, TenantLimits, UsageEvent
from billing.services.budgets import budget_set
from billing.services.keys import api_key_create, hash_api_key
from billing.services.prices import price_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant_admin_client_(tenant_admin_client):
    return tenant_admin_client


def make_event(tenant, *, model="sim-llama", cost=1000, status="ok", key=None, minutes_ago=1):
    now = timezone.now() - dt.timedelta(minutes=minutes_ago)
    return UsageEvent.objects.create(
        event_id=uuid.uuid4(), tenant=tenant, api_key=key, public_model=model, prompt_tokens=10, completion_tokens=5,
        cost_nanos=cost, status=status, http_status=200, started_at=now, finished_at=now, received_at=now,
    )  # fmt: skip


READ_PAGES = ["billing:key_list", "billing:usage", "billing:budget_list", "billing:price_list"]


@pytest.mark.parametrize("page", READ_PAGES)
@pytest.mark.parametrize(
    "role,status", [("admin", 200), ("auditor", 200), ("member", 200), ("outsider", 200), ("anon", 302)]
)
def test_read_pages_by_role(role_clients, page, role, status, norole_client):
    assert role_clients[role].get(reverse(page)).status_code == status
    assert norole_client.get(reverse(page)).status_code == 403


def test_keys_page_shows_only_own_tenants_keys(role_clients, tenant, other_tenant, admin_user):
    mine, _ = api_key_create(tenant=tenant, name="acme-app", actor=admin_user)
    theirs, _ = api_key_create(tenant=other_tenant, name="globex-app", actor=admin_user)
    for role, sees_acme, sees_globex in [
        ("admin", True, True),
        ("auditor", True, True),
        ("member", True, False),
        ("outsider", False, True),
    ]:
        html = role_clients[role].get(reverse("billing:key_list")).content.decode()
        assert ("acme-app" in html) == sees_acme, role
        assert ("globex-app" in html) == sees_globex, role
        assert mine.key_hash not in html and theirs.key_hash not in html


@pytest.mark.parametrize(
    "role,status",
    [("admin", 200), ("tenant_admin", 200), ("auditor", 403), ("member", 403), ("outsider", 403)],
)
def test_key_create_by_role_shows_the_secret_once(role, status, role_clients, tenant_admin_client, tenant):
    client = tenant_admin_client if role == "tenant_admin" else role_clients[role]
    r = client.post(
        reverse("billing:key_create"), {"tenant": tenant.pk, "name": "web", "rpm_limit": 0, "tpm_limit": 0}
    )
    assert r.status_code == status
    if status == 200:
        key = ApiKey.objects.get(name="web")
        secret = r.context["secret"]
        assert secret.startswith(key.prefix) and hash_api_key(secret) == key.key_hash
        assert secret in r.content.decode()
        assert r["Cache-Control"] == "no-store"
        assert secret not in client.get(reverse("billing:key_list")).content.decode()
    else:
        assert not ApiKey.objects.exists()


def test_key_create_anonymous_goes_to_login(anon_client, tenant):
    r = anon_client.post(reverse("billing:key_create"), {"tenant": tenant.pk, "name": "x"})
    assert r.status_code == 302 and not ApiKey.objects.exists()


def test_tenant_admin_cannot_create_keys_for_another_tenant(tenant_admin_client, other_tenant):
    r = tenant_admin_client.post(
        reverse("billing:key_create"),
        {"tenant": other_tenant.pk, "name": "x", "rpm_limit": 0, "tpm_limit": 0},
    )
    assert r.status_code == 400 and not ApiKey.objects.exists()


@pytest.mark.parametrize(
    "role,status",
    [
        ("admin", 302),
        ("tenant_admin", 302),
        ("auditor", 403),
        ("member", 403),
        ("outsider", 404),
        ("anon", 302),
    ],
)
def test_key_revoke_by_role(role, status, role_clients, tenant_admin_client, tenant, admin_user):
    key, _ = api_key_create(tenant=tenant, name="k", actor=admin_user)
    client = tenant_admin_client if role == "tenant_admin" else role_clients[role]
    r = client.post(reverse("billing:key_revoke", args=[key.pk]))
    assert r.status_code == status
    key.refresh_from_db()
    assert key.is_revoked == (role in ("admin", "tenant_admin"))


def test_usage_page_is_tenant_scoped_filterable_and_exports_csv(
    role_clients, tenant, other_tenant, django_assert_max_num_queries
):
    for i in range(60):
        make_event(tenant, model="m-a" if i % 2 else "m-b", cost=1_000_000)
    make_event(other_tenant, model="secret-model", cost=5)
    member = role_clients["member"]
    with django_assert_max_num_queries(12):
        r = member.get(reverse("billing:usage"))
    html = r.content.decode()
    assert "secret-model" not in html and r.context["totals"]["requests"] == 60
    assert r.context["page"].paginator.num_pages == 2
    r = member.get(reverse("billing:usage"), {"model": "m-a"})
    assert r.context["totals"]["requests"] == 30
    assert r.context["totals"]["cost_usd"] == Decimal("0.03")
    csv = b"".join(
        member.get(reverse("billing:usage"), {"format": "csv", "model": "m-b"}).streaming_content
    ).decode()
    assert csv.count("\n") == 31 and "secret-model" not in csv
    r = member.get(reverse("billing:usage"), {"tenant": other_tenant.pk})  # not a choice for them
    assert "secret-model" not in r.content.decode()
    assert role_clients["auditor"].get(reverse("billing:usage")).context["totals"]["requests"] == 61
    assert role_clients["outsider"].get(reverse("billing:usage")).context["totals"]["requests"] == 1
    r = member.get(reverse("billing:usage"), HTTP_HX_REQUEST="true")
    assert [t.name for t in r.templates][0] == "billing/partials/usage_table.html"


def test_usage_page_shows_budget_left(member_client, tenant):
    budget_set(actor="system:test", tenant=tenant, amount_usd=Decimal("10"), soft_threshold_percents=[50])
    make_event(tenant, cost=2_500_000_000)
    r = member_client.get(reverse("billing:usage"))
    b = r.context["budgets"][0]
    assert b["spent_usd"] == Decimal("2.5") and b["left_usd"] == Decimal("7.5")
    assert "$7.5000" in r.content.decode()


@pytest.mark.parametrize(
    "role,status", [("admin", 302), ("auditor", 403), ("member", 403), ("outsider", 403), ("anon", 302)]
)
def test_budget_edit_by_role(role, status, role_clients, tenant):
    url = reverse("billing:budget_edit", args=[tenant.slug])
    data = {
        "amount_usd": "100", "period": "monthly", "soft_threshold_percents": "50, 80", "hard_cap_percent": "100",
        "rpm_limit": 60, "tpm_limit": 10000, "max_input_tokens": 4000, "max_output_tokens": 1000,
    }  # fmt: skip
    assert role_clients[role].get(url).status_code == (200 if role == "admin" else status)
    assert role_clients[role].post(url, data).status_code == status
    if role == "admin":
        assert Budget.objects.get(tenant=tenant).soft_threshold_percents == [50, 80]
        assert TenantLimits.objects.get(tenant=tenant).rpm_limit == 60
    else:
        assert not Budget.objects.exists()


@pytest.mark.parametrize(
    "role,status", [("admin", 302), ("auditor", 403), ("member", 403), ("outsider", 403), ("anon", 302)]
)
def test_price_create_by_role(role, status, role_clients):
    from tests.deployments.factories import ModelRouteFactory

    ModelRouteFactory(public_name="sim-llama")
    data = {"public_model": "sim-llama", "input_per_million": "0.5", "output_per_million": "1.5"}
    assert role_clients[role].post(reverse("billing:price_create"), data).status_code == status
    assert Price.objects.exists() == (role == "admin")


def test_price_lookup_uses_the_version_in_force(admin_user):
    from billing.selectors.prices import price_for

    now = timezone.now()
    # Past versions are history (the services refuse to backdate a new price): seeded as rows.
    Price.objects.create(
        public_model="m",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("2"),
        effective_from=now - dt.timedelta(days=2),
    )
    p2 = Price.objects.create(
        public_model="m",
        input_per_million=Decimal("3"),
        output_per_million=Decimal("4"),
        effective_from=now - dt.timedelta(hours=1),
    )
    price_set(
        public_model="m",
        input_per_million=Decimal("9"),
        output_per_million=Decimal("9"),
        actor=admin_user,
        effective_from=now + dt.timedelta(days=1),
    )
    assert price_for(public_model="m") == p2
    assert price_for(public_model="m", at=now - dt.timedelta(days=1)).input_per_million == Decimal("1")
    assert price_for(public_model="other") is None
