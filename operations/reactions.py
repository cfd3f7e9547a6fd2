"""Operations' reactions (``settings.GOVERNOR_REACTIONS``, ADR 0030): a breach pages the on-call (not
for a rehearsal's route) and opens (or joins) the route's incident; a recovery resolves both. Idempotent: the page's
``dedup_key`` is the breach, and each incident entry carries the event that wrote it."""

from __future__ import annotations

from notify.services import notification_resolve, notify_oncall
from operations import rehearsals
from operations.incidents import incident_for_breach, incident_recovery


def _key(event) -> str:
    return f"slo-breach:{event.payload['breach']}"


def breach_page(event) -> None:
    p = event.payload
    if p.get("rehearsal"):
        return  # a rehearsal's incident is on its page, labelled; nobody is woken for it
    window = f"{p['long_s']:g} s and {p['short_s']:g} s" if p["long_s"] < 3600 else (
        f"{p['long_s'] / 3600:g} h and {p['short_s'] / 60:g} min")  # fmt: skip
    notify_oncall(
        kind="operations.slo_breached",
        title=f"{p['route']}: SLO burning {p['burn']:g}× its budget ({p['objective']})",
        body=(
            f"Route {p['route']} is spending its error budget {p['burn']:g} times as fast as the SLO "
            f"allows over the last {window} (alert threshold {p['threshold']:g}×, the SRE workbook's "
            f"'{p['condition']}' condition). See the route's SLO panel for each window's counts."
        ),
        payload={
            "event": "operations.slo_breached",
            **p,
            "labels": {"route": p["route"], "condition": p["condition"]},
        },
        severity="critical" if p["severity"] == "page" else "warning",
        dedup_key=_key(event),
    )


def recovery_resolve(event) -> None:
    notification_resolve(dedup_key=_key(event))


def incident_open(event) -> None:
    """A breach opens the route's incident, or joins the open one, and diagnoses a new one."""
    incident_for_breach(breach_id=event.payload["breach"], source=f"event:{event.pk}")


def incident_recover(event) -> None:
    incident_recovery(breach_id=event.payload["breach"], source=f"event:{event.pk}")


def rehearsal_enqueue(event) -> None:
    """A console rehearsal was queued: a worker runs it (a second delivery claims nothing)."""
    rehearsals._enqueue(event.payload["run"])
