"""The console at its edges (issue 25): forms that refuse absurd input with a form error, saves that
change nothing and record nothing, and figures that mean what they say."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from billing.models import ApiKey, Budget

pytestmark = pytest.mark.django_db


# --- API keys: a past expiry is a form error on the styled page ------------------------------------


def test_key_form_answers_a_past_expiry_with_a_form_error_on_the_full_page(tenant_admin_client, tenant):
    past = (timezone.now() - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    r = tenant_admin_client.post(
        reverse("billing:key_create"),
        {"tenant": tenant.pk, "name": "late", "expires_at": past, "rpm_limit": 0, "tpm_limit": 0},
    )
    assert r.status_code == 400
    html = r.content.decode()
    assert "<nav" in html and "bootstrap.min.css" in html  # the whole page, not a bare fragment
    assert "The expiry must be in the future" in html
    assert not ApiKey.objects.filter(name="late").exists()


def test_key_form_date_picker_offers_no_past_minute(tenant_admin_client):
    html = tenant_admin_client.get(reverse("billing:key_list")).content.decode()
    today = timezone.now().strftime("%Y-%m-%d")
    assert f'min="{today}T' in html


# --- budgets: a save that changes nothing records nothing -------------------------------------------


BUDGET_FORM = {
    "amount_usd": "25.00",
    "period": "monthly",
    "soft_threshold_percents": "50,80,100",
    "hard_cap_percent": "100",
    "rpm_limit": "0",
    "tpm_limit": "0",
    "max_input_tokens": "0",
    "max_output_tokens": "0",
}


@pytest.mark.django_db(transaction=True)
def test_a_budget_save_that_changes_nothing_records_no_event(admin_client, tenant):
    # transaction=True: the raw-write trigger fires at COMMIT, which a plain test never reaches.
    url = reverse("billing:budget_edit", args=[tenant.slug])
    assert admin_client.post(url, BUDGET_FORM).status_code == 302
    first = Budget.objects.get(tenant=tenant).updated_at
    seq = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first()
    assert admin_client.post(url, BUDGET_FORM).status_code == 302
    assert list(AuditEvent.objects.filter(seq__gt=seq).values_list("action", "actor")) == []
    assert Budget.objects.get(tenant=tenant).updated_at == first
    # A real change is still recorded, once, by the service.
    assert admin_client.post(url, {**BUDGET_FORM, "amount_usd": "30"}).status_code == 302
    assert list(AuditEvent.objects.filter(seq__gt=seq).values_list("action", flat=True)) == ["budget.update"]
    assert Budget.objects.get(tenant=tenant).amount_usd == Decimal("30")


# --- latency: TPOT is undefined for non-streamed answers -------------------------------------------


def test_non_streamed_requests_count_in_ttft_but_not_in_tpot(tenant):
    from billing.selectors.costs import latency_percentiles
    from billing.services.rollups import usage_rollup_run
    from tests.billing.test_rollups import make_event

    at = timezone.now().replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=2)
    streamed = [make_event(tenant, at=at, ttft=200.0, tpot=30.0) for _ in range(5)]
    # What older gateways wrote for a unary answer: the whole body arrives at once, "TPOT" ~ 0.
    unary = [make_event(tenant, at=at, ttft=900.0, tpot=t) for t in (0.0, 0.01, 0.02, 0.0, 0.03)]
    type(streamed[0]).objects.filter(pk__in=[e.pk for e in streamed]).update(stream=True)
    assert not any(e.stream for e in unary)
    usage_rollup_run(lag_seconds=0)
    p = latency_percentiles(
        tenant_id=tenant.pk, since=at - dt.timedelta(days=1), until=at + dt.timedelta(days=1)
    )
    assert p["tpot_count"] == 5 and p["ttft_count"] == 10
    assert p["tpot"]["p50"] == pytest.approx(30.0, rel=0.02)  # not dragged to ~0 by the unary ones
    assert p["ttft"]["p95"] == pytest.approx(900.0, rel=0.02)


# --- bidirectional control characters in names ------------------------------------------------------

RLO = "\u202e"


def test_a_tenant_name_with_a_right_to_left_override_is_a_form_error(admin_client):
    r = admin_client.post(reverse("billing:tenant_create"), {"name": f"Acme {RLO}hcraeS", "is_active": "on"})
    assert r.status_code == 400
    assert "direction-control characters (U+202E RIGHT-TO-LEFT OVERRIDE)" in r.content.decode()
    assert RLO not in r.content.decode()  # the page echoing the input does not render it reversed either
    from billing.models import Tenant

    assert not Tenant.objects.filter(name__contains=RLO).exists()


@pytest.mark.parametrize("char", ["\u202e", "\u202d", "\u2067", "\u200f", "\u061c"])
def test_the_api_refuses_bidi_controls_in_tenant_and_key_names(admin_client, tenant, char):
    r = admin_client.post(
        "/api/billing/tenants/", {"name": f"Glo{char}bex", "slug": "globex2"}, content_type="application/json"
    )
    assert r.status_code == 400 and "name" in r.json()
    r = admin_client.patch(
        f"/api/billing/tenants/{tenant.slug}/", {"name": f"Acme{char}"}, content_type="application/json"
    )
    assert r.status_code == 400
    tenant.refresh_from_db()
    assert tenant.name == "Acme Search"
    r = admin_client.post(
        reverse("api-key-list"),
        {"tenant": tenant.slug, "name": f"app{char}"},
        content_type="application/json",
    )
    assert r.status_code == 400 and not ApiKey.objects.exists()


def test_an_old_row_with_a_bidi_override_renders_in_its_stored_order(admin_client, member_client, tenant):
    from billing.models import Tenant

    # Stored before the check (or by SQL): the pages must not show it reversed.
    Tenant.objects.filter(pk=tenant.pk).update(name=f"Acme {RLO}hcraeS")
    for client, url in [
        (admin_client, reverse("billing:tenant_list")),
        (admin_client, reverse("billing:budget_list")),
        (member_client, reverse("billing:tenant_cost", args=[tenant.slug])),
        (member_client, reverse("billing:tenant_detail", args=[tenant.slug])),
    ]:
        html = client.get(url).content.decode()
        assert "Acme hcraeS" in html, url
        assert not any(c in html for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"), url
