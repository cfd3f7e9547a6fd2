"""Usage event reads for pages and exports (what a tenant has spent: billing.selectors.spend)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db.models import Count, Q, QuerySet, Sum

from billing.models import (
    NANOS_PER_USD,
    UsageEvent,
)


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
