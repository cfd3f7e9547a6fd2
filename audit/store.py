"""The one INSERT of an audit event (the application's only write path into the table besides the
seal). Kept alone, as plain SQL, so that a database-side append function can replace the statement
without touching any caller."""

from __future__ import annotations

from typing import Any

from django.db import connection
from psycopg.types.json import Jsonb

from audit.models import AuditEvent
from audit.raw_capture import SERVICE_FLAG

COLUMNS = (
    "at", "actor", "actor_id", "role", "action", "object_type", "object_id", "object_repr", "tenant_id",
    "before", "after", "reason", "evidence", "request_id", "client_address", "nonce", "key_id", "signature",
)  # fmt: skip
_JSON = frozenset({"before", "after", "evidence"})
# The same statement tells this transaction's capture triggers that a service records its changes
# itself (audit.raw_capture), saving the round trip of a separate set_config.
_INSERT = (
    f"INSERT INTO audit_auditevent ({', '.join(COLUMNS)}) SELECT {', '.join(['%s'] * len(COLUMNS))}"
    f" FROM (SELECT set_config('{SERVICE_FLAG}', 'service', true)) AS service_write RETURNING seq, version"
)


def event_insert(*, fields: dict[str, Any]) -> AuditEvent:
    """Insert one unsealed, signed event (``seq`` assigned by the database), mark the transaction as a
    service write, and return the event without a model round trip: a governed write pays for one
    statement."""
    params = [Jsonb(fields[c]) if c in _JSON else fields[c] for c in COLUMNS]
    with connection.cursor() as cursor:
        cursor.execute(_INSERT, params)
        seq, version = cursor.fetchone()
    event = AuditEvent(seq=seq, version=version, **{c: fields[c] for c in COLUMNS})
    event._state.adding = False
    event._state.db = connection.alias
    return event
