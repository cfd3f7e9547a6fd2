"""Reads for the gateway's console pages, its API and the snapshot: prices, keys, budgets, usage."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from billing.models import ApiKey, Budget, BudgetAlert, Price, Tenant, UsageEvent
from billing.models_gateway import NANOS_PER_USD
from gateway.snapshot import period_key


def price_for(*, public_model: str, at: dt.datetime | None = None) -> Price | None:
    """THE price lookup: the price in force for a public model at a time (latest effective_from ≤ at).

    Every cost the platform computes goes through here (or ``prices_in_force``, which applies the
    same rule to all models), so a later goodput-derived price source only has to change this.
    """
    at = at or timezone.now()
    return (
        Price.objects.filter(public_model=public_model, effective_from__lte=at)
        .order_by("-effective_from")
        .first()
    )


def prices_in_force(*, at: dt.datetime | None = None) -> dict[str, Price]:
    """The price in force for every public model that has one (same rule as ``price_for``)."""
    at = at or timezone.now()
    rows = Price.objects.filter(effective_from__lte=at).order_by("public_model", "-effective_from")
    out: dict[str, Price] = {}
    for p in rows:
        out.setdefault(p.public_model, p)
    return out


def price_list() -> QuerySet[Price]:
    return Price.objects.select_related("created_by").order_by("public_model", "-effective_from")


def api_keys_visible_to(*, user, reads_everything: bool, tenant_ids: set[int]) -> QuerySet[ApiKey]:
    """Keys a user may see: everything for admins/auditors, their tenants' keys otherwise."""
    qs = ApiKey.objects.select_related("tenant", "created_by").order_by("-created_at")
    if reads_everything:
        return qs
    return qs.filter(tenant_id__in=tenant_ids)


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


def tenant_spend_nanos(*, tenant_id: int, since: dt.datetime, until: dt.datetime) -> int:
    """Spend of a tenant between two times, from Postgres (the source of truth)."""
    total = UsageEvent.objects.filter(
        tenant_id=tenant_id, started_at__gte=since, started_at__lt=until
    ).aggregate(s=Sum("cost_nanos"))["s"]
    return int(total or 0)


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


def usage_events(
    *,
    tenant_ids: set[int] | None,
    tenant_id: int | None = None,
    model: str | None = None,
    status: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> QuerySet[UsageEvent]:
    """Usage events filtered; ``tenant_ids=None`` means every tenant (admins and auditors)."""
    qs = UsageEvent.objects.select_related("tenant", "api_key").order_by("-started_at", "-id")
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    if tenant_id:
        qs = qs.filter(tenant_id=tenant_id)
    if model:
        qs = qs.filter(public_model=model)
    if status:
        qs = qs.filter(status=status)
    if since:
        qs = qs.filter(started_at__gte=since)
    if until:
        qs = qs.filter(started_at__lt=until)
    return qs


def usage_totals(*, events: QuerySet[UsageEvent]) -> dict:
    """Requests, tokens and cost of a filtered set of events."""
    agg = events.order_by().aggregate(
        requests=Count("id"),
        errors=Count("id", filter=~Q(status=UsageEvent.Status.OK)),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        cost=Sum("cost_nanos"),
    )
    return {
        "requests": agg["requests"] or 0,
        "errors": agg["errors"] or 0,
        "prompt_tokens": agg["prompt"] or 0,
        "completion_tokens": agg["completion"] or 0,
        "cost_usd": Decimal(agg["cost"] or 0) / NANOS_PER_USD,
    }


def usage_models(*, tenant_ids: set[int] | None) -> list[str]:
    qs = UsageEvent.objects.all()
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    return sorted(set(qs.values_list("public_model", flat=True).distinct()))


def tenants_managed_by(*, user, is_platform_admin: bool) -> QuerySet[Tenant]:
    """Tenants whose keys the user may create and revoke (platform admins: all)."""
    qs = Tenant.objects.filter(is_active=True).order_by("name")
    if is_platform_admin:
        return qs
    return qs.filter(memberships__user=user, memberships__role="admin")


def tenants_readable_by(*, user, reads_everything: bool, tenant_ids: set[int]) -> QuerySet[Tenant]:
    qs = Tenant.objects.order_by("name")
    return qs if reads_everything else qs.filter(pk__in=tenant_ids)
