"""The notify app's reactions to events (registered in ``settings.GOVERNOR_REACTIONS``, ADR 0030).

Each runs at least once per event, so each is idempotent: a delivery's task sends only what is still
pending, and a page is made once per cause (its ``dedup_key`` is the event's kind and subject).
"""

from __future__ import annotations

from notify.models import Severity
from notify.services import enqueue_delivery, notifications_resolve_kind, notify_oncall

# What each operational signal says to the on-call, by kind. The payload's keys fill the body.
ONCALL_SIGNALS = {
    "deployments.cluster_unreachable": (
        Severity.CRITICAL,
        "Ray cluster unreachable: deployments are in status unknown",
        "The reconciler cannot reach Ray ({message}). The gateway stops routing to deployments whose "
        "health is unknown and answers 503 with Retry-After until Ray is heard from again.",
    ),
    "deployments.analysis_failed": (
        Severity.WARNING,
        "Rollout {rollout}: canary analysis {verdict}",
        "An analysis run of rollout {rollout} ended {verdict} (failed checks: {failed_checks}). "
        "The rollout aborts or pauses by its plan; see its analysis on the rollout page.",
    ),
    "evaluations.gate_failed": (
        Severity.WARNING,
        "Model version {version}: {kind} gate {verdict}",
        "Gate run {gate_run} of model version {version} ended {verdict}. The version cannot be "
        "promoted unless a platform admin overrides the gate with a reason.",
    ),
}


class _Blank(dict):
    def __missing__(self, key):
        return "—"


def delivery_enqueue(event) -> None:
    """A webhook delivery was queued: its first attempt, now (the retry beat sends the rest)."""
    enqueue_delivery(event.payload["delivery"])


def page_oncall(event) -> None:
    """An operational signal that needs a person: page the platform's on-call."""
    severity, title, body = ONCALL_SIGNALS.get(
        event.kind, (Severity.WARNING, event.kind, "Signal {kind} on {subject}.")
    )
    values = _Blank({**{k: v for k, v in event.payload.items()}, "kind": event.payload.get("kind", event.kind),
                     "subject": event.subject})  # fmt: skip
    notify_oncall(
        kind=event.kind,
        title=title.format_map(values),
        body=body.format_map(values),
        payload={"event": event.kind, "subject": event.subject, **event.payload},
        severity=severity,
        dedup_key=f"{event.kind}:{event.subject or event.pk}",
    )


def unreachable_resolve(event) -> None:
    """Ray was heard from again (the reconciler saw statuses change): the unreachable page is over."""
    notifications_resolve_kind(kind="deployments.cluster_unreachable")
