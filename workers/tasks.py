"""Platform-wide tasks."""

from __future__ import annotations

from celery import shared_task
from django.db import connection


@shared_task(name="workers.ping")
def ping() -> dict:
    """Round-trip check used by health pages and tests: proves a worker is consuming and can reach Postgres."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        (one,) = cursor.fetchone()
    return {"pong": True, "db": one == 1}


@shared_task(name="workers.runs_reap_stale", soft_time_limit=60, time_limit=90)
def runs_reap_stale_task() -> dict[str, int]:
    """Fail the running runs of every kind, in every app, whose heartbeat went silent
    (``STALE_AFTER_S``); how many of each."""
    from core.lifecycle import reaped_models, runs_reap_stale

    return {model.__name__: runs_reap_stale(model) for model in reaped_models()}
