"""Writes that bypass the services are caught by a trigger at commit; service writes are not doubled.

The capture triggers are deferred to COMMIT; a test's transaction never commits, so each test fires
them with ``SET CONSTRAINTS ALL IMMEDIATE`` where a commit would.
"""

from __future__ import annotations

import pytest
from django.db import connection

from audit.models import AuditEvent
from audit.raw_capture import TRIGGER_NAME, install_raw_capture
from audit.services import audit_record, audit_seal
from tests.factories import GpuTypeFactory

pytestmark = pytest.mark.django_db


def _commit_point() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def _sql(sql: str, params: tuple = ()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.fixture
def scratch_table(settings):
    """A governed table of this test's own, so the checks do not depend on other apps' columns."""
    _sql("CREATE TABLE audit_scratch (id bigserial PRIMARY KEY, name text, tenant_id bigint, price numeric)")
    settings.AUDIT_GOVERNED_TABLES = [*settings.AUDIT_GOVERNED_TABLES, "audit_scratch"]
    assert "audit_scratch" in install_raw_capture()
    return "audit_scratch"


def _triggered_tables() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE t.tgname = %s",
            [TRIGGER_NAME],
        )
        return {row[0] for row in cursor.fetchall()}


def test_every_governed_table_carries_the_capture_trigger(settings):
    assert set(settings.AUDIT_GOVERNED_TABLES) <= _triggered_tables()


def test_raw_insert_update_delete_are_recorded_with_the_database_user(scratch_table):
    _sql("INSERT INTO audit_scratch (name, tenant_id, price) VALUES ('a', 7, 1.50)")
    _sql("UPDATE audit_scratch SET price = 2.25 WHERE name = 'a'")
    _sql("DELETE FROM audit_scratch WHERE name = 'a'")
    _commit_point()
    events = list(AuditEvent.objects.filter(object_type="audit_scratch").order_by("seq"))
    assert [e.action for e in events] == ["raw.insert", "raw.update", "raw.delete"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        user = cursor.fetchone()[0]
    assert {e.actor for e in events} == {f"db:{user}"}
    insert, update, delete = events
    assert insert.after["name"] == "a" and insert.before == {} and insert.tenant_id == 7
    assert update.before == {"price": 1.50} and update.after == {"price": 2.25}  # only what changed
    assert delete.before["name"] == "a" and delete.after == {}
    assert insert.object_id == update.object_id == delete.object_id != ""
    assert insert.evidence["table"] == "audit_scratch"


def test_update_that_changes_nothing_is_not_recorded(scratch_table):
    _sql("INSERT INTO audit_scratch (name) VALUES ('a')")
    _commit_point()
    _sql("UPDATE audit_scratch SET name = 'a'")
    _commit_point()
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["raw.insert"]


def test_service_write_is_recorded_once(scratch_table):
    # The service pattern: write, then audit_record in the same transaction (the order does not matter).
    _sql("INSERT INTO audit_scratch (name) VALUES ('svc')")
    audit_record(actor="controller", action="scratch.create", object_type="audit_scratch", object_id=1)
    _commit_point()
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["scratch.create"]


def test_orm_write_to_a_real_governed_table_without_audit_record_is_caught():
    gpu = GpuTypeFactory()
    _commit_point()
    event = AuditEvent.objects.get(action="raw.insert")
    assert event.object_type == "catalog.gputype"  # named like the services name it
    assert event.object_id == str(gpu.pk)
    assert event.after["name"] == gpu.name


def test_raw_events_join_the_chain(scratch_table):
    _sql("INSERT INTO audit_scratch (name) VALUES ('a')")
    _commit_point()
    head = audit_seal()
    assert head.index == 0 and AuditEvent.objects.get().hash == head.hash


def test_install_is_idempotent_and_follows_the_setting(settings, scratch_table):
    install_raw_capture()
    install_raw_capture()
    assert "audit_scratch" in _triggered_tables()
    _sql("INSERT INTO audit_scratch (name) VALUES ('once')")
    _commit_point()
    assert AuditEvent.objects.count() == 1  # one trigger, not one per install
    settings.AUDIT_GOVERNED_TABLES = [t for t in settings.AUDIT_GOVERNED_TABLES if t != "audit_scratch"]
    install_raw_capture()
    assert "audit_scratch" not in _triggered_tables()


def test_missing_governed_table_is_skipped(settings):
    settings.AUDIT_GOVERNED_TABLES = [*settings.AUDIT_GOVERNED_TABLES, "no_such_table"]
    assert "no_such_table" not in install_raw_capture()


def test_operational_columns_alone_are_not_a_governed_change(scratch_table, settings):
    """Workers keep observed status up to date; only changes to other columns enter the trail."""
    _sql("ALTER TABLE audit_scratch ADD COLUMN status text")
    settings.AUDIT_OPERATIONAL_COLUMNS = {"audit_scratch": ["status"]}
    install_raw_capture()
    _sql("INSERT INTO audit_scratch (name, status) VALUES ('a', 'PENDING')")
    _commit_point()
    _sql("UPDATE audit_scratch SET status = 'RUNNING' WHERE name = 'a'")
    _commit_point()
    _sql("UPDATE audit_scratch SET status = 'STOPPED', price = 3 WHERE name = 'a'")
    _commit_point()
    events = list(AuditEvent.objects.filter(object_type="audit_scratch").order_by("seq"))
    assert [e.action for e in events] == ["raw.insert", "raw.update"]
    assert events[1].before == {"price": None} and events[1].after == {"price": 3}


def test_operational_columns_must_be_column_names(settings):
    settings.AUDIT_OPERATIONAL_COLUMNS = {"catalog_gputype": ["name'); DROP TABLE x; --"]}
    with pytest.raises(ValueError, match="not a column"):
        install_raw_capture()
