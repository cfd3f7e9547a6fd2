"""Periodic work on the audit trail (beat entries in workers/celery.py).

``audit.seal`` (every second): events are also sealed right after the commit that recorded them;
this catches what that missed (another sealer was busy, a raw write caught by a trigger, a process
that died after its commit). ``audit.checks`` (every five minutes): walks the chain and compares
every governed row with its events (drift), storing both results for the Audit page's badge.
"""

from celery import shared_task

from audit.checks import chain_check_run, drift_check_run
from audit.services import audit_seal


@shared_task(name="audit.seal", ignore_result=True, soft_time_limit=50, time_limit=60)
def audit_seal_task() -> int:
    return audit_seal(wait=False).index


@shared_task(name="audit.checks", ignore_result=True, soft_time_limit=540, time_limit=600)
def audit_checks_task() -> list[int]:
    """Both checks, each stored on its own; one that cannot run does not keep the other from running."""
    ids, errors = [], []
    for run in (chain_check_run, drift_check_run):
        try:
            ids.append(run().pk)
        except Exception as exc:  # stored on the check's row by audit_check_run; the badge shows it
            errors.append(exc)
    if errors:
        raise errors[0]
    return ids
