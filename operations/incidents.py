"""Incidents: opened and joined by SLO breaches, diagnosed, resolved by recovery; and the
postmortem they export. Called by ``operations.reactions`` (each idempotent: an entry carries the
event that wrote it) and by the incident pages."""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.selectors import events_filtered
from billing.selectors.keys import tenant_names
from billing.selectors.usage import usage_route_samples
from operations import diagnosis, mitigations, playbooks
from operations.models import Incident, IncidentEntry, SloBreach, SloKind
from operations.scrape import engine_intervals
from operations.timeline import entry_add

# The baseline is this many fast long windows (1 h at full scale), just before the incident window.
BASELINE_FACTOR = 6
# The incident window holds at least this many requests (when the long window has them).
WINDOW_REQUESTS = 50
# Changes this long before the window still count as "just before".
CHANGE_LEAD = dt.timedelta(minutes=30)


def _entry(incident: Incident, **fields) -> None:
    entry_add(incident_id=incident.pk, **fields)


def incident_diagnose(incident: Incident, *, breach: SloBreach, now: dt.datetime | None = None) -> dict:
    """Run the decision trees over the time the breach is about and the time before it.

    The window is the fast condition's short window (5 min at full scale: what is burning now),
    stretched back to hold at least ``WINDOW_REQUESTS`` requests but never past the fast long window
    (1 h). A longer window would dilute a fault that started minutes ago with the healthy traffic
    before it. The baseline is the ``BASELINE_FACTOR`` long windows just before the window."""
    now = now or timezone.now()
    scale = breach.slo.window_scale
    long_s, short_s = max(60.0, 3600.0 * scale), max(1.0, 300.0 * scale)
    name = incident.route.public_name
    recent = usage_route_samples(public_model=name, since=now - dt.timedelta(seconds=long_s), until=now)
    window = [r for r in recent if r["started_at"] >= now - dt.timedelta(seconds=short_s)]
    if len(window) < WINDOW_REQUESTS:
        window = recent[-WINDOW_REQUESTS:]
    start = window[0]["started_at"] if window else now - dt.timedelta(seconds=short_s)
    start = min(start, now - dt.timedelta(seconds=short_s))
    base_start = start - dt.timedelta(seconds=long_s * BASELINE_FACTOR)
    baseline = usage_route_samples(public_model=name, since=base_start, until=start)
    changes = [
        {"at": e.at.isoformat().replace("+00:00", "Z"), "action": e.action, "actor": e.actor,
         "object_repr": e.object_repr, "seq": e.seq}
        for e in events_filtered(since=start - CHANGE_LEAD, until=now)
    ]  # fmt: skip
    kind = breach.slo.kind if breach.slo.kind in (SloKind.TTFT, SloKind.TPOT) else "ttft"
    deps = {r["deployment_id"] for r in window + baseline if r["deployment_id"]}
    slugs = {str(r["deployment_id"]): r["deployment_slug"] for r in window + baseline if r["deployment_id"]}

    def engines(since, until) -> dict:  # keyed by slug, as the rest of the evidence is
        return {slugs.get(k) or f"deployment {k}": v
                for k, v in engine_intervals(deployment_ids=deps, since=since, until=until).items()}  # fmt: skip

    result = diagnosis.diagnose(
        kind=kind, window=window, baseline=baseline, window_s=(now - start).total_seconds(),
        baseline_s=(start - base_start).total_seconds(), changes=changes,
        engine_window=engines(start, now), engine_baseline=engines(base_start, start),
    )  # fmt: skip
    names = tenant_names(tenant_ids=result["tenants"].keys())
    for tenant, row in result["tenants"].items():
        row["name"] = names.get(tenant, "")
    return result


def incident_for_breach(*, breach_id: int, source: str, now: dt.datetime | None = None) -> Incident | None:
    """Open the route's incident (or join the open one) for a breach, diagnose it if new.

    ``now`` defaults to the breach's start: the diagnosis weighs the evidence up to the moment the
    breach was detected, and a playbook's time box counts from then, however late the reaction ran
    (and in a rehearsal's virtual time, which is the breach's own)."""
    breach = SloBreach.objects.select_related("slo__route").filter(pk=breach_id).first()
    if breach is None:
        return None
    now = now or breach.started_at
    route = breach.slo.route
    with transaction.atomic():
        incident = (
            Incident.objects.select_for_update().filter(route=route, status=Incident.Status.OPEN).first()
        )
        created = False
        if incident is None:
            try:
                with transaction.atomic():
                    incident = Incident.objects.create(
                        route=route, severity=breach.severity, opened_at=breach.started_at,
                        title=f"{route.public_name}: {breach.slo.objective} breached", rehearsal=route.rehearsal,
                    )  # fmt: skip
                    created = True
            except IntegrityError:
                incident = Incident.objects.select_for_update().get(route=route, status=Incident.Status.OPEN)
        escalated = not created and breach.severity == "page" and incident.severity != "page"
        if breach.severity == "page" and incident.severity != "page":
            incident.severity = "page"
            incident.save(update_fields=["severity"])
        _entry(incident, kind=IncidentEntry.Kind.BREACH, at=breach.started_at, source=source,
               text=f"{breach.slo.objective}: {breach.severity} ({breach.condition} windows), burn {breach.peak_burn:.1f}×",
               data={"breach": breach.pk, "slo": breach.slo_id})  # fmt: skip
    # A new incident is diagnosed; so is one that escalated from a ticket to a page, or whose diagnosis
    # named no cause, with the evidence the new breach brings.
    if created or escalated or not (incident.diagnosis or {}).get("cause"):
        result = incident_diagnose(incident, breach=breach, now=now)
        Incident.objects.filter(pk=incident.pk).update(diagnosis=result)
        incident.diagnosis = result
        _entry(incident, kind=IncidentEntry.Kind.DIAGNOSIS, at=now, source=f"diagnosis:{breach.pk}",
               text=f"Most likely: {result['cause'] or 'unknown'}. {result['summary']}",
               data={"cause": result["cause"]})  # fmt: skip
        mitigations.mitigations_propose(incident=incident, now=now)
    return incident


def incident_recovery(*, breach_id: int, source: str, now: dt.datetime | None = None) -> Incident | None:
    """A breach ended: note it; resolve the incident when none of the route's SLOs still breaches."""
    now = now or timezone.now()
    breach = SloBreach.objects.select_related("slo__route").filter(pk=breach_id).first()
    if breach is None:
        return None
    with transaction.atomic():
        incident = (
            Incident.objects.select_for_update()
            .filter(route=breach.slo.route, opened_at__lte=breach.ended_at or now)
            .order_by("-opened_at")
            .first()
        )
        if incident is None:
            return None
        _entry(incident, kind=IncidentEntry.Kind.RECOVERY, at=breach.ended_at or now, source=source,
               text=f"{breach.slo.objective}: {breach.severity} condition no longer holds",
               data={"breach": breach.pk})  # fmt: skip
        still = SloBreach.objects.filter(slo__route=breach.slo.route, ended_at__isnull=True).exists()
        if incident.status == Incident.Status.OPEN and not still:
            incident.status, incident.resolved_at = Incident.Status.RESOLVED, breach.ended_at or now
            incident.save(update_fields=["status", "resolved_at"])
            _entry(incident, kind=IncidentEntry.Kind.RESOLVED, at=incident.resolved_at, source=f"resolved:{source}",
                   text="Every SLO of the route holds again")  # fmt: skip
    return incident


# --- the postmortem --------------------------------------------------------------------------------


def _iso(at: dt.datetime | None) -> str | None:
    return at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if at else None


def postmortem_json(incident: Incident) -> dict:
    entries = list(incident.entries.all())
    duration = ((incident.resolved_at or timezone.now()) - incident.opened_at).total_seconds()
    return {
        "incident": incident.pk,
        "route": incident.route.public_name,
        "title": incident.title,
        "status": incident.status,
        "severity": incident.severity,
        "rehearsal": incident.rehearsal,
        "opened_at": _iso(incident.opened_at),
        "resolved_at": _iso(incident.resolved_at),
        "duration_s": round(duration, 1),
        "diagnosis": incident.diagnosis,
        "playbook": playbooks.suggest(incident.diagnosis or {}),
        "mitigations": [
            {
                "id": m.pk,
                "kind": m.kind,
                "params": m.params,
                "summary": m.summary,
                "why": m.why,
                "mode": m.mode,
                "state": m.state,
                "proposed_at": _iso(m.proposed_at),
                "applied_at": _iso(m.applied_at),
                "applied_by": m.applied_by,
                "expires_at": _iso(m.expires_at),
                "ended_at": _iso(m.ended_at),
                "ended_by": m.ended_by,
                "outcome": m.outcome,
            }
            for m in incident.mitigations.all()
        ],  # fmt: skip
        "timeline": [{"at": _iso(e.at), "kind": e.kind, "text": e.text, "data": e.data} for e in entries],
    }


def postmortem_markdown(incident: Incident) -> str:
    pm = postmortem_json(incident)
    d = pm["diagnosis"] or {}
    lines = [
        f"# Postmortem: {pm['title']}",
        "",
        f"- Route: `{pm['route']}`" + (" (rehearsal)" if pm["rehearsal"] else ""),
        f"- Severity: {pm['severity']}; status: {pm['status']}",
        f"- Opened: {pm['opened_at']}; resolved: {pm['resolved_at'] or 'not yet'}; duration: {pm['duration_s']:.0f} s",
        "",
        "## Diagnosis",
        "",
        f"Most likely cause: **{d.get('cause') or 'unknown'}**. {d.get('summary', '')}",
        "",
        "| branch | verdict | evidence |",
        "|---|---|---|",
    ]
    for b in d.get("branches", []):
        lines.append(f"| {b['cause']} | {b['verdict']} | {b['summary'].replace('|', '/')} |")
    suggestions = playbooks.suggest(d)
    if suggestions:
        lines += ["", "## Playbook (suggested)", ""]
        lines += [f"{i}. {s['action']} ({s['why']})" for i, s in enumerate(suggestions, 1)]
    if pm["mitigations"]:
        lines += [
            "",
            "## Actions",
            "",
            "| action | state | applied | ended | outcome |",
            "|---|---|---|---|---|",
        ]
        for m in pm["mitigations"]:
            applied = f"{m['applied_at']} by {m['applied_by']}" if m["applied_at"] else "—"
            ended = f"{m['ended_at']} by {m['ended_by']}" if m["ended_at"] else "—"
            lines.append(f"| {m['summary'].replace('|', '/')} | {m['state']} | {applied} | {ended} | "
                         f"{(m['outcome'] or '').replace('|', '/')} |")  # fmt: skip
    lines += ["", "## Timeline (UTC)", ""]
    for e in pm["timeline"]:
        lines.append(f"- {e['at']} · {e['kind']} · {e['text']}")
    return "\n".join(lines) + "\n"
