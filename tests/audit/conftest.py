"""Audit test helpers: a private published-head key and witness per test, tampering as a superuser would."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from audit.head import head_forget


@pytest.fixture(autouse=True)
def _own_head_key(settings, tmp_path):
    """Each test publishes its chain head under its own Redis key, signs with its own key and
    witnesses its checkpoints in its own file, and removes the Redis key afterwards."""
    settings.AUDIT_HEAD_KEY = f"governor:audit:head:test:{uuid.uuid4().hex}"
    settings.AUDIT_WITNESS_PATH = str(tmp_path / "audit-witness.jsonl")
    settings.AUDIT_SIGNING_KEY_FILE = str(tmp_path / "audit-signing-key")
    from audit import alarms

    alarms._last_ok.clear()
    yield
    head_forget()


def tamper(sql: str, params: tuple = ()) -> None:
    """Run SQL with the audit table's triggers off, as a PostgreSQL superuser could."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql, params)
        cursor.execute("SET LOCAL session_replication_role = DEFAULT")


def record_events(n: int, *, action: str = "thing.change") -> None:
    from audit.services import audit_record

    for i in range(n):
        audit_record(
            actor="controller",
            action=action,
            object_type="tests.thing",
            object_id=i,
            before={"n": i},
            after={"n": i + 1, "note": "café ✓"},
            reason=f"step {i}",
        )
