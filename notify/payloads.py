"""What a webhook POST says: Governor's own JSON, or Alertmanager's webhook payload (version 4).

Alertmanager's format is the one receivers that already route alerts understand (PagerDuty,
Opsgenie and Grafana OnCall integrations, Alertmanager-to-anything bridges): a group of alerts,
each with labels, annotations, ``startsAt``/``endsAt`` in RFC 3339 and a fingerprint, under a
``status`` of ``firing`` or ``resolved``. Governor sends one alert per notification; its labels
carry ``alertname`` (the notification's kind), ``severity``, ``audience`` and the tenant's slug
where there is one, so routing trees can match on them.
"""

from __future__ import annotations

import datetime as dt
import hashlib

# Alertmanager writes a firing alert's ``endsAt`` as Go's zero time.
GO_ZERO_TIME = "0001-01-01T00:00:00Z"


def rfc3339(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def labels_of(note, tenant_slug: str | None) -> dict[str, str]:
    labels = {"alertname": note.kind, "severity": note.severity, "audience": note.audience}
    if tenant_slug:
        labels["tenant"] = tenant_slug
    for key, value in (note.payload.get("labels") or {}).items():
        labels.setdefault(str(key), str(value))
    return labels


def fingerprint(labels: dict[str, str]) -> str:
    """16 hex digits identifying the label set (Alertmanager's fingerprint is a 64-bit label hash)."""
    text = "\xff".join(f"{k}\xfe{labels[k]}" for k in sorted(labels))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def governor_payload(note, *, status: str, tenant_slug: str | None, console_url: str) -> dict:
    return {
        **{k: v for k, v in note.payload.items() if k != "labels"},
        "event": note.payload.get("event", note.kind),
        "notification_id": note.pk,
        "kind": note.kind,
        "severity": note.severity,
        "audience": note.audience,
        "tenant": tenant_slug,
        "status": status,
        "title": note.title,
        "body": note.body,
        "created_at": rfc3339(note.created_at),
        "resolved_at": rfc3339(note.resolved_at) if note.resolved_at else None,
        "url": console_url,
    }


def alertmanager_payload(
    note, *, status: str, tenant_slug: str | None, console_url: str, receiver: str
) -> dict:
    labels = labels_of(note, tenant_slug)
    annotations = {"summary": note.title, "description": note.body}
    ends = rfc3339(note.resolved_at) if status == "resolved" and note.resolved_at else GO_ZERO_TIME
    alert = {
        "status": status,
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(note.created_at),
        "endsAt": ends,
        "generatorURL": console_url,
        "fingerprint": fingerprint(labels),
    }
    group_labels = {"alertname": labels["alertname"]}
    return {
        "version": "4",
        "groupKey": "{}:{alertname=" + _quote(labels["alertname"]) + "}",
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": console_url.split("/notifications/")[0] or console_url,
        "alerts": [alert],
    }


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
