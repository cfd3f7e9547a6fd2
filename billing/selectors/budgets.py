"""Budget periods and a budget's status."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.utils import timezone

from billing.models import (
    NANOS_PER_USD,
    Budget,
    BudgetAlert,
    Tenant,
)
from billing.selectors.usage import tenant_spend_nanos
from gateway.snapshot import period_key


def period_bounds(*, period: str, at: dt.datetime) -> tuple[str, dt.datetime, dt.datetime]:
    """(period key, start, end) of the budget period containing ``at``; same rule as the gateway."""
    key, end_ts = period_key(period, at.timestamp())
    end = dt.datetime.fromtimestamp(end_ts, tz=dt.UTC)
    if period == "daily":
        start = end - dt.timedelta(days=1)
    elif period == "weekly":
        start = end - dt.timedelta(days=7)
    else:
        start = dt.datetime(
            end.year if end.month > 1 else end.year - 1, end.month - 1 or 12, 1, tzinfo=dt.UTC
        )
    return key, start, end


def budget_status(*, tenant: Tenant, at: dt.datetime | None = None) -> dict | None:
    """The tenant's budget for the current period: amount, spent, left (USD) and the period."""
    try:
        budget = tenant.budget
    except Budget.DoesNotExist:
        return None
    at = at or timezone.now()
    key, start, end = period_bounds(period=budget.period, at=at)
    spent = tenant_spend_nanos(tenant_id=tenant.pk, since=start, until=end)
    amount = budget.amount_nanos
    return {
        "budget": budget,
        "period_key": key,
        "period_start": start,
        "period_end": end,
        "amount_usd": budget.amount_usd,
        "spent_usd": Decimal(spent) / NANOS_PER_USD,
        "left_usd": Decimal(max(0, amount - spent)) / NANOS_PER_USD,
        "used_percent": (spent * 100 / amount) if amount else None,
        "hard_cap_usd": None
        if budget.hard_cap_nanos is None
        else Decimal(budget.hard_cap_nanos) / NANOS_PER_USD,
        "alerts": list(BudgetAlert.objects.filter(tenant=tenant, period_key=key).order_by("percent")),
    }
