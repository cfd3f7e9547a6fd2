"""A tenant's cost page and its exports: roles, figures from the rollups, burn-down forecast, FOCUS."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.selectors.costs import budget_burndown
from billing.services.budgets import budget_set
from billing.services.rollups import usage_rollup_run
from tests.billing.test_rollups import make_event

pytestmark = pytest.mark.django_db

TODAY = timezone.now().astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture
def usage(tenant, other_tenant):
    for d in range(5):
        make_event(
            tenant,
            at=TODAY - dt.timedelta(days=d, hours=-1),
            cost=2_000_000_000,
            model="sim-llama",
            ttft=900.0 if d == 0 else 100.0,
        )
    make_event(
        tenant, at=TODAY - dt.timedelta(days=1, hours=-2), cost=500_000_000, model="sim-qwen", ttft=900.0
    )
    make_event(other_tenant, at=TODAY, cost=123_456_789_000, model="secret-model")
    usage_rollup_run(lag_seconds=0)


def url(tenant, **params):
    q = "&".join(f"{k}={v}" for k, v in params.items())
    return reverse("billing:tenant_cost", args=[tenant.slug]) + (f"?{q}" if q else "")


@pytest.mark.parametrize(
    "role,status", [("admin", 200), ("auditor", 200), ("member", 200), ("outsider", 404), ("anon", 302)]
)
def test_cost_page_by_role(role_clients, norole_client, tenant, usage, role, status):
    for fmt in ("", "csv", "focus"):
        r = role_clients[role].get(url(tenant, **({"format": fmt} if fmt else {})))
        assert r.status_code == status, (role, fmt)
    assert norole_client.get(url(tenant)).status_code == 403


def test_cost_page_shows_spend_by_model_and_key_and_latency(member_client, tenant, usage):
    html = member_client.get(url(tenant)).content.decode()
    assert "$10.5000" in html  # 5 × $2 + $0.50
    assert "sim-qwen" in html and "sim-llama" in html
    assert "secret-model" not in html and "123.45" not in html  # another tenant's usage never shows
    assert 'id="cost-data"' in html and "<script>" not in html.replace('<script type="application/json"', "")
    p95 = float(re.search(r'id="ttft-p95">([0-9.]+) ms<', html).group(1))
    assert p95 == pytest.approx(900.0, rel=0.02)  # 2 of 6 requests were slow: p95 is theirs, not an average


def test_cost_page_week_and_month_buckets(member_client, tenant, usage):
    for bucket in ("week", "month"):
        r = member_client.get(url(tenant, bucket=bucket))
        assert r.status_code == 200
        assert "$10.5000" in r.content.decode()


def test_bad_range_is_a_clear_error(member_client, tenant, usage):
    r = member_client.get(url(tenant, since="2026-11-10", until="2026-11-01"))
    assert r.status_code == 400
    assert "end date must be after the start date" in r.content.decode()
    assert member_client.get(url(tenant, bucket="year")).status_code == 400


def test_csv_export_sums_to_the_page_total(member_client, tenant, usage):
    r = member_client.get(url(tenant, format="csv"))
    rows = list(csv.DictReader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert sum(Decimal(row["cost_usd"]) for row in rows) == Decimal("10.5")
    assert sum(int(row["requests"]) for row in rows) == 6


def test_focus_export_has_the_tenant_only(member_client, tenant, usage):
    """The export's conformance to FOCUS is tests/billing/test_focus_conformance.py; this is its scope."""
    r = member_client.get(url(tenant, format="focus"))
    rows = list(csv.DictReader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert {row["SubAccountId"] for row in rows} == {"acme"}
    assert sum(Decimal(row["BilledCost"]) for row in rows) == Decimal("10.5")
    assert all(row["BillingCurrency"] == "USD" for row in rows)
    assert all(row["BilledCost"] == row["EffectiveCost"] == row["ListCost"] for row in rows)
    first = rows[0]
    start = dt.datetime.fromisoformat(first["ChargePeriodStart"])
    assert dt.datetime.fromisoformat(first["ChargePeriodEnd"]) - start == dt.timedelta(days=1)
    assert dt.datetime.fromisoformat(first["BillingPeriodStart"]).day == 1
    assert int(first["ConsumedQuantity"]) == 10 and first["SkuMeter"] == "Input Tokens"  # input SKU first


def test_burndown_forecast_and_cap_date(tenant, admin_user):
    budget_set(
        tenant=tenant,
        amount_usd=Decimal("100"),
        period="monthly",
        soft_threshold_percents=[50],
        actor=admin_user,
    )
    at = dt.datetime(2026, 11, 11, 0, 0, tzinfo=dt.UTC)  # 10 days into a 30-day month
    for d in range(10):
        make_event(tenant, at=dt.datetime(2026, 11, 1 + d, 12, tzinfo=dt.UTC), cost=4 * 10**9)  # $4/day
    usage_rollup_run(lag_seconds=0)
    b = budget_burndown(tenant=tenant, at=at)
    assert b["spent_usd"] == Decimal("40")
    assert b["forecast_usd"] == pytest.approx(Decimal("120"), abs=Decimal("0.001"))
    assert b["forecast_over"] and not b["over_cap"]
    # $40 in 10 days → $100 after 25 days: 26 November 00:00.
    assert abs(b["cap_at"] - dt.datetime(2026, 11, 26, tzinfo=dt.UTC)) < dt.timedelta(minutes=1)
    assert [d["spent_usd"] for d in b["days"]][-1] == Decimal("40")


def test_burndown_without_budget_is_none(tenant):
    assert budget_burndown(tenant=tenant) is None
