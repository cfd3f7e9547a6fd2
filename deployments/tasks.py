"""Celery tasks of the deployments app: thin wrappers around ``deployments.reconciler``.

- ``deployments.reconcile``: enqueued after every change (the event spine's
  ``deployments.reactions.reconcile``) and by beat
  (``workers.celery`` schedule, every ``RAY_RECONCILE_INTERVAL_S``). Retries with exponential
  backoff and jitter while Ray is unreachable (beat runs do not retry: the next tick is the retry).
- ``deployments.watch``: polls Ray's status every second while an application is changing, so the
  console sees DEPLOYING → RUNNING without waiting for the next beat tick. One chain at a time.
"""

from __future__ import annotations

import uuid

from celery import shared_task
from django.core.cache import cache

from deployments.ray_client import RayUnreachable
from deployments.reconciler import LockBusy, deployments_observe, deployments_reconcile
from deployments.services import routes_section_publish

WATCH_TOKEN_KEY = "deployments:watch-token"
WATCH_INTERVAL_S = 1.0
WATCH_MAX_STEPS = 900  # 15 minutes: model downloads on GPU clusters take a while


def _start_watch() -> None:
    token = uuid.uuid4().hex
    cache.set(WATCH_TOKEN_KEY, token, timeout=int(WATCH_MAX_STEPS * WATCH_INTERVAL_S) + 60)
    watch.apply_async(kwargs={"token": token, "step": 0}, countdown=WATCH_INTERVAL_S)


@shared_task(
    name="deployments.reconcile",
    bind=True,
    autoretry_for=(RayUnreachable, LockBusy),
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=8,
    soft_time_limit=240,
    time_limit=300,
)
def reconcile(self, trigger: str = "beat") -> dict:
    """Make Ray Serve match the desired deployments; returns the run's outcome."""
    try:
        run = deployments_reconcile(trigger=trigger)
    except (RayUnreachable, LockBusy):
        if trigger == "beat":
            return {"outcome": "unreachable", "retry": "next beat tick"}
        raise
    finally:
        # Whatever happened, keep the console's status fresh while anything moves.
        _start_watch()
    return {"run": run.pk, "outcome": run.outcome, "applications": run.applications}


@shared_task(name="deployments.watch", soft_time_limit=60, time_limit=90, ignore_result=True)
def watch(token: str, step: int = 0) -> None:
    """Store Ray's status; look again in a second while something is changing (newest chain only)."""
    if cache.get(WATCH_TOKEN_KEY) != token:
        return  # a newer reconcile started its own chain
    moving = deployments_observe()
    if moving and step < WATCH_MAX_STEPS:
        watch.apply_async(kwargs={"token": token, "step": step + 1}, countdown=WATCH_INTERVAL_S)


@shared_task(
    name="deployments.routes_publish",
    autoretry_for=(ConnectionError,),
    retry_backoff=True,
    max_retries=3,
    ignore_result=True,
)
def routes_publish() -> int:
    """Republish the routes section of the gateway snapshot (changes also publish on commit)."""
    return routes_section_publish()


# --- rollouts ------------------------------------------------------------------------------------
# ``deployments.rollouts_tick`` runs from beat every ROLLOUT_TICK_S (workers.celery); the other two
# are enqueued on commit by the rollout services so a step does not wait for the next tick.


@shared_task(name="deployments.rollouts_tick", soft_time_limit=30, time_limit=60, ignore_result=True)
def rollouts_tick_task() -> dict:
    """The rollout controller: advance every progressing rollout as far as it can go now."""
    from deployments.rollouts.services import rollouts_tick

    return {str(k): v for k, v in rollouts_tick().items()}


@shared_task(name="deployments.rollout_advance", soft_time_limit=30, time_limit=60, ignore_result=True)
def rollout_advance_task(rollout_id: int) -> str:
    from deployments.rollouts.services import rollout_advance

    return rollout_advance(rollout_id=rollout_id)


@shared_task(name="deployments.analysis_run", soft_time_limit=120, time_limit=150, ignore_result=True)
def analysis_run_task(run_id: int) -> str:
    """Measure one analysis window (both sides) and store the verdict; then advance the rollout."""
    from deployments.rollouts.services import analysis_run_execute

    return analysis_run_execute(run_id=run_id).verdict
