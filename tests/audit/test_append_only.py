"""The database itself refuses to change or remove audit events (raw SQL, not the ORM)."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AuditEvent
from audit.services import audit_seal
from tests.audit.conftest import record_events

pytestmark = pytest.mark.django_db


def _refused(sql: str, params: tuple = ()) -> str:
    with pytest.raises(DatabaseError) as excinfo, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
    return str(excinfo.value)


def test_update_of_a_sealed_event_is_refused():
    record_events(1)
    audit_seal()
    message = _refused("UPDATE audit_auditevent SET reason = 'rewritten'")
    assert "append-only" in message
    assert AuditEvent.objects.get().reason == "step 0"


def test_update_of_an_unsealed_event_is_refused():
    record_events(1)
    assert "append-only" in _refused("UPDATE audit_auditevent SET actor = 'someone-else'")


def test_seal_cannot_smuggle_in_another_change():
    record_events(1)
    message = _refused(
        "UPDATE audit_auditevent SET chain_index = 0, prev_hash = %s, hash = %s, reason = 'x'",
        ("0" * 64, "1" * 64),
    )
    assert "append-only" in message


def test_resealing_a_sealed_event_is_refused():
    record_events(1)
    audit_seal()
    assert "append-only" in _refused("UPDATE audit_auditevent SET hash = %s", ("f" * 64,))
    assert "append-only" in _refused(
        "UPDATE audit_auditevent SET hash = NULL, chain_index = NULL, prev_hash = NULL"
    )


def test_delete_is_refused():
    record_events(2)
    audit_seal()
    assert "Cannot delete" in _refused("DELETE FROM audit_auditevent")
    assert AuditEvent.objects.count() == 2


def test_truncate_is_refused():
    record_events(2)
    assert "cannot truncate" in _refused("TRUNCATE audit_auditevent")
    assert "cannot truncate" in _refused("TRUNCATE audit_auditevent RESTART IDENTITY CASCADE")
    assert AuditEvent.objects.count() == 2


def test_orm_delete_is_refused_too():
    record_events(1)
    with pytest.raises(DatabaseError), transaction.atomic():
        AuditEvent.objects.all().delete()


def test_insert_stays_allowed_and_the_seal_update_is_accepted():
    record_events(1)
    head = audit_seal()
    assert head.index == 0 and AuditEvent.objects.get().hash == head.hash


@pytest.mark.django_db(transaction=True)
def test_flush_empties_the_trail_as_a_superuser_and_leaves_it_protected():
    from django.core.management import call_command

    record_events(2)
    audit_seal()
    call_command("flush", interactive=False, verbosity=0)
    assert AuditEvent.objects.count() == 0
    record_events(1)
    assert "cannot truncate" in _refused("TRUNCATE audit_auditevent")  # the replica role did not stick
