"""Writes behind the gateway: keys, limits, prices, budgets, and the config snapshot it serves from.

Every change that the gateway must see calls ``snapshot_publish_on_commit()``; the snapshot is the
whole configuration (never a diff), so a lost notification only delays a change until the next poll
or the periodic republish (Celery beat, ``billing.tasks_gateway``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import secrets
import time
from decimal import Decimal

import orjson
import redis
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import ApiKey, Budget, BudgetAlert, Price, Tenant, TenantLimits
from billing.selectors_gateway import period_bounds, prices_in_force, tenant_spend_nanos
from gateway.snapshot import ALERTS_LIST, CHANNEL, SNAPSHOT_KEY, VERSION_KEY

log = logging.getLogger(__name__)

KEY_PREFIX = "gk-"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(getattr(settings, "GATEWAY_REDIS_URL", None) or settings.REDIS_URL)


def _gw_prefix() -> str:
    return getattr(settings, "GATEWAY_KEY_PREFIX", "gw:")


def hash_api_key(secret: str) -> str:
    """The stored form of a key (the gateway hashes what clients send the same way)."""
    return hashlib.sha256(secret.encode()).hexdigest()


# --- keys -----------------------------------------------------------------------------------------


@transaction.atomic
def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    actor,
    expires_at: dt.datetime | None = None,
    allowed_models: list[str] | None = None,
    rpm_limit: int = 0,
    tpm_limit: int = 0,
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the secret, which is shown once and never stored."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        tenant=tenant,
        name=name,
        prefix=secret[:10],
        key_hash=hash_api_key(secret),
        allowed_models=sorted(set(allowed_models or [])),
        rpm_limit=rpm_limit,
        tpm_limit=tpm_limit,
        expires_at=expires_at,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    key.full_clean()
    key.save()
    snapshot_publish_on_commit()
    return key, secret


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey, actor) -> ApiKey:
    """Revoke a key (idempotent); gateways refuse it within ~2 s."""
    updated = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=actor if getattr(actor, "pk", None) else None
    )
    api_key.refresh_from_db()
    if updated:
        snapshot_publish_on_commit()
    return api_key


# --- limits, prices, budgets ---------------------------------------------------------------------


@transaction.atomic
def tenant_limits_set(
    *,
    tenant: Tenant,
    rpm_limit: int,
    tpm_limit: int,
    max_input_tokens: int,
    max_output_tokens: int,
    actor=None,
) -> TenantLimits:
    """Set a tenant's rate limits and admission caps (0 = none)."""
    limits, _ = TenantLimits.objects.update_or_create(
        tenant=tenant,
        defaults={
            "rpm_limit": rpm_limit,
            "tpm_limit": tpm_limit,
            "max_input_tokens": max_input_tokens,
            "max_output_tokens": max_output_tokens,
        },
    )
    snapshot_publish_on_commit()
    return limits


@transaction.atomic
def price_set(
    *,
    public_model: str,
    input_per_million: Decimal,
    output_per_million: Decimal,
    actor,
    effective_from: dt.datetime | None = None,
    note: str = "",
    source: str = "manual",
) -> Price:
    """Add a price version for a public model (prices are never edited in place: history stays)."""
    price = Price(
        public_model=public_model,
        input_per_million=input_per_million,
        output_per_million=output_per_million,
        effective_from=effective_from or timezone.now(),
        note=note,
        source=source,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    price.full_clean()
    price.save()
    snapshot_publish_on_commit()
    return price


@transaction.atomic
def budget_set(
    *,
    tenant: Tenant,
    amount_usd: Decimal,
    period: str = Budget.Period.MONTHLY,
    soft_threshold_percents: list[int] | None = None,
    hard_cap_percent: int | None = 100,
    actor=None,
) -> Budget:
    """Create or change a tenant's budget."""
    percents = sorted({int(p) for p in (soft_threshold_percents or [])})
    if any(p <= 0 or p > 1000 for p in percents):
        raise ValidationError({"soft_threshold_percents": "Thresholds are percentages between 1 and 1000."})
    budget, _ = Budget.objects.get_or_create(tenant=tenant, defaults={"amount_usd": amount_usd})
    budget.amount_usd = amount_usd
    budget.period = period
    budget.soft_threshold_percents = percents
    budget.hard_cap_percent = hard_cap_percent
    budget.updated_by = actor if getattr(actor, "pk", None) else None
    budget.full_clean()
    budget.save()
    snapshot_publish_on_commit()
    return budget


@transaction.atomic
def budget_delete(*, tenant: Tenant, actor=None) -> None:
    Budget.objects.filter(tenant=tenant).delete()
    snapshot_publish_on_commit()


# --- snapshot ------------------------------------------------------------------------------------


def _routing_table() -> dict:
    try:
        from deployments.selectors import routing_table
    except ImportError:
        return {}
    return routing_table()


def snapshot_build(*, routes: dict | None = None, at: dt.datetime | None = None) -> dict:
    """The whole gateway configuration as plain data (see ``gateway.snapshot`` for the contract).

    ``routes`` overrides the deployments app's routing table (tests with hand-made backends).
    Budget spend is read from Postgres here so that gateways can rebuild Redis counters that were lost.
    """
    at = at or timezone.now()
    now = at.timestamp()
    keys = {}
    for k in ApiKey.objects.filter(tenant__is_active=True).only(
        "id",
        "prefix",
        "tenant_id",
        "allowed_models",
        "expires_at",
        "revoked_at",
        "rpm_limit",
        "tpm_limit",
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
        }
    tenants = {}
    for t in Tenant.objects.filter(is_active=True).select_related("limits", "budget"):
        limits = getattr(t, "limits", None)
        budget = getattr(t, "budget", None)
        b = None
        if budget is not None:
            key, start, end = period_bounds(period=budget.period, at=at)
            b = {
                "period": budget.period,
                "amount_nanos": budget.amount_nanos,
                "hard_cap_nanos": budget.hard_cap_nanos,
                "soft_percents": list(budget.soft_threshold_percents or []),
                "spent_period_key": key,
                "spent_nanos": tenant_spend_nanos(tenant_id=t.pk, since=start, until=end),
            }
        tenants[str(t.pk)] = {
            "slug": t.slug,
            "rpm": limits.rpm_limit if limits else 0,
            "tpm": limits.tpm_limit if limits else 0,
            "max_input_tokens": limits.max_input_tokens if limits else 0,
            "max_output_tokens": limits.max_output_tokens if limits else 0,
            "budget": b,
        }
    prices = {
        name: {"price_id": p.pk, "input_nanos": p.input_nanos, "output_nanos": p.output_nanos}
        for name, p in prices_in_force(at=at).items()
    }
    return {
        "version": time.time_ns() // 1000,
        "generated_at": now,
        "keys": keys,
        "tenants": tenants,
        "routes": routes if routes is not None else _routing_table(),
        "prices": prices,
    }


def snapshot_publish(*, routes: dict | None = None) -> int:
    """Build and publish the snapshot to Redis (stored, then announced); returns its version."""
    snap = snapshot_build(routes=routes)
    raw = orjson.dumps(snap)
    p = _gw_prefix()
    r = _redis()
    try:
        pipe = r.pipeline(transaction=True)
        pipe.set(p + SNAPSHOT_KEY, raw)
        pipe.set(p + VERSION_KEY, snap["version"])
        pipe.publish(p + CHANNEL, snap["version"])
        pipe.execute()
    finally:
        r.close()
    return snap["version"]


def snapshot_publish_on_commit() -> None:
    """Publish once the current transaction commits (a failed publish is retried by the beat task)."""

    def _publish() -> None:
        try:
            snapshot_publish()
        except Exception:  # noqa: BLE001 - Redis down: the periodic republish catches up
            log.exception("gateway snapshot publish failed")

    transaction.on_commit(_publish)


# --- budget alerts ----------------------------------------------------------------------------------


def budget_alerts_record() -> int:
    """Turn soft-threshold crossings into BudgetAlert rows (once per tenant, period and threshold).

    Two sources, so no crossing is missed: what gateways pushed to Redis as they settled, and a
    scan of every budget against Postgres spend (covers events shipped after a Redis loss).
    """
    created = 0
    r = _redis()
    key = _gw_prefix() + ALERTS_LIST
    try:
        while True:
            raw = r.lpop(key)
            if raw is None:
                break
            a = orjson.loads(raw)
            created += _alert_create(
                tenant_id=int(a["tenant_id"]),
                period_key=a["period_key"],
                percent=int(a["percent"]),
                spent_nanos=int(a["spent_nanos"]),
            )
    finally:
        r.close()
    now = timezone.now()
    for budget in Budget.objects.select_related("tenant"):
        pkey, start, end = period_bounds(period=budget.period, at=now)
        spent = tenant_spend_nanos(tenant_id=budget.tenant_id, since=start, until=end)
        for pct in budget.soft_threshold_percents or []:
            if budget.amount_nanos and spent >= budget.amount_nanos * int(pct) // 100:
                created += _alert_create(
                    tenant_id=budget.tenant_id, period_key=pkey, percent=int(pct), spent_nanos=spent
                )
    return created


def _alert_create(*, tenant_id: int, period_key: str, percent: int, spent_nanos: int) -> int:
    if not Tenant.objects.filter(pk=tenant_id).exists():
        return 0  # deleted since the gateway pushed the crossing
    if BudgetAlert.objects.filter(tenant_id=tenant_id, period_key=period_key, percent=percent).exists():
        return 0
    try:
        with transaction.atomic():
            BudgetAlert.objects.create(
                tenant_id=tenant_id, period_key=period_key, percent=percent, spent_nanos=spent_nanos
            )
    except IntegrityError:
        return 0
    log.warning("tenant %s passed %s%% of its budget in %s", tenant_id, percent, period_key)
    return 1
