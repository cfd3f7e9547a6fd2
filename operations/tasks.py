"""``operations.slos_evaluate`` (beat, every ``OPERATIONS_SLO_EVAL_S``): every active SLO's windows,
then the review that reverts playbook actions whose SLOs held again or whose time box ended."""

from __future__ import annotations

from celery import shared_task

from core.lifecycle import RunTask
from operations import scrape, services


@shared_task(name="operations.slos_evaluate", soft_time_limit=60, time_limit=120)
def slos_evaluate() -> dict:
    states = {str(k): v for k, v in services.slos_evaluate().items()}
    reverted = services.mitigations_review()
    return {"slos": states, "reverted": {str(k): v for k, v in reverted.items()}}


@shared_task(name="operations.engines_scrape", soft_time_limit=60, time_limit=120)
def engines_scrape() -> int:
    return scrape.engines_scrape()


@shared_task(
    name="operations.rehearsal_execute",
    base=RunTask,
    run_model="operations.RehearsalRun",
    acks_late=False,  # a rehearsal half run is started again by a person, not by a redelivery
    soft_time_limit=20 * 60,
    time_limit=20 * 60 + 30,
)
def rehearsal_execute_task(run_id: int) -> dict:
    """Run a queued console rehearsal (a no-op when it is not queued any more)."""
    from operations.rehearsals import rehearsal_execute

    run = rehearsal_execute(run_id=run_id)
    return {"id": run.pk, "status": run.status}
