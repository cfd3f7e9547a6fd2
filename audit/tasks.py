"""Periodic work of the audit trail (beat entries in workers/celery.py).

- ``audit.seal`` every second: seal what the after-commit seal missed (another sealer was busy, a
  raw write caught by a trigger, a process that died after its commit), then witness a checkpoint.
- ``audit.verify`` every minute: walk the whole chain against the witness and store the verdict
  (the ``chain`` check) that the Audit page's badge shows (``audit.checks.check_results``).
- ``audit.checks`` every five minutes: compare every governed row with its events (the ``drift``
  check, audit.drift), stored for the same badge.
"""

from celery import shared_task

from audit.checkpoints import audit_checkpoint
from audit.checks import drift_check_run
from audit.services import audit_seal, audit_verify_record


@shared_task(name="audit.seal", ignore_result=True, soft_time_limit=50, time_limit=60)
def audit_seal_task() -> int:
    head = audit_seal(wait=False)
    audit_checkpoint()
    return head.index


@shared_task(name="audit.verify", ignore_result=True, soft_time_limit=1800, time_limit=1900)
def audit_verify_task() -> bool:
    return audit_verify_record().ok


@shared_task(name="audit.checks", ignore_result=True, soft_time_limit=540, time_limit=600)
def audit_checks_task() -> int:
    """The drift check (the chain's is ``audit.verify``); a run that cannot finish is stored as failed."""
    return drift_check_run().pk
