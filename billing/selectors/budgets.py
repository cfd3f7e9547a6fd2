"""A budget's status for the current period."""

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
from billing.selectors.spend import period_spend


def budget_status(*, tenant: Tenant, at: dt.datetime | None = None) -> dict | None:
    """The tenant's budget for the current period: amount, spent, left (USD) and the period."""
    try:
        budget = tenant.budget
    except Budget.DoesNotExist:
        return None
    spend = period_spend(tenant_id=tenant.pk, period=budget.period, at=at or timezone.now())
    spent, amount = spend.spent_nanos, budget.amount_nanos
    return {
        "budget": budget,
        "period_key": spend.period_key,
        "period_start": spend.start,
        "period_end": spend.end,
        "amount_usd": budget.amount_usd,
        "spent_usd": Decimal(spent) / NANOS_PER_USD,
        "left_usd": Decimal(max(0, amount - spent)) / NANOS_PER_USD,
        "used_percent": (spent * 100 / amount) if amount else None,
        "hard_cap_usd": None
        if budget.hard_cap_nanos is None
        else Decimal(budget.hard_cap_nanos) / NANOS_PER_USD,
        "held_usd": Decimal(spend.held_nanos) / NANOS_PER_USD,
        "alerts": list(
            BudgetAlert.objects.filter(tenant=tenant, period_key=spend.period_key).order_by("percent")
        ),
    }
