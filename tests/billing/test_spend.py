"""What a tenant has spent: one selector, exact at every rollup position, shared by pages, budgets and alerts."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
import redis
from django.conf import settings as django_settings
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone

from billing.models import BudgetAlert, UsageEvent
from billing.selectors.budgets import budget_status
from billing.selectors.costs import budget_burndown
from billing.selectors.spend import period_bounds, period_spend, settled_spend_nanos
from billing.services.budgets import budget_alerts_record, budget_set
from billing.services.rollups import usage_rollup_batch, usage_rollup_run
from snapshot.contract import budget_hash_key
from tests.billing.test_rollups import make_event

pytestmark = pytest.mark.django_db(transaction=False)


def _raw_sum(tenant, start, end) -> int:
    total = UsageEvent.objects.filter(tenant=tenant, started_at__gte=start, started_at__lt=end).aggregate(
        s=Sum("cost_nanos")
    )["s"]
    return int(total or 0)


@pytest.mark.parametrize("batch_size", [1, 4, 11])
def test_settled_spend_equals_the_events_at_every_rollup_position(tenant, other_tenant, batch_size):
    """Rollups and the events past their high-water mark never count an event twice or miss one,
    whatever the batch boundaries, with events on both sides of the period's edges and of other tenants."""
    _, start, end = period_bounds(period="daily", at=dt.datetime(2026, 11, 3, 12, tzinfo=dt.UTC))
    times = [
        start - dt.timedelta(microseconds=1),  # the last instant of the day before: not in the period
        start,  # the first instant of the period: in it
        start + dt.timedelta(hours=5, minutes=13),
        start + dt.timedelta(hours=23, minutes=59, seconds=59),
        end,  # the first instant of the next day: not in it
        end + dt.timedelta(hours=2),
    ]
    for i in range(24):
        make_event(tenant, at=times[i % len(times)], cost=1_000 + 7 * i)
        if i % 5 == 0:
            make_event(other_tenant, at=times[i % len(times)], cost=999_999)
    expected = _raw_sum(tenant, start, end)
    assert expected > 0
    positions = 0
    while True:
        assert settled_spend_nanos(tenant_id=tenant.pk, since=start, until=end) == expected
        positions += 1
        if usage_rollup_batch(batch_size=batch_size, lag_seconds=0) == 0:
            break
    assert positions > 2  # the rollup really moved through several positions while we read


def test_settled_spend_is_read_in_whole_utc_days(tenant):
    midnight = dt.datetime(2026, 11, 3, tzinfo=dt.UTC)
    with pytest.raises(ValueError, match="whole UTC days"):
        settled_spend_nanos(tenant_id=tenant.pk, since=midnight + dt.timedelta(hours=1), until=midnight)


def _gateway_counters(tenant, period_key, **fields) -> str:
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    django_settings.GATEWAY_KEY_PREFIX = prefix
    r = redis.Redis.from_url(django_settings.REDIS_URL)
    try:
        r.hset(budget_hash_key(prefix, tenant.pk, period_key), mapping=fields)
    finally:
        r.close()
    return prefix


def test_budget_page_burndown_and_alerts_agree_while_the_rollups_lag(
    settings, admin_user, tenant, member_client
):
    """Before the rollup has run, the budget status, the burndown (and its chart's last point) and the
    threshold alert all report the same spend: they read it from one place."""
    settings.GATEWAY_KEY_PREFIX = f"test-{uuid.uuid4().hex[:8]}:"  # no gateway counters for this tenant
    budget_set(tenant=tenant, amount_usd=Decimal("1.00"), soft_threshold_percents=[50], actor=admin_user)
    now = timezone.now()
    _, start, _ = period_bounds(period="monthly", at=now)
    make_event(
        tenant, at=max(start, now - dt.timedelta(minutes=30)), cost=600_000_000
    )  # $0.60, not rolled up

    status = budget_status(tenant=tenant)
    burndown = budget_burndown(tenant=tenant)
    assert status["spent_usd"] == burndown["spent_usd"] == Decimal("0.6")
    assert burndown["days"][-1]["spent_usd"] == Decimal("0.6")
    assert budget_alerts_record() == 1
    alert = BudgetAlert.objects.get(tenant=tenant, percent=50)
    assert alert.spent_nanos == 600_000_000

    usage_rollup_run(lag_seconds=0)  # once rolled up, the figure does not move
    assert (
        budget_status(tenant=tenant)["spent_usd"]
        == budget_burndown(tenant=tenant)["spent_usd"]
        == Decimal("0.6")
    )
    page = member_client.get(reverse("billing:tenant_cost", args=[tenant.slug]))
    assert page.status_code == 200 and "0.60" in page.content.decode()


def test_gateway_counters_ahead_of_postgres_are_the_spend_everywhere(settings, admin_user, tenant):
    """Requests the gateway settled but has not shipped yet count: every reader takes the larger figure,
    and the holds of requests in flight are shown beside it, never added to it."""
    budget_set(tenant=tenant, amount_usd=Decimal("1.00"), soft_threshold_percents=[80], actor=admin_user)
    now = timezone.now()
    pkey, start, _ = period_bounds(period="monthly", at=now)
    make_event(tenant, at=max(start, now - dt.timedelta(minutes=30)), cost=100_000_000)  # $0.10 in Postgres
    settings.GATEWAY_KEY_PREFIX = _gateway_counters(tenant, pkey, spent=850_000_000, held=20_000_000)

    spend = period_spend(tenant_id=tenant.pk, period="monthly", at=now)
    assert (spend.settled_nanos, spend.spent_nanos, spend.held_nanos) == (
        100_000_000,
        850_000_000,
        20_000_000,
    )
    assert budget_status(tenant=tenant)["spent_usd"] == Decimal("0.85")
    assert budget_status(tenant=tenant)["held_usd"] == Decimal("0.02")
    assert budget_burndown(tenant=tenant)["spent_usd"] == Decimal("0.85")
    assert budget_alerts_record() == 1
    assert BudgetAlert.objects.get(tenant=tenant, percent=80).spent_nanos == 850_000_000

    # The snapshot that seeds the gateways' counters gets PostgreSQL's figure, never their own back.
    seed = period_spend(tenant_id=tenant.pk, period="monthly", at=now, with_gateway=False)
    assert seed.gateway is None and seed.spent_nanos == 100_000_000


def test_postgres_ahead_of_emptied_gateway_counters_and_redis_down(settings, admin_user, tenant):
    """After Redis lost its data (or cannot be reached), spend is what PostgreSQL metered."""
    budget_set(tenant=tenant, amount_usd=Decimal("1.00"), actor=admin_user)
    now = timezone.now()
    pkey, start, _ = period_bounds(period="monthly", at=now)
    make_event(tenant, at=max(start, now - dt.timedelta(minutes=30)), cost=300_000_000)
    settings.GATEWAY_KEY_PREFIX = _gateway_counters(tenant, pkey, spent=5, held=0)
    assert period_spend(tenant_id=tenant.pk, period="monthly", at=now).spent_nanos == 300_000_000

    settings.GATEWAY_REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    spend = period_spend(tenant_id=tenant.pk, period="monthly", at=now)
    assert spend.gateway is None and spend.spent_nanos == 300_000_000
    assert budget_status(tenant=tenant)["spent_usd"] == Decimal("0.3")
