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
