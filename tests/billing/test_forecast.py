"""The budget forecast for any budget and spend: it never raises, its cap date is None or inside the
period, and more spend never moves the forecast down or the cap date later.

Found on a $3,000 monthly budget with $0.00072 spent: the cap date lay centuries out and building it
raised ``OverflowError`` (a 500 on the home page and the tenant's cost page).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from fractions import Fraction

import pytest
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.selectors.costs import budget_burndown, spend_forecast
from billing.selectors.spend import period_bounds
from billing.services.budgets import budget_set
from billing.services.rollups import usage_rollup_run
from tests.billing.test_rollups import make_event

BIGINT = 2**63 - 1  # the rollups' cost columns are PostgreSQL bigints
moments = st.datetimes(
    min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(9998, 1, 1), timezones=st.just(dt.UTC)
)
periods = st.sampled_from(["daily", "weekly", "monthly"])
nanos = st.integers(min_value=0, max_value=BIGINT)
caps = st.one_of(st.none(), st.integers(min_value=0, max_value=BIGINT))


def _forecast(spent: int, cap: int | None, period: str, at: dt.datetime):
    _, start, end = period_bounds(period=period, at=at)
    return spend_forecast(spent_nanos=spent, cap_nanos=cap, period_start=start, period_end=end, at=at), (
        start,
        end,
    )


@settings(max_examples=400, deadline=None)
@given(spent=nanos, cap=caps, period=periods, at=moments)
def test_forecast_never_raises_and_the_cap_date_lies_in_the_period(spent, cap, period, at):
    (forecast, cap_at), (start, end) = _forecast(spent, cap, period, at)
    assert forecast >= 0
    if cap_at is not None:
        assert start <= cap_at < end
        assert cap and spent < cap  # a passed cap is reported by ``over_cap``, not by a date
        # The same date in exact arithmetic: spend at the period's average rate reaches the cap then.
        elapsed = Fraction(max((at - start).total_seconds(), 1.0))
        exact_offset = Fraction(cap) * elapsed / Fraction(spent)
        assert abs(Fraction((cap_at - start).total_seconds()) - exact_offset) < 1


@settings(max_examples=300, deadline=None)
@given(spent=nanos, more=nanos, cap=caps, period=periods, at=moments)
def test_more_spend_never_lowers_the_forecast_or_delays_the_cap_date(spent, more, cap, period, at):
    more_spent = min(spent + more, BIGINT)
    (f1, c1), _ = _forecast(spent, cap, period, at)
    (f2, c2), _ = _forecast(more_spent, cap, period, at)
    assert f2 >= f1
    if c1 is not None and c2 is not None:
        assert c2 <= c1
    if c1 is not None and c2 is None:
        # The date can only vanish because the cap was reached.
        assert more_spent >= cap


@pytest.mark.django_db
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(amount=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("1000000000"), places=2), cost=nanos)
def test_burndown_for_any_budget_and_spend(tenant, admin_user, amount, cost):
    budget_set(
        tenant=tenant, amount_usd=amount, period="monthly", soft_threshold_percents=[], actor=admin_user
    )
    now = timezone.now()
    _, start, _ = period_bounds(period="monthly", at=now)
    make_event(tenant, at=start + dt.timedelta(seconds=1), cost=min(cost, 10**15))
    usage_rollup_run(lag_seconds=0)
    b = budget_burndown(tenant=tenant, at=now)
    assert b["cap_at"] is None or b["period_start"] <= b["cap_at"] < b["period_end"]


@pytest.mark.django_db
def test_large_budget_with_tiny_spend_renders_home_and_cost_pages(admin_client, tenant, admin_user):
    budget_set(
        tenant=tenant,
        amount_usd=Decimal("3000"),
        period="monthly",
        soft_threshold_percents=[],
        actor=admin_user,
    )
    _, start, _ = period_bounds(period="monthly", at=timezone.now())
    make_event(tenant, at=start + dt.timedelta(seconds=1), cost=720_000)  # $0.00072
    usage_rollup_run(lag_seconds=0)
    cost_page = admin_client.get(reverse("billing:tenant_cost", args=[tenant.slug]))
    assert cost_page.status_code == 200
    assert "not in this period" in cost_page.content.decode()
    assert admin_client.get(reverse("home")).status_code == 200
