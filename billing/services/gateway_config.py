"""The billing section of the gateway's configuration snapshot: keys, tenants (limits, budgets) and prices."""

from __future__ import annotations

import datetime as dt

import redis
from django.conf import settings
from django.utils import timezone

from billing.models import (
    ApiKey,
    Tenant,
    TenantLimits,
)
from billing.selectors.prices import prices_in_force
from billing.selectors.spend import period_spend
from billing.selectors.usage import vote_samples_spent
from snapshot.contract import DEFAULT_CLASS, lower_class, period_key
from snapshot.publish import publish_section


def key_class(key_class_: str, tenant_class: str) -> str:
    """A key's traffic class as the gateway applies it: its own (the tenant's when it names none),
    never above the tenant's, even when the tenant's was lowered after the key was made."""
    return lower_class(key_class_ or tenant_class, tenant_class)


def gateway_redis() -> redis.Redis:
    """A client for the Redis the gateways read (``GATEWAY_REDIS_URL``, else ``REDIS_URL``)."""
    return redis.Redis.from_url(getattr(settings, "GATEWAY_REDIS_URL", None) or settings.REDIS_URL)


def gateway_prefix() -> str:
    return getattr(settings, "GATEWAY_KEY_PREFIX", "gw:")


def tenancy_section_build(*, at: dt.datetime | None = None) -> dict:
    """The ``tenancy`` section of the gateway snapshot: keys, tenants (limits, budgets) and prices.

    See ``snapshot.contract`` for the contract. Budget spend is read from Postgres here so that
    gateways can rebuild Redis counters that were lost.
    """
    at = at or timezone.now()
    now = at.timestamp()
    keys = {}
    tenant_classes = dict(TenantLimits.objects.values_list("tenant_id", "traffic_class"))
    for k in ApiKey.objects.filter(tenant__is_active=True).only(
        "id",
        "prefix",
        "tenant_id",
        "allowed_models",
        "expires_at",
        "revoked_at",
        "rpm_limit",
        "tpm_limit",
        "traffic_class",
        "key_hash",
    ):
        keys[k.key_hash] = {
            "id": k.pk,
            "prefix": k.prefix,
            "tenant_id": k.tenant_id,
            "models": k.allowed_models or None,
            "expires_at": k.expires_at.timestamp() if k.expires_at else None,
            "revoked": k.revoked_at is not None,
            "rpm": k.rpm_limit,
            "tpm": k.tpm_limit,
            "class": key_class(k.traffic_class, tenant_classes.get(k.tenant_id, DEFAULT_CLASS)),
        }
    tenants = {}
    active = list(Tenant.objects.filter(is_active=True).select_related("limits", "budget"))
    # Voting samples (docs/voting.md): a calendar month's, seeded from what Postgres recorded.
    vote_period = period_key("monthly", now)[0]
    month_start = at.astimezone(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    voters = [t.pk for t in active if getattr(getattr(t, "limits", None), "vote_samples_per_month", 0)]
    vote_spent = vote_samples_spent(tenant_ids=voters, since=month_start) if voters else {}
    for t in active:
        limits = getattr(t, "limits", None)
        budget = getattr(t, "budget", None)
        b = None
        if budget is not None:
            # PostgreSQL only: this seeds the gateways' own counters (billing.selectors.spend).
            spend = period_spend(tenant_id=t.pk, period=budget.period, at=at, with_gateway=False)
            b = {
                "period": budget.period,
                "amount_nanos": budget.amount_nanos,
                "hard_cap_nanos": budget.hard_cap_nanos,
                "soft_percents": list(budget.soft_threshold_percents or []),
                "spent_period_key": spend.period_key,
                "spent_nanos": spend.settled_nanos,
            }
        tenants[str(t.pk)] = {
            "slug": t.slug,
            "rpm": limits.rpm_limit if limits else 0,
            "tpm": limits.tpm_limit if limits else 0,
            "max_input_tokens": limits.max_input_tokens if limits else 0,
            "max_output_tokens": limits.max_output_tokens if limits else 0,
            "budget": b,
            "vote": {
                "samples_per_month": limits.vote_samples_per_month,
                "period_key": vote_period,
                "spent": vote_spent.get(t.pk, 0),
            }
            if limits is not None and limits.vote_samples_per_month
            else None,
        }
    prices = {
        name: {"price_id": p.pk, "input_nanos": p.input_nanos, "output_nanos": p.output_nanos}
        for name, p in prices_in_force(at=at).items()
    }
    batch_prices = {
        name: {"price_id": p.pk, "input_nanos": p.input_nanos, "output_nanos": p.output_nanos}
        for name, p in prices_in_force(at=at, kind="batch").items()
    }
    # What a semantic cache hit is billed at (docs/decisions/0042); a model without one: its online price.
    cache_prices = {
        name: {"price_id": p.pk, "input_nanos": p.input_nanos, "output_nanos": p.output_nanos}
        for name, p in prices_in_force(at=at, kind="cache").items()
    }
    return {
        "generated_at": now,
        "keys": keys,
        "tenants": tenants,
        "prices": prices,
        "batch_prices": batch_prices,
        "cache_prices": cache_prices,
    }


def tenancy_section_publish() -> int:
    """Build and publish the ``tenancy`` section; returns the snapshot's new version.

    Every governed change to what the section carries publishes it after commit
    (``billing.reactions.tenancy_publish``, retried by the event sweep when Redis is down).
    """
    client = gateway_redis()
    try:
        return publish_section(
            client, prefix=gateway_prefix(), section="tenancy", data=tenancy_section_build()
        )
    finally:
        client.close()
