"""Celery tasks of the gateway's billing side (imported by ``billing.tasks`` for discovery).

Beat schedule (wired in ``workers/celery.py``):
- ``billing.gateway_snapshot_publish`` every 15 s: republishes the whole snapshot, so gateways
  converge even if a change notification was lost or Redis restarted, and budget spend seeds are
  refreshed from Postgres (counters lost with Redis are rebuilt from them).
- ``billing.budget_alerts_record`` every 60 s: soft-threshold crossings become BudgetAlert rows.
"""

from __future__ import annotations

from celery import shared_task

from billing import services_gateway


@shared_task(
    name="billing.gateway_snapshot_publish",
    autoretry_for=(ConnectionError,),
    retry_backoff=True,
    max_retries=3,
)
def gateway_snapshot_publish() -> int:
    """Publish the gateway config snapshot; returns its version."""
    return services_gateway.snapshot_publish()


@shared_task(name="billing.budget_alerts_record", soft_time_limit=120, time_limit=180)
def budget_alerts_record() -> int:
    """Record soft budget thresholds crossed; returns how many alerts were new."""
    return services_gateway.budget_alerts_record()
