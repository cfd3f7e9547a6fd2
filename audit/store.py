"""The application's only writes into the audit table: append an event, seal events.

Both go through ``SECURITY DEFINER`` functions owned by the schema owner (audit.privileges; ADR
0020): the application role holds no INSERT, UPDATE or DELETE on the table. Rows travel as JSON
keyed by column, so a column added later (a signature, a key id) needs no change here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.db import connection

from audit.models import AuditEvent

SEAL_COLUMNS = ("chain_index", "prev_hash", "hash")


def _json(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def event_insert(*, fields: dict[str, Any]) -> AuditEvent:
    """Insert one unsealed event and return it (``seq`` assigned by the database).

    ``fields`` are model field names (no foreign keys here, so also the column names); JSON data
    for the JSON columns, a datetime for ``at``.
    """
    row = {name: _json(value) for name, value in fields.items() if name not in ("seq", *SEAL_COLUMNS)}
    with connection.cursor() as cursor:
        cursor.execute("SELECT audit_append(%s::jsonb)", [json.dumps(row)])
        seq = cursor.fetchone()[0]
    event = AuditEvent(seq=seq, **fields)
    event._state.adding = False
    event._state.db = connection.alias
    return event


def events_seal(*, events: Iterable[AuditEvent]) -> int:
    """Store the seal columns of events that are still unsealed; any other row makes it fail whole."""
    seals = [{"seq": e.seq, **{c: getattr(e, c) for c in SEAL_COLUMNS}} for e in events]
    with connection.cursor() as cursor:
        cursor.execute("SELECT audit_seal_apply(%s::jsonb)", [json.dumps(seals)])
        return cursor.fetchone()[0]
