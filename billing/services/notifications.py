"""Budget notifications: a threshold crossed, or the hard cap reached, becomes a notification to the
tenant's admins through the notify app (console, email, the tenant's signed webhook)."""

from __future__ import annotations

from billing.models import BudgetAlert
from billing.models.money import NANOS_PER_USD
from notify.services import notify_tenant


def budget_notification_create(*, alert: BudgetAlert):
    """The notification of a newly recorded threshold crossing; made once per alert row however
    often it is called (its ``dedup_key`` is the alert's)."""
    tenant = alert.tenant
    budget = getattr(tenant, "budget", None)
    amount = f"${budget.amount_usd:.2f} {budget.period}" if budget else "its budget"
    spent = alert.spent_nanos / NANOS_PER_USD
    if alert.kind == BudgetAlert.Kind.CAP:
        kind, severity = "budget_cap", "critical"
        title = f"{tenant.name}: requests refused, hard cap of {amount} reached ({alert.period_key})"
        body = (
            f"The gateway is refusing {tenant.name}'s requests (HTTP 429, budget_exceeded): spend in period "
            f"{alert.period_key} is ${spent:.4f} and, with requests in flight, no room is left under the "
            f"hard cap of {alert.percent}% of {amount}. Raise the budget or the cap to serve again; "
            "otherwise requests are served from the next period on."
        )
        event = "budget.cap_reached"
    else:
        kind, severity = "budget_threshold", "warning"
        title = f"{tenant.name} passed {alert.percent}% of {amount} ({alert.period_key})"
        body = (
            f"Spend in period {alert.period_key} reached ${spent:.4f}, past the {alert.percent}% threshold of "
            f"{amount}. See the tenant's cost page for the burn-down and forecast."
        )
        event = "budget.threshold_crossed"
    payload = {
        "event": event,
        "tenant": tenant.slug,
        "period": alert.period_key,
        "percent": alert.percent,
        "spent_usd": f"{spent:.6f}",
        "budget_usd": str(budget.amount_usd) if budget else None,
        "labels": {"period": alert.period_key, "percent": str(alert.percent)},
    }
    return notify_tenant(
        tenant_id=tenant.pk,
        kind=kind,
        title=title,
        body=body,
        payload=payload,
        severity=severity,
        dedup_key=f"budget-alert:{alert.pk}",
    )
