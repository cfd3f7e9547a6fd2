"""The one INSERT of an audit event (the application's only write path into the table besides the
seal). Kept alone so that the database-side append function can wrap it without touching callers."""

from __future__ import annotations

from typing import Any

from audit.models import AuditEvent


def event_insert(*, fields: dict[str, Any]) -> AuditEvent:
    """Insert one unsealed, signed event and return it (``seq`` assigned by the database)."""
    return AuditEvent.objects.create(**fields)
