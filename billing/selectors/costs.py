"""Cost reads for pages and exports. Everything here reads the rollups, never raw usage events."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db.models import F, QuerySet, Sum
from django.db.models.functions import TruncMonth, TruncWeek
from django.utils import timezone

from billing.models import NANOS_PER_USD, ApiKey, Budget, RollupCursor, Tenant, UsageRollup
from billing.selectors.spend import PeriodSpend, period_spend
from billing.sketches import sketch_merge, sketch_quantiles

BUCKETS = ("day", "week", "month")


def _usd(nanos: int | None) -> Decimal:
    return Decimal(nanos or 0) / NANOS_PER_USD


def daily_rollups(
    *, tenant_id: int | None, since: dt.datetime, until: dt.datetime, tenant_ids: set[int] | None = None
) -> QuerySet[UsageRollup]:
    """Daily rollup rows whose day starts in [since, until); ``tenant_id=None`` means every tenant."""
    qs = UsageRollup.objects.filter(
        granularity=UsageRollup.Granularity.DAY, bucket_start__gte=since, bucket_start__lt=until
    )
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    return qs


def cost_series(
    *, tenant_id: int | None, since: dt.datetime, until: dt.datetime, bucket: str = "day"
) -> list[dict]:
    """Spend, tokens and requests per day, week or month (UTC), oldest first."""
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {BUCKETS}")
    qs = daily_rollups(tenant_id=tenant_id, since=since, until=until)
    if bucket == "week":
        qs = qs.annotate(b=TruncWeek("bucket_start", tzinfo=dt.UTC))
    elif bucket == "month":
        qs = qs.annotate(b=TruncMonth("bucket_start", tzinfo=dt.UTC))
    else:
        qs = qs.annotate(b=F("bucket_start"))
    rows = (
        qs.values("b")
        .annotate(
            cost=Sum("cost_nanos"),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            requests=Sum("requests"),
            errors=Sum("errors"),
        )
        .order_by("b")
    )
    return [
        {
            "bucket": r["b"],
            "cost_usd": _usd(r["cost"]),
            "prompt_tokens": r["prompt"] or 0,
            "completion_tokens": r["completion"] or 0,
            "requests": r["requests"] or 0,
            "errors": r["errors"] or 0,
        }
        for r in rows
    ]


def cost_breakdown(*, tenant_id: int | None, since: dt.datetime, until: dt.datetime, by: str) -> list[dict]:
    """Spend and tokens by ``model``, ``key``, ``tenant`` or traffic ``class`` (largest spend first);
    keys named by their prefix."""
    field = {"model": "public_model", "key": "api_key_id", "tenant": "tenant_id", "class": "traffic_class"}[
        by
    ]
    rows = (
        daily_rollups(tenant_id=tenant_id, since=since, until=until)
        .values(field)
        .annotate(
            cost=Sum("cost_nanos"),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            requests=Sum("requests"),
            errors=Sum("errors"),
        )
        .order_by("-cost", field)
    )
    names: dict = {}
    if by == "key":
        ids = [r[field] for r in rows if r[field]]
        names = {k.pk: f"{k.name} ({k.prefix}…)" for k in ApiKey.objects.filter(pk__in=ids)}
        names[0] = "(no key)"
    elif by == "tenant":
        names = dict(Tenant.objects.filter(pk__in=[r[field] for r in rows]).values_list("pk", "name"))
    out = []
    for r in rows:
        label = r[field] if by in ("model", "class") else names.get(r[field], f"#{r[field]} (deleted)")
        out.append(
            {
                "label": label,
                "id": r[field],
                "cost_usd": _usd(r["cost"]),
                "prompt_tokens": r["prompt"] or 0,
                "completion_tokens": r["completion"] or 0,
                "requests": r["requests"] or 0,
                "errors": r["errors"] or 0,
            }
        )
    return out


def latency_percentiles(*, tenant_id: int | None, since: dt.datetime, until: dt.datetime) -> dict:
    """TTFT and TPOT p50/p95/p99 (ms) over the range, from the merged daily sketches."""
    rows = daily_rollups(tenant_id=tenant_id, since=since, until=until).values_list(
        "ttft_sketch", "tpot_sketch"
    )
    rows = list(rows)
    ttft = sketch_merge(r[0] for r in rows)
    tpot = sketch_merge(r[1] for r in rows)
    return {
        "ttft": sketch_quantiles(ttft),
        "tpot": sketch_quantiles(tpot),
        "ttft_count": int(ttft.count) if ttft else 0,
        "tpot_count": int(tpot.count) if tpot else 0,
    }


def spend_forecast(
    *,
    spent_nanos: int,
    cap_nanos: int | None,
    period_start: dt.datetime,
    period_end: dt.datetime,
    at: dt.datetime,
) -> tuple[int, dt.datetime | None]:
    """End-of-period spend at the period's average burn rate, and when that rate reaches the cap.

    The cap date is None when nothing burns, there is no cap, the cap is already passed (the page
    says so) or the date lies past the period. It is compared in seconds before any date is built:
    a large cap over a tiny spend puts it centuries out, past ``datetime.max``.
    """
    elapsed = max((at - period_start).total_seconds(), 1.0)
    length = (period_end - period_start).total_seconds()
    rate = spent_nanos / elapsed  # nanos per second
    forecast = int(rate * length)
    if rate <= 0 or not cap_nanos or spent_nanos >= cap_nanos:
        return forecast, None
    offset_s = cap_nanos / rate
    if offset_s >= length:
        return forecast, None
    return forecast, period_start + dt.timedelta(seconds=offset_s)


def budget_burndown(*, tenant: Tenant, at: dt.datetime | None = None) -> dict | None:
    """Cumulative spend per day of the current budget period, with a linear end-of-period forecast.

    Forecast = spend so far ÷ elapsed time × period length (the period's average burn rate, so a
    quiet first day does not hide a busy week). The cap date is when that rate reaches the hard cap
    (or the amount when there is no cap); None when the rate is zero or the date lies past the period.
    """
    try:
        budget = tenant.budget
    except Budget.DoesNotExist:
        return None
    at = at or timezone.now()
    spend = period_spend(tenant_id=tenant.pk, period=budget.period, at=at)
    key, start, end = spend.period_key, spend.start, spend.end
    cap = budget.hard_cap_nanos if budget.hard_cap_nanos is not None else budget.amount_nanos
    days = list(
        daily_rollups(tenant_id=tenant.pk, since=start, until=end)
        .values("bucket_start")
        .annotate(cost=Sum("cost_nanos"))
        .order_by("bucket_start")
    )
    cumulative, running = [], 0
    for d in days:
        running += d["cost"] or 0
        cumulative.append({"day": d["bucket_start"], "spent_usd": _usd(running)})
    # The curve comes from the daily rollups, which lag; the spend not yet in them (still in the
    # events or only in the gateways' counters) is put on today, so the curve ends at the spend.
    spent = spend.spent_nanos
    if spent > running:
        today = at.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        if cumulative and cumulative[-1]["day"] == today:
            cumulative[-1]["spent_usd"] = _usd(spent)
        else:
            cumulative.append({"day": today, "spent_usd": _usd(spent)})
    forecast, cap_at = spend_forecast(
        spent_nanos=spent, cap_nanos=cap, period_start=start, period_end=end, at=at
    )
    rate = spent / max((at - start).total_seconds(), 1.0)  # nanos per second, as the forecast's
    burndown = {
        "budget": budget,
        "period_key": key,
        "period_start": start,
        "period_end": end,
        "amount_usd": budget.amount_usd,
        "cap_usd": _usd(cap),
        "spent_usd": _usd(spent),
        "forecast_usd": _usd(forecast),
        "cap_at": cap_at,
        "over_cap": bool(cap) and spent >= cap,
        "forecast_over": bool(cap) and forecast > cap,
        "days": cumulative,
        "formula": "forecast = spend so far ÷ time elapsed in the period × period length",
    }
    return _as_the_gateway_sees_it(burndown, spend=spend, at=at, rate=rate)


def _as_the_gateway_sees_it(burndown: dict, *, spend: PeriodSpend, at: dt.datetime, rate: float) -> dict:
    """Make the cap figures agree with the gateway's refusals.

    The gateway refuses a request once ``spent + held + its worst case`` passes the hard cap, so
    the cap time comes from the gateway's counters: when it has refused, the cap was reached then
    (a past time, in ``refusing_since``); otherwise it is when the room left,
    ``cap - spent - held``, runs out at the period's burn rate.
    """
    budget = burndown["budget"]
    cap = budget.hard_cap_nanos
    gw = spend.gateway
    burndown.update(refusing_since=None, held_usd=Decimal(0), room_usd=None)
    if cap is None or gw is None:
        return burndown
    burndown["held_usd"] = _usd(gw.held_nanos)
    room = max(0, cap - spend.spent_nanos - gw.held_nanos)
    burndown["room_usd"] = _usd(room)
    if gw.refused_at is not None:
        burndown.update(refusing_since=gw.refused_at, cap_at=None, over_cap=True)
    elif room == 0:
        burndown.update(cap_at=None, over_cap=True)
    elif rate > 0:
        seconds = room / rate
        left = (burndown["period_end"] - at).total_seconds()
        burndown["cap_at"] = at + dt.timedelta(seconds=seconds) if seconds < left else None
    return burndown


def rollup_freshness() -> dict:
    """How far the rollup has got: its high-water mark and when it last moved."""
    row = RollupCursor.objects.filter(name="usage").first()
    return {"last_event_id": row.last_event_id if row else 0, "updated_at": row.updated_at if row else None}


def billed_by_deployment_day(*, since: dt.datetime, until: dt.datetime) -> dict[tuple[int, dt.datetime], int]:
    """Nano-dollars billed to tenants per (deployment id, UTC day), from the daily rollups."""
    rows = (
        daily_rollups(tenant_id=None, since=since, until=until)
        .exclude(deployment_id=0)
        .values("deployment_id", "bucket_start")
        .annotate(cost=Sum("cost_nanos"))
    )
    return {(r["deployment_id"], r["bucket_start"]): int(r["cost"] or 0) for r in rows}


def budgets_at_risk(*, at: dt.datetime | None = None) -> list[dict]:
    """Tenants whose budget is past its cap or forecast to pass it this period (worst first)."""
    out = []
    for budget in Budget.objects.select_related("tenant"):
        b = budget_burndown(tenant=budget.tenant, at=at)
        if b and (b["over_cap"] or b["forecast_over"]):
            out.append({**b, "tenant": budget.tenant})
    return sorted(out, key=lambda b: -(b["forecast_usd"] / b["cap_usd"] if b["cap_usd"] else 0))
