"""Periodic work of the event spine (beat entry in workers/celery.py).

- ``events.sweep`` every ``EVENTS_SWEEP_S``: deliver what the after-commit dispatch missed (a
  process that died after its commit, a dispatcher killed mid-batch) and the retries whose backoff
  ran out, then prune old settled events.
"""

from celery import shared_task

from events.services import events_sweep


@shared_task(name="events.sweep", ignore_result=True, soft_time_limit=240, time_limit=300)
def events_sweep_task() -> int:
    return events_sweep()
