"""Budgets and the soft-threshold alerts they raise."""

from __future__ import annotations

import logging
from decimal import Decimal

import orjson
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_delete, audit_save, snapshot
from billing.models import (
    Budget,
    BudgetAlert,
    Tenant,
)
from billing.selectors.budgets import period_bounds
from billing.selectors.usage import tenant_spend_nanos
from billing.services.gateway_config import gateway_prefix, gateway_redis, tenancy_section_publish_on_commit
from billing.services.notifications import budget_notification_create
from gateway.snapshot import ALERTS_LIST

log = logging.getLogger(__name__)


@transaction.atomic
def budget_set(
    *,
    tenant: Tenant,
    amount_usd: Decimal,
    period: str = Budget.Period.MONTHLY,
    soft_threshold_percents: list[int] | None = None,
    hard_cap_percent: int | None = 100,
    actor,
    reason: str = "",
) -> Budget:
    """Create or change a tenant's budget."""
    percents = sorted({int(p) for p in (soft_threshold_percents or [])})
    if any(p <= 0 or p > 1000 for p in percents):
        raise ValidationError({"soft_threshold_percents": "Thresholds are percentages between 1 and 1000."})
    stored = Budget.objects.filter(tenant=tenant).first()
    before = snapshot(stored) if stored is not None else None
    budget = stored or Budget(tenant=tenant)
    budget.amount_usd = amount_usd
    budget.period = period
    budget.soft_threshold_percents = percents
    budget.hard_cap_percent = hard_cap_percent
    budget.full_clean()
    if stored is not None and not _budget_changed(stored=before, budget=budget):
        # A save that changes nothing writes nothing: ``updated_at`` would move and the raw-write
        # trigger would record a ``raw.update`` no service explains.
        return stored
    budget.updated_by = actor if getattr(actor, "pk", None) else None
    budget.save()
    audit_save(actor=actor, instance=budget, before=before, tenant_id=tenant.pk, reason=reason)
    tenancy_section_publish_on_commit()
    return budget


def _budget_changed(*, stored: dict, budget: Budget) -> bool:
    """Whether the fields a person sets differ from the stored row (compared as the column stores them)."""
    after = {
        "amount_usd": Decimal(budget.amount_usd).quantize(Decimal("0.000001")),
        "period": budget.period,
        "soft_threshold_percents": list(budget.soft_threshold_percents),
        "hard_cap_percent": budget.hard_cap_percent,
    }
    before = {
        "amount_usd": Decimal(str(stored["amount_usd"])).quantize(Decimal("0.000001")),
        "period": stored["period"],
        "soft_threshold_percents": list(stored["soft_threshold_percents"] or []),
        "hard_cap_percent": stored["hard_cap_percent"],
    }
    return after != before


@transaction.atomic
def budget_delete(*, tenant: Tenant, actor, reason: str = "") -> None:
    budget = Budget.objects.filter(tenant=tenant).first()
    if budget is None:
        return
    audit_delete(actor=actor, instance=budget, tenant_id=tenant.pk, reason=reason)
    budget.delete()
    tenancy_section_publish_on_commit()


def budget_alerts_record(*, at=None) -> int:
    """Turn soft-threshold crossings into BudgetAlert rows (once per tenant, period and threshold).

    Two sources, so no crossing is missed: what gateways pushed to Redis as they settled, and a
    scan of every budget against Postgres spend (covers events shipped after a Redis loss).
    """
    created = 0
    r = gateway_redis()
    key = gateway_prefix() + ALERTS_LIST
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
    now = at or timezone.now()
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
            alert = BudgetAlert.objects.create(
                tenant_id=tenant_id, period_key=period_key, percent=percent, spent_nanos=spent_nanos
            )
    except IntegrityError:
        return 0  # another worker recorded it first: it notifies, not us
    log.warning("tenant %s passed %s%% of its budget in %s", tenant_id, percent, period_key)
    budget_notification_create(alert=alert)
    return 1
