"""The application's only writes into the audit table: append an event, seal events.

Both go through ``SECURITY DEFINER`` functions owned by the schema owner (audit.privileges; ADR
0020): the application role holds no INSERT, UPDATE or DELETE on the table. Rows travel as JSON
keyed by column, so a column added later (the signature, nonce and key id of ADR 0018) needs no
change here or in the function.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.db import connection

from audit.format import VERSION
from audit.models import AuditEvent
from audit.raw_capture import SERVICE_FLAG

SEAL_COLUMNS = ("chain_index", "prev_hash", "hash")
# The same statement tells this transaction's capture triggers that a service records its changes
# itself (audit.raw_capture), saving the round trip of a separate set_config. The flag is set here,
# not inside audit_append: the capture trigger appends through that function too, and a flag set by
# its first capture would silence the transaction's later ones.
_APPEND = f"SELECT set_config('{SERVICE_FLAG}', 'service', true), audit_append(%s::jsonb)"


def _json(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def event_insert(*, fields: dict[str, Any]) -> AuditEvent:
    """Insert one unsealed (signed) event, mark the transaction as a service write, and return the
    event (``seq`` assigned by the database) without a model round trip.

    ``fields`` are model field names (no foreign keys here, so also the column names); JSON data
    for the JSON columns, a datetime for ``at``. ``version`` left out takes the column's default,
    the current format.
    """
    row = {name: _json(value) for name, value in fields.items() if name not in ("seq", *SEAL_COLUMNS)}
    with connection.cursor() as cursor:
        cursor.execute(_APPEND, [json.dumps(row)])
        seq = cursor.fetchone()[1]
    event = AuditEvent(seq=seq, **{"version": VERSION, **fields})
    event._state.adding = False
    event._state.db = connection.alias
    return event


def events_seal(*, events: Iterable[AuditEvent]) -> int:
    """Store the seal columns of events that are still unsealed; any other row makes it fail whole."""
    seals = [{"seq": e.seq, **{c: getattr(e, c) for c in SEAL_COLUMNS}} for e in events]
    with connection.cursor() as cursor:
        cursor.execute("SELECT audit_seal_apply(%s::jsonb)", [json.dumps(seals)])
        return cursor.fetchone()[0]
