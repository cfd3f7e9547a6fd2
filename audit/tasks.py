"""Periodic work of the audit trail (beat entries in workers/celery.py).

- ``audit.seal`` every second: seal what the after-commit seal missed (another sealer was busy, a
  raw write caught by a trigger, a process that died after its commit), then witness a checkpoint.
- ``audit.verify`` every minute: walk the whole chain against the witness and store the verdict
  that the console's badge shows (``audit.selectors.audit_health``).
"""

from celery import shared_task

from audit.checkpoints import audit_checkpoint
from audit.services import audit_seal, audit_verify_record


@shared_task(name="audit.seal", ignore_result=True, soft_time_limit=50, time_limit=60)
def audit_seal_task() -> int:
    head = audit_seal(wait=False)
    audit_checkpoint()
    return head.index


@shared_task(name="audit.verify", ignore_result=True, soft_time_limit=1800, time_limit=1900)
def audit_verify_task() -> bool:
    return audit_verify_record().ok
