"""Reads of the audit trail."""

from __future__ import annotations

from django.db.models import QuerySet

from audit.models import AuditEvent


def events_for_object(*, object_type: str, object_id: str | int) -> QuerySet[AuditEvent]:
    """One object's timeline, oldest first."""
    return AuditEvent.objects.filter(object_type=object_type, object_id=str(object_id)).order_by("seq")
