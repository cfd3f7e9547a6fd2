"""The event spine: emit in the caller's transaction, one dispatch after commit, retries with
backoff, SKIP LOCKED between dispatchers, and the system check on reaction paths (ADR 0030)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection, transaction
from django.utils import timezone

from audit.services import audit_record
from events.checks import reactions_check
from events.models import Delivery, Event
from events.services import deliveries_dispatch, deliveries_retry_failed, emit, events_prune
from tests.events import reactions

R = "tests.events.reactions."


@pytest.fixture(autouse=True)
def _calls():
    reactions.CALLS.clear()
    reactions.entered.clear()
    reactions.release.clear()
    yield
    reactions.release.set()  # never leave a held thread behind


@pytest.mark.django_db
def test_emit_writes_the_event_and_one_delivery_per_matching_reaction_in_the_callers_transaction(settings):
    settings.GOVERNOR_REACTIONS = {
        "price.publish": [R + "in_process"],
        "price.*": [R + "snapshot", R + "in_process"],  # listed twice across patterns: one delivery
        "*": [R + "flaky"],
        "tenant.*": [R + "hold_first"],
    }
    with pytest.raises(RuntimeError), transaction.atomic():
        emit("price.publish", subject="billing.price:7")
        raise RuntimeError("the change rolls back")
    assert not Event.objects.exists() and not Delivery.objects.exists()  # nothing outlives its change

    event = emit("price.publish", subject="billing.price:7", payload={"id": 7})
    assert (event.kind, event.subject, event.payload, event.audit_event) == (
        "price.publish",
        "billing.price:7",
        {"id": 7},
        None,
    )
    assert list(event.deliveries.values_list("reaction", "status")) == [
        (R + "in_process", "pending"), (R + "snapshot", "pending"), (R + "flaky", "pending"),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="kind"):
        emit("nodot")


@pytest.mark.django_db
def test_every_governed_change_enters_the_outbox_under_its_audit_action(settings):
    settings.GOVERNOR_REACTIONS = {}
    recorded = audit_record(
        actor="controller", action="thing.change", object_type="tests.thing", object_id=3, tenant_id=9
    )
    event = Event.objects.get()
    assert event.kind == "thing.change" and event.audit_event == recorded.seq
    assert event.subject == "tests.thing:3"
    assert event.payload == {"object_type": "tests.thing", "object_id": "3", "tenant_id": 9}
    assert not event.deliveries.exists()  # no reaction follows it: nothing to dispatch


@pytest.mark.django_db
def test_one_dispatch_per_transaction_delivers_its_events_right_after_commit(
    settings, django_capture_on_commit_callbacks
):
    settings.GOVERNOR_REACTIONS = {"thing.*": [R + "in_process"]}
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        events = [emit("thing.change", payload={"n": n}) for n in range(3)]
        assert reactions.CALLS == []  # nothing runs before the commit
    assert len(callbacks) == 1  # one dispatch, however many events the transaction emitted
    assert [pk for pk, _ in reactions.CALLS] == [e.pk for e in events]
    assert set(Delivery.objects.values_list("status", "attempts")) == {("done", 1)}


@pytest.mark.django_db
def test_a_later_block_of_a_transaction_registers_its_own_dispatch(
    settings, django_capture_on_commit_callbacks
):
    """A test's transaction never commits: a service call captured later must not hand its
    deliveries to a dispatch an earlier call registered outside the captured block."""
    settings.GOVERNOR_REACTIONS = {"thing.*": [R + "in_process"]}
    with transaction.atomic():
        emit("thing.change")  # its dispatch waits for a commit that never comes
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        later = emit("thing.change")
    assert [pk for pk, _ in reactions.CALLS] == [later.pk]


@pytest.mark.django_db
def test_a_coalescing_reaction_runs_once_for_every_due_delivery_with_the_newest_event(settings):
    settings.GOVERNOR_REACTIONS = {"thing.*": [R + "snapshot"]}
    events = [emit("thing.change") for _ in range(4)]
    assert deliveries_dispatch() == 4
    assert [(events[-1].pk, "snapshot")] == reactions.CALLS
    assert Delivery.objects.filter(status="done").count() == 4


@pytest.mark.django_db
def test_a_failed_reaction_is_retried_with_backoff_and_given_up_where_everyone_can_see_it(settings):
    settings.GOVERNOR_REACTIONS = {"thing.*": [R + "flaky"]}
    settings.EVENTS_RETRY_BASE_S = 2.0
    settings.EVENTS_MAX_ATTEMPTS = 3
    emit("thing.change", payload={"fail_times": 2})
    t0 = timezone.now()
    assert deliveries_dispatch(now=t0) == 1
    d = Delivery.objects.get()
    assert (d.status, d.attempts, d.next_attempt_at) == ("pending", 1, t0 + dt.timedelta(seconds=2))
    assert d.last_error == "ConnectionError: downstream refused attempt 1"
    assert deliveries_dispatch(now=t0 + dt.timedelta(seconds=1.9)) == 0  # not due yet
    assert deliveries_dispatch(now=t0 + dt.timedelta(seconds=2)) == 1
    d.refresh_from_db()
    assert (d.status, d.attempts, d.next_attempt_at) == (
        "pending",
        2,
        t0 + dt.timedelta(seconds=6),
    )  # 2 s, then 4 s
    assert deliveries_dispatch(now=t0 + dt.timedelta(seconds=6)) == 1
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_error) == ("done", 3, "")
    assert len(reactions.CALLS) == 3

    # One that never recovers gives up after EVENTS_MAX_ATTEMPTS and stays, with its error, until requeued.
    emit("thing.change", payload={"fail_times": 100})
    reactions.CALLS.clear()
    for step in range(3):
        deliveries_dispatch(now=t0 + dt.timedelta(hours=step + 1))
    gave_up = Delivery.objects.get(status="failed")
    assert gave_up.attempts == 3 and "downstream refused attempt 3" in gave_up.last_error
    assert deliveries_dispatch(now=t0 + dt.timedelta(days=1)) == 0  # the sweep leaves it alone
    assert deliveries_retry_failed() == 1
    assert Delivery.objects.get(pk=gave_up.pk).status == "pending"


@pytest.mark.django_db
def test_a_reaction_removed_from_settings_is_not_called_and_says_why(settings):
    settings.GOVERNOR_REACTIONS = {"thing.*": [R + "in_process"]}
    emit("thing.change")
    settings.GOVERNOR_REACTIONS = {}
    deliveries_dispatch()
    d = Delivery.objects.get()
    assert reactions.CALLS == [] and d.status == "pending" and d.attempts == 1
    assert "is not in GOVERNOR_REACTIONS" in d.last_error


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_never_run_one_delivery_together(settings, monkeypatch):
    """The first dispatcher holds one delivery inside its reaction; the second skips that locked
    row (SKIP LOCKED), delivers every other one, and the held one runs once, in the first."""
    settings.GOVERNOR_REACTIONS = {"thing.*": [R + "hold_first"]}
    # The emitting process dies after its commits: only the two dispatchers below deliver.
    monkeypatch.setattr("events.services._dispatch_after_commit", lambda ids: None)
    held = emit("thing.change", payload={"hold": True})
    others = [emit("thing.change") for _ in range(5)]

    def dispatcher(out: list[int]) -> None:
        try:
            out.append(deliveries_dispatch())
        finally:
            connection.close()  # this thread's own connection

    settled: list[int] = []
    first = threading.Thread(target=dispatcher, args=([],), name="first")
    first.start()
    try:
        assert reactions.entered.wait(timeout=60), "the first dispatcher never reached the held reaction"
        second = threading.Thread(target=dispatcher, args=(settled,), name="second")
        second.start()
        second.join(timeout=120)
        assert settled == [5]
        assert sorted(pk for pk, who in reactions.CALLS if who == "second") == [e.pk for e in others]
    finally:
        reactions.release.set()
        first.join(timeout=60)
    assert not first.is_alive()
    assert sorted(pk for pk, _ in reactions.CALLS) == sorted([held.pk] + [e.pk for e in others])  # each once
    assert [pk for pk, who in reactions.CALLS if who == "first"] == [held.pk]
    assert set(Delivery.objects.values_list("status", "attempts")) == {("done", 1)}


def test_an_unknown_reaction_path_is_refused_at_startup_by_the_system_check(settings):
    settings.GOVERNOR_REACTIONS = {
        "price.*": ["billing.reactions.no_such_reaction"],
        "tenant.*": [R + "NOT_CALLABLE"],
        "pri*ce": [R + "in_process"],
    }
    messages = {m.id: m.msg for m in reactions_check()}
    assert "'billing.reactions.no_such_reaction', which cannot be imported" in messages["events.E003"]
    assert "'tests.events.reactions.NOT_CALLABLE', which is not callable" in messages["events.E004"]
    assert "pattern 'pri*ce' is not a kind, 'prefix.*' or '*'" in messages["events.E002"]
    with pytest.raises(SystemCheckError, match="no_such_reaction"):
        call_command("check")


def test_the_platforms_own_reactions_all_import():
    assert reactions_check() == []


@pytest.mark.django_db
def test_old_settled_events_are_pruned_and_unsettled_ones_kept(settings):
    settings.GOVERNOR_REACTIONS = {"thing.*": [R + "flaky"]}
    settings.EVENTS_KEEP_DAYS = 7
    old = timezone.now() - dt.timedelta(days=8)
    settled, pending, quiet = (emit("thing.change"), emit("thing.change"), emit("other.change"))
    Delivery.objects.filter(event=settled).update(status="done")
    Event.objects.update(created_at=old)
    assert events_prune() == 2  # the settled one and the one no reaction followed
    assert list(Event.objects.values_list("pk", flat=True)) == [pending.pk]
    assert quiet.pk not in Event.objects.values_list("pk", flat=True)
