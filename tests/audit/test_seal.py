"""Events are inserted unsealed and sealed in order by one serialised step; the head is published."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from audit.chain import GENESIS_HASH
from audit.head import published_head
from audit.models import AuditEvent
from audit.selectors import chain_head, chain_verify, event_record
from audit.services import audit_record, audit_seal
from tests.audit.conftest import record_events

pytestmark = pytest.mark.django_db


def test_recorded_event_is_unsealed_until_the_seal_chains_it_in_order():
    record_events(3)
    assert AuditEvent.objects.filter(hash__isnull=True).count() == 3
    head = audit_seal()
    events = list(AuditEvent.objects.order_by("seq"))
    assert [e.chain_index for e in events] == [0, 1, 2]
    assert events[0].prev_hash == GENESIS_HASH
    assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]
    assert head.index == 2 and head.hash == events[-1].hash


def test_seal_publishes_the_head_and_the_chain_verifies_against_it():
    record_events(4)
    head = audit_seal()
    assert published_head() == head
    assert chain_verify(published=head).ok


def test_seal_continues_the_chain_across_batches_and_calls():
    record_events(7)
    audit_seal(batch=3)
    record_events(2)
    head = audit_seal(batch=3)
    assert head.index == 8
    assert sorted(AuditEvent.objects.values_list("chain_index", flat=True)) == list(range(9))
    assert chain_verify(published=published_head()).ok


def test_sealed_hash_is_recomputable_from_the_stored_row():
    record_events(1)
    audit_seal()
    from audit.format import leaf_hash

    event = AuditEvent.objects.get()
    assert leaf_hash(event_record(event)) == event.hash
    assert event_record(event)["after"] == {"n": 1, "note": "café ✓"}


def test_published_head_never_moves_backwards():
    from audit.chain import Head
    from audit.head import head_publish

    head_publish(head=Head(5, "a" * 64))
    head_publish(head=Head(3, "b" * 64))
    assert published_head() == Head(5, "a" * 64)


def test_audit_record_seals_after_commit(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        audit_record(actor="controller", action="thing.change", object_type="tests.thing", object_id=1)
        audit_record(actor="controller", action="thing.change", object_type="tests.thing", object_id=2)
    assert len(callbacks) == 1  # one seal per transaction, however many events it recorded
    assert not AuditEvent.objects.filter(hash__isnull=True).exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_still_give_one_gap_free_valid_chain():
    """Several threads record events in their own transactions at once, each sealing after its
    commit (skipping when another seals); a final seal (the beat's job) leaves one valid chain."""
    writers, per_writer = 4, 15
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def write(worker: int) -> None:
        try:
            start.wait(timeout=30)
            for i in range(per_writer):
                with transaction.atomic():
                    audit_record(
                        actor=f"writer-{worker}",
                        action="thing.change",
                        object_type="tests.thing",
                        object_id=i,
                    )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    head = audit_seal()
    total = writers * per_writer
    assert AuditEvent.objects.count() == total
    assert head.index == total - 1
    assert sorted(AuditEvent.objects.values_list("chain_index", flat=True)) == list(range(total))
    result = chain_verify(published=published_head())
    assert result.ok, result.describe()
    assert chain_head() == head


def test_beat_task_seals_what_is_pending():
    from audit.tasks import audit_seal_task

    record_events(3)
    assert audit_seal_task() == 2
    assert not AuditEvent.objects.filter(hash__isnull=True).exists()
    assert audit_seal_task.name == "audit.seal"


def test_writers_and_the_after_commit_seal_never_wait_for_a_busy_sealer():
    """Another process holds the seal lock: recording still works, the try-seal returns at once
    leaving the event unsealed, and the next seal (the beat's) chains it."""
    import psycopg

    from audit.services import SEAL_LOCK_KEY
    from tests.conftest import test_database_url

    with psycopg.connect(test_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [SEAL_LOCK_KEY])
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '5s'")  # a wait would fail the test, not hang it
        record_events(1)
        assert audit_seal(wait=False).index == -1
        assert AuditEvent.objects.get().hash is None
        other.execute("SELECT pg_advisory_unlock(%s)", [SEAL_LOCK_KEY])
    assert audit_seal().index == 0


@pytest.mark.django_db(transaction=True)
def test_the_default_background_sealer_seals_soon_after_commit_off_the_writers_thread(settings):
    """Production default: the commit only wakes the process's sealer thread, which seals on its
    own connection (the writer does not wait for the seal's transaction)."""
    import time

    from audit import services

    settings.AUDIT_SEAL_IN_BACKGROUND = True
    try:
        with transaction.atomic():
            audit_record(actor="controller", action="thing.change", object_type="tests.thing", object_id=1)
        deadline = time.monotonic() + 30
        while AuditEvent.objects.filter(hash__isnull=True).exists():
            assert time.monotonic() < deadline, "the background sealer never sealed the event"
            time.sleep(0.05)  # polling the condition, under a deadline
        sealer = services._sealer
        assert sealer is not None and sealer[1].name == "audit-sealer"
        assert sealer[1] is not threading.current_thread()
        assert AuditEvent.objects.get().chain_index == 0
    finally:
        services.background_sealer_stop()  # its connection would keep the test database from being dropped


def test_a_passing_seal_result_is_rewritten_once_it_is_older_than_the_refresh_so_last_ran_stays_true(
    settings,
):
    """The seal runs after every commit; its unchanged OK is not rewritten each time, but the badge's
    'last ran' must not freeze at the first run of a healthy process either."""
    from audit.models import AuditCheck

    settings.AUDIT_CHECK_REFRESH_S = 3600.0
    record_events(1)
    audit_seal()
    first = AuditCheck.objects.get(name="seal").checked_at
    record_events(1)
    audit_seal()
    assert AuditCheck.objects.get(name="seal").checked_at == first  # within the refresh: no write
    settings.AUDIT_CHECK_REFRESH_S = 0.0
    record_events(1)
    audit_seal()
    assert AuditCheck.objects.get(name="seal").checked_at > first  # older than the refresh: rewritten
