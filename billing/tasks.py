"""Celery tasks of the billing app.

Beat schedule (wired in ``workers/celery.py``):
- ``billing.gateway_snapshot_publish`` every 15 s: republishes the ``tenancy`` section of the
  gateway snapshot, so gateways converge even if a change notification was lost or Redis restarted,
  and budget spend seeds are refreshed from Postgres (counters lost with Redis are rebuilt from them).
- ``billing.budget_alerts_record`` every 60 s: soft-threshold crossings become BudgetAlert rows.
- ``billing.usage_rollup`` every 30 s: usage events after the high-water mark roll up into the
  hourly and daily aggregates the cost pages read (idempotent; a crashed run is redone by the next).
"""

from __future__ import annotations

from celery import shared_task

from billing.services import budgets, gateway_config, rollups


@shared_task(
    name="billing.gateway_snapshot_publish",
    autoretry_for=(ConnectionError,),
    retry_backoff=True,
    max_retries=3,
)
def gateway_snapshot_publish() -> int:
    """Publish the tenancy section of the gateway config snapshot; returns the snapshot version."""
    return gateway_config.tenancy_section_publish()


@shared_task(name="billing.budget_alerts_record", soft_time_limit=120, time_limit=180)
def budget_alerts_record() -> int:
    """Record soft budget thresholds crossed; returns how many alerts were new."""
    return budgets.budget_alerts_record()


@shared_task(name="billing.usage_rollup", soft_time_limit=240, time_limit=300)
def usage_rollup() -> dict:
    """Roll usage events up into hourly and daily aggregates until caught up."""
    return rollups.usage_rollup_run()
