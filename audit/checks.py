"""Periodic checks of the trail and their latest results: what the Audit page's health badge shows.

Each run is an ``AuditCheck`` row: the drift check (``audit.drift``) stores ``kind="drift"``; the
chain and checkpoint verification stores ``kind="chain"`` through the same ``audit_check_run``.
The badge reads only the latest finished run of each kind, so it turns red as soon as a periodic
run finds something, without anyone pressing a button, and it says when each check last ran.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from audit.drift import describe_finding, drift_findings
from audit.head import published_head
from audit.models import AuditCheck
from audit.selectors import chain_verify
from audit.services import audit_seal

log = logging.getLogger(__name__)

# The page lists at most this many findings of one check (the command and the JSON keep them all).
FINDINGS_SHOWN = 20


def audit_check_run(*, kind: str, run: Callable[[], tuple[int, list[dict[str, Any]]]]) -> AuditCheck:
    """Run one check and store its result; ``run`` returns (items checked, findings).

    A check that raises is stored with ``ok=None`` and its error (the badge shows it as failed to
    run, never as passing), then the exception propagates.
    """
    check = AuditCheck.objects.create(kind=kind, started_at=timezone.now())
    try:
        checked, findings = run()
    except Exception as exc:
        AuditCheck.objects.filter(pk=check.pk).update(finished_at=timezone.now(), error=str(exc)[:2000])
        raise
    check.finished_at = timezone.now()
    check.checked = checked
    check.findings = findings
    check.ok = not findings
    check.save(update_fields=["finished_at", "checked", "findings", "ok"])
    if findings:
        log.error(
            "audit %s check: %d finding(s): %s",
            kind,
            len(findings),
            "; ".join(describe_finding(f) for f in findings[:FINDINGS_SHOWN])
            if kind == "drift"
            else findings,
        )
    return check


def _chain_findings() -> tuple[int, list[dict[str, Any]]]:
    audit_seal()
    result = chain_verify(published=published_head())
    if result.ok:
        return result.checked, []
    return result.checked, [
        {"message": result.describe(), "bad_index": result.bad_index, "bad_seq": result.bad_seq}
    ]


def chain_check_run() -> AuditCheck:
    """Seal, walk the chain, compare with the published head; store the result.

    The chain/checkpoint verification (issue 26 items 2-3) replaces ``_chain_findings``' body and
    keeps this entry point and the ``message`` key of its findings.
    """
    return audit_check_run(kind=AuditCheck.Kind.CHAIN, run=_chain_findings)


def drift_check_run() -> AuditCheck:
    """Compare every governed row with its events and store the result (``manage.py audit_verify``, beat)."""
    return audit_check_run(kind=AuditCheck.Kind.DRIFT, run=drift_findings)


# --- reads -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckStatus:
    """The latest finished run of one kind of check, as the badge shows it."""

    kind: str
    label: str
    check: AuditCheck | None
    stale: bool

    @property
    def state(self) -> str:
        """``ok``, ``failed`` (findings), ``error`` (could not run), ``never`` (no run yet)."""
        if self.check is None:
            return "never"
        if self.check.ok is None:
            return "error"
        return "ok" if self.check.ok else "failed"

    @property
    def lines(self) -> list[str]:
        if self.check is None or not self.check.findings:
            return []
        shown = self.check.findings[:FINDINGS_SHOWN]
        if self.kind == AuditCheck.Kind.DRIFT:
            return [describe_finding(f) for f in shown]
        return [f.get("message") or str(f) if isinstance(f, dict) else str(f) for f in shown]


@dataclass(frozen=True, slots=True)
class AuditHealth:
    """Every kind of check's latest result; red when any found something or failed to run."""

    checks: list[CheckStatus]

    @property
    def state(self) -> str:
        states = {c.state for c in self.checks}
        if states & {"failed", "error"}:
            return "failed"
        if states == {"ok"} and not any(c.stale for c in self.checks):
            return "ok"
        return "unknown"


def audit_health(*, now: dt.datetime | None = None) -> AuditHealth:
    """The latest finished run of each kind of check (one query per kind, on an index)."""
    now = now or timezone.now()
    stale_after = dt.timedelta(seconds=getattr(settings, "AUDIT_CHECK_STALE_S", 3600))
    statuses = []
    for kind, label in AuditCheck.Kind.choices:
        latest = (
            AuditCheck.objects.filter(kind=kind, finished_at__isnull=False).order_by("-started_at").first()
        )
        stale = latest is None or now - latest.finished_at > stale_after
        statuses.append(CheckStatus(kind=kind, label=label, check=latest, stale=stale))
    return AuditHealth(checks=statuses)
