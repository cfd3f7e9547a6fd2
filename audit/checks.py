"""Automatic checks of the trail and their last results: what the Audit page's badge shows.

Each check keeps one ``AuditCheck`` row (its name, the verdict, when it ran, a summary, details):
``drift`` (audit.drift, here), ``chain`` (``audit.services.audit_verify_record``), ``seal`` and
``witness`` (audit.alarms). The badge reads only those rows, so it turns red as soon as a periodic
run finds something, without anyone pressing a button, and it says when each check last ran.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from audit import alarms
from audit.drift import describe_finding, drift_findings
from audit.models import AuditCheck

DRIFT = "drift"
CHAIN = "chain"
LABELS = {
    CHAIN: "Chain verifies",
    DRIFT: "Governed rows match their events",
    "seal": "Every pending event authenticated and sealed",
    "witness": "Checkpoints witnessed",
}
# The summary names at most this many findings (the details and the command keep them all).
FINDINGS_NAMED = 20


def check_store(*, name: str, ok: bool, summary: str, details: dict[str, Any] | None = None) -> AuditCheck:
    """Store a check's latest result (audit.alarms: a failure is logged, an unchanged OK refreshed
    at most once a minute) and return the stored row."""
    alarms.check_record(name=name, ok=ok, summary=summary, details=details)
    return AuditCheck.objects.get(name=name)


def drift_check_run() -> AuditCheck:
    """Compare every governed row with its events and store the verdict (audit_verify, beat).

    A check that cannot run is stored as failed with the error (never left looking green), then
    the error propagates.
    """
    started = time.perf_counter()
    try:
        checked, findings = drift_findings()
    except Exception as exc:
        check_store(
            name=DRIFT, ok=False, summary=f"the drift check could not run: {exc}", details={"error": str(exc)}
        )
        raise
    seconds = round(time.perf_counter() - started, 3)
    if findings:
        named = "; ".join(describe_finding(f) for f in findings[:FINDINGS_NAMED])
        summary = f"{len(findings)} governed object(s) changed without an event: {named}"
    else:
        summary = f"{checked} governed rows match their events"
    return check_store(
        name=DRIFT,
        ok=not findings,
        summary=summary,
        details={"checked": checked, "seconds": seconds, "findings": findings},
    )


# --- reads -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's latest result as the badge shows it."""

    check: AuditCheck
    stale: bool

    @property
    def name(self) -> str:
        return self.check.name

    @property
    def label(self) -> str:
        return LABELS.get(self.check.name, self.check.name)

    @property
    def lines(self) -> list[str]:
        """What it found, one line each (drift: each object and its fields)."""
        if self.check.ok:
            return []
        findings = (self.check.details or {}).get("findings") if self.check.name == DRIFT else None
        if findings:
            return [describe_finding(f) for f in findings[:FINDINGS_NAMED]]
        return [self.check.summary]

    @property
    def hidden(self) -> int:
        findings = (self.check.details or {}).get("findings") or []
        return max(0, len(findings) - FINDINGS_NAMED) if self.check.name == DRIFT else 0


@dataclass(frozen=True, slots=True)
class CheckResults:
    """Every check's latest result; red when any failed, green only when chain and drift both passed."""

    results: list[CheckResult]

    @property
    def state(self) -> str:
        if any(not r.check.ok for r in self.results):
            return "failed"
        present = {r.name for r in self.results}
        if {CHAIN, DRIFT} <= present and not any(r.stale for r in self.results):
            return "ok"
        return "unknown"

    @property
    def missing(self) -> list[str]:
        present = {r.name for r in self.results}
        return [LABELS[name] for name in (CHAIN, DRIFT) if name not in present]


def check_results(*, now: dt.datetime | None = None) -> CheckResults:
    """The stored result of every check (one query)."""
    now = now or timezone.now()
    stale_after = dt.timedelta(seconds=getattr(settings, "AUDIT_CHECK_STALE_S", 3600))
    return CheckResults(
        results=[
            CheckResult(check=check, stale=now - check.checked_at > stale_after)
            for check in AuditCheck.objects.order_by("name")
        ]
    )
