"""Alarms of the audit trail: the last result of each automatic check, kept for the console's badge
(``audit.checks.check_results``) and logged at ERROR on the ``audit.alarm`` logger, which an
operator ships to whatever pages them."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.utils import timezone

from audit.models import AuditCheck

log = logging.getLogger("audit.alarm")

# The last result this process wrote per check, and when: an unchanged OK is not rewritten after
# every seal, only once it is AUDIT_CHECK_REFRESH_S old, so the badge's "last ran" stays truthful
# (well inside AUDIT_CHECK_STALE_S) without a write per sealed batch.
_last_ok: dict[str, tuple[bool, float]] = {}


def check_record(*, name: str, ok: bool, summary: str, details: dict[str, Any] | None = None) -> None:
    """Store a check's result; a failure is also logged at ERROR, naming what failed."""
    if not ok:
        log.error("audit %s check failed: %s", name, summary)
    else:
        last = _last_ok.get(name)
        refresh_s = getattr(settings, "AUDIT_CHECK_REFRESH_S", 60.0)
        if last is not None and last[0] and time.monotonic() - last[1] < refresh_s:
            return
    AuditCheck.objects.update_or_create(
        name=name,
        defaults={
            "ok": ok,
            "checked_at": timezone.now(),
            "summary": summary[:4000],
            "details": details or {},
        },
    )
    _last_ok[name] = (ok, time.monotonic())


def seal_result(*, refused: dict[int, str]) -> None:
    """The seal's verdict: every unsealed row it refused, by ``seq``, and why."""
    if not refused:
        check_record(name="seal", ok=True, summary="every pending event was authenticated and sealed")
        return
    named = "; ".join(f"seq {seq}: {why}" for seq, why in sorted(refused.items())[:20])
    check_record(
        name="seal",
        ok=False,
        summary=f"refused to seal {len(refused)} event(s) whose authentication fails: {named}",
        details={"refused": {str(seq): why for seq, why in refused.items()}},
    )
