"""Periodic seal of the audit trail (beat entry ``audit-seal``, every second; see workers/celery.py).

Events are also sealed right after the commit that recorded them; this catches what that missed
(another sealer was busy, a raw write caught by a trigger, a process that died after its commit).
"""

from celery import shared_task

from audit.services import audit_seal


@shared_task(name="audit.seal", ignore_result=True, soft_time_limit=50, time_limit=60)
def audit_seal_task() -> int:
    return audit_seal(wait=False).index
