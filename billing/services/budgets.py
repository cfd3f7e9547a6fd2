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
from billing.selectors.spend import PeriodSpend, period_bounds, period_spend
from billing.services.gateway_config import gateway_prefix, gateway_redis
from billing.services.notifications import budget_notification_create
from core.text import REASON_MAX_CHARS
from events.services import emit
from snapshot.contract import ALERTS_LIST, budget_hash_key

log = logging.getLogger(__name__)

# Ten times the budget: beyond that a "cap" caps nothing, and the figure is a typo.
PERCENT_MAX = 1000


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
    errors = {}
    if any(p <= 0 or p > PERCENT_MAX for p in percents):
        errors["soft_threshold_percents"] = f"Thresholds are percentages between 1 and {PERCENT_MAX}."
    if hard_cap_percent is not None and not 1 <= hard_cap_percent <= PERCENT_MAX:
        errors["hard_cap_percent"] = f"The hard cap is a percentage between 1 and {PERCENT_MAX} (or none)."
    if len(reason or "") > REASON_MAX_CHARS:
        errors["reason"] = f"At most {REASON_MAX_CHARS} characters."
    if errors:
        raise ValidationError(errors)
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
    return budget


def _refusal_mark_clear(*, tenant_id: int, period: str) -> None:
    """A changed budget may have room again: the next refusal, if any, is the one the page shows.

    Runs after the budget's change commits (``billing.reactions.refusal_mark_clear``); a Redis error
    raises, so the event spine retries it.
    """
    pkey, _, _ = period_bounds(period=period, at=timezone.now())
    r = gateway_redis()
    try:
        r.hdel(budget_hash_key(gateway_prefix(), tenant_id, pkey), "refused_at")
    finally:
        r.close()


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
        spend = period_spend(tenant_id=budget.tenant_id, period=budget.period, at=now)
        for pct in budget.soft_threshold_percents or []:
            if budget.amount_nanos and spend.spent_nanos >= budget.amount_nanos * int(pct) // 100:
                created += _alert_create(
                    tenant_id=budget.tenant_id,
                    period_key=spend.period_key,
                    percent=int(pct),
                    spent_nanos=spend.spent_nanos,
                )
        created += _cap_alert_record(budget=budget, spend=spend)
    return created


def _cap_alert_record(*, budget: Budget, spend: PeriodSpend) -> int:
    """Notify once per period when the gateway starts refusing this tenant's requests at the hard cap.

    The gateway marks its first refusal in the period's counters (``refused_at``); spend at or past
    the cap means refusals too, should Redis have lost the mark.
    """
    cap = budget.hard_cap_nanos
    if cap is None or (spend.refused_at is None and spend.spent_nanos < cap):
        return 0
    return _alert_create(
        tenant_id=budget.tenant_id,
        period_key=spend.period_key,
        percent=budget.hard_cap_percent,
        spent_nanos=spend.spent_nanos,
        kind=BudgetAlert.Kind.CAP,
    )


def _alert_create(
    *, tenant_id: int, period_key: str, percent: int, spent_nanos: int, kind: str = BudgetAlert.Kind.THRESHOLD
) -> int:
    if not Tenant.objects.filter(pk=tenant_id).exists():
        return 0  # deleted since the gateway pushed the crossing
    if BudgetAlert.objects.filter(
        tenant_id=tenant_id, period_key=period_key, kind=kind, percent=percent
    ).exists():
        return 0
    try:
        with transaction.atomic():
            alert = BudgetAlert.objects.create(
                tenant_id=tenant_id,
                period_key=period_key,
                kind=kind,
                percent=percent,
                spent_nanos=spent_nanos,
            )
            # An operational signal outside the chain, for the reactions that will notify (issue 28).
            emit(
                "billing.budget_cap_reached"
                if kind == BudgetAlert.Kind.CAP
                else "billing.budget_threshold_crossed",
                subject=alert,
                payload={
                    "tenant_id": tenant_id,
                    "period": period_key,
                    "percent": percent,
                    "spent_nanos": spent_nanos,
                },
            )
    except IntegrityError:
        return 0  # another worker recorded it first: it notifies, not us
    log.warning("tenant %s: %s", tenant_id, alert)
    budget_notification_create(alert=alert)
    return 1
