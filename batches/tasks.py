"""Batch tasks: a run works on one batch for a slice and enqueues the next; the sweep picks up the
batches whose runs died (a worker killed), from beat and whenever a worker starts."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings


@shared_task(name="batches.run", acks_late=True, soft_time_limit=3600, time_limit=3700)
def batch_run_task(batch_id: str) -> str:
    from batches.services.runner import batch_run

    what, delay = batch_run(batch_id=batch_id)
    if what == "more":
        batch_run_task.delay(batch_id)
    elif what == "wait":
        batch_run_task.apply_async((batch_id,), countdown=delay)
    return what


@shared_task(name="batches.sweep", soft_time_limit=60, time_limit=90)
def batches_sweep_task() -> int:
    from batches.services.runner import batches_abandoned

    ids = batches_abandoned()
    for batch_id in ids:
        batch_run_task.delay(batch_id)
    return len(ids)


@worker_ready.connect
def _sweep_when_a_worker_starts(sender=None, **kwargs) -> None:
    """A worker that starts after one was killed takes up its batches once their leases ran out."""
    batches_sweep_task.apply_async(countdown=2 * settings.BATCH_LINE_LEASE_S + 1)
