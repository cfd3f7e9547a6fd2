"""Budget periods and a budget's status."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from decimal import Decimal

import redis
from django.conf import settings
from django.utils import timezone

from billing.models import (
    NANOS_PER_USD,
    Budget,
    BudgetAlert,
    Tenant,
)
from billing.selectors.usage import tenant_spend_nanos
from gateway.limits import budget_hash_key
from gateway.snapshot import period_key

log = logging.getLogger(__name__)


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


@dataclass(frozen=True, slots=True)
class GatewayBudget:
    """What the gateways' shared counters say about a tenant's period (nano-dollars)."""

    spent_nanos: int
    held_nanos: int
    refused_at: dt.datetime | None  # first refusal at the hard cap this period, None if none yet


def budget_gateway_state(*, tenant_id: int, period_key: str) -> GatewayBudget | None:
    """The gateways' own view of a period: spend settled, holds of requests in flight, first refusal.

    This is what the gateway admits against (``spent + held + worst case <= cap``), ahead of the
    rollups by up to a minute and counting requests still running. None when the gateways have not
    counted this period or Redis cannot be reached (the pages then fall back to Postgres).
    """
    url = getattr(settings, "GATEWAY_REDIS_URL", None) or settings.REDIS_URL
    prefix = getattr(settings, "GATEWAY_KEY_PREFIX", "gw:")
    try:
        client = redis.Redis.from_url(url, socket_timeout=2)
        try:
            raw = client.hgetall(budget_hash_key(prefix, tenant_id, period_key))
        finally:
            client.close()
    except redis.RedisError as exc:
        log.warning("cannot read the gateway's budget counters: %s", exc)
        return None
    if not raw:
        return None
    refused = raw.get(b"refused_at")
    return GatewayBudget(
        spent_nanos=int(raw.get(b"spent") or 0),
        held_nanos=max(0, int(raw.get(b"held") or 0)),
        refused_at=dt.datetime.fromtimestamp(int(refused), tz=dt.UTC) if refused else None,
    )
