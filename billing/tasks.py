"""Celery entry points of the billing app (Celery discovers ``billing.tasks``)."""

from billing.tasks_gateway import budget_alerts_record, gateway_snapshot_publish  # noqa: F401
