"""Tenancy reads used by access checks, views and other apps."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from billing.models import Membership, Tenant


def tenant_ids_for_user(*, user) -> set[int]:
    return set(
        Membership.objects.filter(user=user, tenant__is_active=True).values_list("tenant_id", flat=True)
    )


def membership_role(*, user, tenant_id: int) -> str | None:
    return Membership.objects.filter(user=user, tenant_id=tenant_id).values_list("role", flat=True).first()


def tenants_visible_to(*, user, reads_everything: bool) -> QuerySet[Tenant]:
    qs = Tenant.objects.annotate(member_count=Count("memberships")).order_by("name")
    if reads_everything:
        return qs
    return qs.filter(memberships__user=user)


def usage_request_samples(*, deployment_ids: list[int], since, until, limit: int = 200_000) -> list[dict]:
    """Per-request latency, status, tokens and cost of the given deployments' usage events that
    started in ``[since, until)``: what rollout analysis compares canary and stable on."""
    from billing.models import UsageEvent

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
        )[:limit]
    )
    return [
        {
            "deployment_id": d,
            "started_at": at,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "status": status,
            "http_status": http,
            "cost_nanos": cost,
            "tokens": prompt + completion,
        }
        for d, at, ttft, tpot, status, http, cost, prompt, completion in rows
    ]
