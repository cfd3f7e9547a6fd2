"""Alarms of the audit trail: the last result of each automatic check, kept for the console's badge
(``audit.selectors.audit_health``) and logged at ERROR on the ``audit.alarm`` logger, which an
operator ships to whatever pages them."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from audit.models import AuditCheck

log = logging.getLogger("audit.alarm")

# The last result this process wrote per check: an unchanged OK is not rewritten after every seal.
_last_ok: dict[str, bool] = {}


def check_record(*, name: str, ok: bool, summary: str, details: dict[str, Any] | None = None) -> None:
    """Store a check's result; a failure is also logged at ERROR, naming what failed."""
    if not ok:
        log.error("audit %s check failed: %s", name, summary)
    elif _last_ok.get(name) is True:
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
    _last_ok[name] = ok


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
