"""Celery tasks of the notify app.

- ``notify.delivery_send``: one attempt at a webhook delivery (queued by the event spine's reaction).
- ``notify.deliveries_retry`` every 30 s: deliveries whose backoff has run out are retried.
- ``notify.pages_escalate`` every 30 s: pages nobody acknowledged in time go to the next on-call.
"""

from __future__ import annotations

from celery import shared_task

from notify import services


@shared_task(name="notify.delivery_send", soft_time_limit=30, time_limit=60)
def delivery_send(delivery_id: int) -> str:
    return services.delivery_send(delivery_id=delivery_id)


@shared_task(name="notify.deliveries_retry", soft_time_limit=120, time_limit=180)
def deliveries_retry() -> int:
    return services.deliveries_due()


@shared_task(name="notify.pages_escalate", soft_time_limit=60, time_limit=120)
def pages_escalate() -> int:
    return services.pages_escalate()
