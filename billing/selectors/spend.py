"""What a tenant has spent in a budget period: the one read that pages, budgets and alerts share.

Spend lives in two places that each run ahead of the other in turn:

- **PostgreSQL** holds every metered request (``billing_usage_event``), rolled up into daily rows
  by the rollup task up to a high-water mark. Settled spend is the daily rollups of the period plus
  the events past that mark, read in one SQL statement, so one snapshot sees both and a rollup
  batch that commits meanwhile is counted exactly once. A month of a busy tenant costs a few dozen
  rollup rows and a minute of events, not millions of rows.
- **The gateways' counters** in Redis (``spent``, ``held``, ``refused_at``) are what the gateway
  admits against. They include requests settled but not yet shipped to PostgreSQL and the holds of
  requests still running, and they are empty after Redis loses its data.

Both are lower bounds of what was really spent, so the period's spend is the larger of the two.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import connection

from snapshot.contract import budget_hash_key, period_key

log = logging.getLogger(__name__)

_SETTLED_SQL = """
SELECT
  (SELECT COALESCE(SUM(cost_nanos), 0) FROM billing_usage_rollup
    WHERE granularity = 'day' AND tenant_id = %(tenant)s
      AND bucket_start >= %(since)s AND bucket_start < %(until)s)
  +
  (SELECT COALESCE(SUM(cost_nanos), 0) FROM billing_usage_event
    WHERE tenant_id = %(tenant)s AND started_at >= %(since)s AND started_at < %(until)s
      AND id > COALESCE((SELECT last_event_id FROM billing_rollup_cursor WHERE name = 'usage'), 0))
"""


def period_bounds(*, period: str, at: dt.datetime) -> tuple[str, dt.datetime, dt.datetime]:
    """(period key, start, end) of the budget period containing ``at``; same rule as the gateway.

    Every period starts and ends at a UTC midnight, so it is a whole number of daily rollup buckets.
    """
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


def settled_spend_nanos(*, tenant_id: int, since: dt.datetime, until: dt.datetime) -> int:
    """Metered spend in [since, until) from PostgreSQL; both bounds must be UTC midnights."""
    for bound in (since, until):
        if bound.astimezone(dt.UTC).timetz() != dt.time(0, tzinfo=dt.UTC):
            raise ValueError(f"spend is read in whole UTC days; {bound.isoformat()} is not a midnight")
    with connection.cursor() as cur:
        cur.execute(_SETTLED_SQL, {"tenant": tenant_id, "since": since, "until": until})
        return int(cur.fetchone()[0])


@dataclass(frozen=True, slots=True)
class GatewayBudget:
    """What the gateways' shared counters say about a tenant's period (nano-dollars)."""

    spent_nanos: int
    held_nanos: int
    refused_at: dt.datetime | None  # first refusal at the hard cap this period, None if none yet


def budget_gateway_state(*, tenant_id: int, period_key: str) -> GatewayBudget | None:
    """The gateways' own view of a period: spend settled, holds of requests in flight, first refusal.

    This is what the gateway admits against (``spent + held + worst case <= cap``), ahead of
    PostgreSQL by the spool's shipping lag and counting requests still running. None when the
    gateways have not counted this period or Redis cannot be reached.
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


@dataclass(frozen=True, slots=True)
class PeriodSpend:
    """A tenant's spend in one budget period, from PostgreSQL and from the gateways' counters."""

    period_key: str
    start: dt.datetime
    end: dt.datetime
    settled_nanos: int  # metered in PostgreSQL
    gateway: GatewayBudget | None  # None: not asked, not counted yet, or Redis unreachable

    @property
    def spent_nanos(self) -> int:
        """The period's spend: the larger of the two lower bounds (see the module's docstring)."""
        return max(self.settled_nanos, self.gateway.spent_nanos if self.gateway else 0)

    @property
    def held_nanos(self) -> int:
        """Held for requests still running (what they may cost at most, not yet spent)."""
        return self.gateway.held_nanos if self.gateway else 0

    @property
    def refused_at(self) -> dt.datetime | None:
        return self.gateway.refused_at if self.gateway else None


def period_spend(*, tenant_id: int, period: str, at: dt.datetime, with_gateway: bool = True) -> PeriodSpend:
    """What ``tenant_id`` has spent in the ``period`` ("daily", "weekly", "monthly") containing ``at``.

    ``with_gateway=False`` reads PostgreSQL only: for the snapshot that seeds the gateways' own
    counters, which must not be fed back what they already counted.
    """
    key, start, end = period_bounds(period=period, at=at)
    return PeriodSpend(
        period_key=key,
        start=start,
        end=end,
        settled_nanos=settled_spend_nanos(tenant_id=tenant_id, since=start, until=end),
        gateway=budget_gateway_state(tenant_id=tenant_id, period_key=key) if with_gateway else None,
    )
