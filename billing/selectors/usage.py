"""Usage event reads for pages and exports (what a tenant has spent: billing.selectors.spend)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db.models import Count, Q, QuerySet, Sum

from billing.models import (
    NANOS_PER_USD,
    UsageEvent,
)
from snapshot.contract import CLASS_RANK


def usage_events(
    *,
    tenant_ids: set[int] | None,
    tenant_id: int | None = None,
    model: str | None = None,
    status: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    traffic_class: str | None = None,
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
    if traffic_class:
        qs = qs.filter(traffic_class=traffic_class)
    if since:
        qs = qs.filter(started_at__gte=since)
    if until:
        qs = qs.filter(started_at__lt=until)
    return qs


def usage_totals(*, events: QuerySet[UsageEvent]) -> dict:
    """Requests, tokens and cost of a filtered set of events; of them, votes and their samples
    spent and saved (docs/voting.md)."""
    agg = events.order_by().aggregate(
        requests=Count("id"),
        errors=Count("id", filter=~Q(status=UsageEvent.Status.OK)),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        cost=Sum("cost_nanos"),
        votes=Count("id", filter=Q(vote_samples__gt=0)),
        vote_samples=Sum("vote_samples"),
        vote_saved=Sum("vote_samples_saved"),
    )
    spent, saved = agg["vote_samples"] or 0, agg["vote_saved"] or 0
    return {
        "requests": agg["requests"] or 0,
        "errors": agg["errors"] or 0,
        "prompt_tokens": agg["prompt"] or 0,
        "completion_tokens": agg["completion"] or 0,
        "cost_usd": Decimal(agg["cost"] or 0) / NANOS_PER_USD,
        "votes": agg["votes"] or 0,
        "vote_samples": spent,
        "vote_samples_saved": saved,
        # Of the samples the votes could have spent, the share their early stops saved.
        "vote_saved_percent": 100 * saved / (spent + saved) if spent + saved else None,
    }


def vote_samples_spent(*, tenant_ids: list[int], since: dt.datetime) -> dict[int, int]:
    """Voting samples each tenant's requests spent since ``since`` (seeds the gateways' monthly
    counters when Redis lost them)."""
    rows = (
        UsageEvent.objects.filter(tenant_id__in=tenant_ids, started_at__gte=since, vote_samples__gt=0)
        .order_by()
        .values("tenant_id")
        .annotate(samples=Sum("vote_samples"))
    )
    return {r["tenant_id"]: r["samples"] or 0 for r in rows}


def usage_by_class(*, events: QuerySet[UsageEvent]) -> list[dict]:
    """Requests, refusals and cost per traffic class of a filtered set of events, most important
    class first. ``shed``: requests the gateway's admission control refused under load (their
    ``error_type`` starts with ``shed``: ``gateway.admission``)."""
    rows = (
        events.order_by()
        .values("traffic_class")
        .annotate(
            requests=Count("id"),
            shed=Count("id", filter=Q(error_type__startswith="shed")),
            tokens=Sum("completion_tokens"),
            cost=Sum("cost_nanos"),
        )
    )
    out = [
        {
            "traffic_class": r["traffic_class"],
            "requests": r["requests"],
            "shed": r["shed"],
            "completion_tokens": r["tokens"] or 0,
            "cost_usd": Decimal(r["cost"] or 0) / NANOS_PER_USD,
        }
        for r in rows
    ]
    return sorted(out, key=lambda r: CLASS_RANK.get(r["traffic_class"], len(CLASS_RANK)))


def usage_models(*, tenant_ids: set[int] | None) -> list[str]:
    qs = UsageEvent.objects.all()
    if tenant_ids is not None:
        qs = qs.filter(tenant_id__in=tenant_ids)
    return sorted(set(qs.values_list("public_model", flat=True).distinct()))


def usage_request_samples(*, deployment_ids: list[int], since, until, limit: int = 200_000) -> list[dict]:
    """Per-request latency, status, tokens and cost of the given deployments' usage events that
    started in ``[since, until)``: what rollout analysis compares canary and stable on."""
    rows = (
        UsageEvent.objects.filter(
            deployment_id__in=deployment_ids, started_at__gte=since, started_at__lt=until
        )
        .order_by("started_at")
        .values_list(
            "deployment_id",
            "started_at",
            "ttft_ms",
            "tpot_ms",
            "status",
            "http_status",
            "cost_nanos",
            "prompt_tokens",
            "completion_tokens",
            "stream",
        )[:limit]
    )
    return [
        {
            "deployment_id": d,
            "started_at": at,
            "ttft_ms": ttft,
            "tpot_ms": tpot if stream else None,  # a non-streamed answer has no inter-token gap
            "status": status,
            "http_status": http,
            "cost_nanos": cost,
            "tokens": prompt + completion,
        }
        for d, at, ttft, tpot, status, http, cost, prompt, completion, stream in rows
    ]


def usage_sli_counts(
    *,
    public_model: str,
    windows: dict[str, tuple[dt.datetime, dt.datetime]],
    ttft_ms: float | None,
    tpot_ms: float | None,
) -> dict[str, dict[str, int]]:
    """Counts of a route's requests that a service-level indicator needs, per named window
    (``{name: (since, until)}`` on ``started_at``), in one query:

    - ``requests``: every metered request except those the client abandoned;
    - ``server_errors``: of those, failed with a 5xx (the gateway's or the upstream's fault; a 4xx
      is the client's);
    - ``ttft_valid`` / ``ttft_good``: successful requests with a first-token time, and those at or
      under ``ttft_ms``;
    - ``tpot_valid`` / ``tpot_good``: successful requests with a time per output token (streamed,
      more than one token), and those at or under ``tpot_ms``;
    - ``attained``: successful requests within both bounds (a bound that is None always holds).
    """
    counted = ~Q(status=UsageEvent.Status.CLIENT_DISCONNECTED)
    ok = Q(status=UsageEvent.Status.OK)
    ttft_valid = ok & Q(ttft_ms__isnull=False)
    tpot_valid = ok & Q(tpot_ms__isnull=False)
    ttft_ok = Q(ttft_ms__lte=ttft_ms) if ttft_ms is not None else Q()
    tpot_ok = (Q(tpot_ms__lte=tpot_ms) | Q(tpot_ms__isnull=True)) if tpot_ms is not None else Q()
    aggregates = {}
    for name, (since, until) in windows.items():
        w = Q(started_at__gte=since, started_at__lt=until)
        aggregates[f"{name}__requests"] = Count("id", filter=w & counted)
        aggregates[f"{name}__server_errors"] = Count("id", filter=w & counted & ~ok & Q(http_status__gte=500))
        aggregates[f"{name}__ttft_valid"] = Count("id", filter=w & ttft_valid)
        aggregates[f"{name}__ttft_good"] = Count("id", filter=w & ttft_valid & ttft_ok)
        aggregates[f"{name}__tpot_valid"] = Count("id", filter=w & tpot_valid)
        aggregates[f"{name}__tpot_good"] = Count("id", filter=w & tpot_valid & tpot_ok)
        aggregates[f"{name}__attained"] = Count(
            "id", filter=w & ok & (Q(ttft_ms__isnull=True) | ttft_ok) & tpot_ok
        )
    if not windows:
        return {}
    since = min(s for s, _ in windows.values())
    until = max(u for _, u in windows.values())
    row = (
        UsageEvent.objects.filter(public_model=public_model, started_at__gte=since, started_at__lt=until)
        .order_by()
        .aggregate(**aggregates)
    )
    out: dict[str, dict[str, int]] = {name: {} for name in windows}
    for key, value in row.items():
        name, field = key.split("__", 1)
        out[name][field] = value or 0
    return out


def usage_route_samples(*, public_model: str, since, until, limit: int = 100_000) -> list[dict]:
    """A route's metered requests that started in ``[since, until)``, newest last: what an
    incident's diagnosis compares with the time before it."""
    return list(
        UsageEvent.objects.filter(public_model=public_model, started_at__gte=since, started_at__lt=until)
        .order_by("started_at")
        .values(
            "started_at", "tenant_id", "deployment_id", "deployment_slug", "version_id", "prompt_tokens",
            "completion_tokens", "cached_tokens", "ttft_ms", "tpot_ms", "status", "http_status", "stream",
        )[:limit]
    )  # fmt: skip
