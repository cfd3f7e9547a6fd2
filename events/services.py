"""Emit an event into the outbox, and dispatch its deliveries to the reactions (ADR 0030).

``emit`` writes the event and one pending delivery per reaction that ``GOVERNOR_REACTIONS`` names
for its kind, in the caller's transaction: the event commits (or rolls back) with the change it
describes. One ``on_commit`` per transaction then dispatches that transaction's deliveries at once,
and the ``events.sweep`` beat task dispatches whatever that missed (a process that died after its
commit, a reaction that failed and waits for its retry).

Delivery is at least once: the dispatcher locks a delivery (``FOR UPDATE SKIP LOCKED``, so two
dispatchers never run one delivery together), calls the reaction and marks the delivery done in the
same transaction. A dispatcher that dies between the reaction and the commit leaves the delivery
pending, and the reaction runs again. Every reaction must therefore be idempotent: publish a
snapshot of the current state, enqueue a task whose work claims its row once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.module_loading import import_string

from events.models import Delivery, Event
from events.selectors import reaction_registered, reactions_for

log = logging.getLogger(__name__)

ERROR_CHARS = 5000
# How many pending deliveries of one coalescing reaction one call serves.
COALESCE_MAX = 500


def coalescing(func: Callable) -> Callable:
    """Mark a reaction that brings something up to the current state (a snapshot section, a
    reconcile): one call serves every delivery of it that is due, not one call per event."""
    func.coalesce = True
    return func


def _subject(subject: Any) -> str:
    if isinstance(subject, models.Model):
        return f"{subject._meta.label_lower}:{subject.pk}"
    return str(subject or "")[:200]


def emit(
    kind: str, *, subject: Any = "", payload: dict | None = None, audit_event: int | None = None
) -> Event:
    """Record that ``kind`` happened, in the caller's transaction, with a delivery for each reaction
    registered for it; they run right after the commit.

    ``kind`` is a governed change's audit action (``price.publish``; ``audit_record`` emits those)
    or an operational signal, named ``<app>.<what happened>`` (``deployments.status_changed``).
    ``subject`` is a model instance or ``'app_label.model:pk'``.
    """
    if "." not in kind or len(kind) > 100:
        raise ValueError(
            f"An event kind is '<noun>.<verb>' or '<app>.<signal>' in ≤ 100 characters: {kind!r}"
        )
    paths = reactions_for(kind)
    # Inside the caller's block (no savepoint of its own: the caller's transaction is the unit);
    # outside any, its own transaction, so the event and its deliveries commit together.
    with nullcontext() if connection.in_atomic_block else transaction.atomic():
        event = Event.objects.create(
            kind=kind, subject=_subject(subject), payload=payload or {}, audit_event=audit_event
        )
        if paths:
            now = event.created_at
            deliveries = Delivery.objects.bulk_create(
                [Delivery(event=event, reaction=p, next_attempt_at=now, created_at=now) for p in paths]
            )
            _dispatch_after_commit([d.pk for d in deliveries])
    return event


class _AfterCommit:
    """The one dispatch a transaction registers, holding the deliveries its emits created."""

    def __init__(self, block: tuple[str, ...]) -> None:
        self.block = block
        self.ids: list[int] = []

    def __call__(self) -> None:
        try:
            deliveries_dispatch(ids=self.ids)
        except Exception:  # noqa: BLE001 - the change committed; the sweep delivers what this missed
            log.exception(
                "events: dispatch after commit failed; the sweep will deliver %d deliveries", len(self.ids)
            )


def _dispatch_after_commit(ids: list[int]) -> None:
    """Add ``ids`` to the dispatch this transaction registered, or register it.

    One per top-level block of the transaction: the transaction itself, or a savepoint directly
    under it (a nested service's ``atomic``). A transaction of one service registers one; a test's
    transaction registers one per service call, which is what ``captureOnCommitCallbacks`` sees.
    """
    block = tuple(connection.savepoint_ids[:1])
    for _, func, _ in connection.run_on_commit:
        if isinstance(func, _AfterCommit) and func.block == block:
            func.ids.extend(ids)
            return
    hook = _AfterCommit(block)
    hook.ids.extend(ids)
    transaction.on_commit(hook)


def backoff_after(attempts: int) -> timedelta:
    """Wait before attempt ``attempts + 1``: doubling from ``EVENTS_RETRY_BASE_S`` up to ``EVENTS_RETRY_MAX_S``."""
    base = float(getattr(settings, "EVENTS_RETRY_BASE_S", 2.0))
    cap = float(getattr(settings, "EVENTS_RETRY_MAX_S", 300.0))
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempts - 1)))


def _reaction(path: str) -> Callable:
    if not reaction_registered(path):
        raise LookupError(f"reaction {path!r} is not in GOVERNOR_REACTIONS (any more)")
    func = import_string(path)
    if not callable(func):
        raise TypeError(f"reaction {path!r} is not callable")
    return func


def deliveries_dispatch(
    *, ids: list[int] | None = None, now: datetime | None = None, limit: int | None = None
) -> int:
    """Deliver the due pending deliveries (only ``ids`` when given), oldest first; returns how many
    were settled (done, or failed and rescheduled).

    Each step is one transaction: lock the oldest due delivery nobody else holds (and, for a
    coalescing reaction, every due delivery of that reaction), call the reaction in a savepoint,
    mark the deliveries done, or count the attempt and reschedule it with backoff.
    """
    now = now or timezone.now()
    settled = 0
    while limit is None or settled < limit:
        with transaction.atomic():
            due = Delivery.objects.select_for_update(skip_locked=True, of=("self",)).filter(
                status=Delivery.Status.PENDING, next_attempt_at__lte=now
            )
            mine = due.filter(pk__in=ids) if ids is not None else due
            first = mine.select_related("event").order_by("id").first()
            if first is None:
                return settled
            group = [first]
            try:
                func = _reaction(first.reaction)
                if getattr(func, "coalesce", False):
                    group += list(
                        due.filter(reaction=first.reaction)
                        .exclude(pk=first.pk)
                        .order_by("id")[: COALESCE_MAX - 1]
                    )
                newest = max(group, key=lambda d: d.event_id)
                event = first.event if newest is first else Event.objects.get(pk=newest.event_id)
                with transaction.atomic():
                    func(event)
            except Exception as exc:  # noqa: BLE001 - any reaction may fail; it is retried, and shown
                _failed(group, exc, now=now)
            else:
                Delivery.objects.filter(pk__in=[d.pk for d in group]).update(
                    status=Delivery.Status.DONE,
                    attempts=F("attempts") + 1,
                    done_at=timezone.now(),
                    last_error="",
                )
        settled += len(group)
    return settled


def _failed(group: list[Delivery], exc: Exception, *, now: datetime) -> None:
    error = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
    most = int(getattr(settings, "EVENTS_MAX_ATTEMPTS", 12))
    for d in group:
        attempts = d.attempts + 1
        gave_up = attempts >= most
        Delivery.objects.filter(pk=d.pk).update(
            attempts=attempts,
            last_error=error,
            status=Delivery.Status.FAILED if gave_up else Delivery.Status.PENDING,
            next_attempt_at=now + backoff_after(attempts),
        )
        log.warning(
            "events: reaction %s failed on event %s (attempt %d%s): %s",
            d.reaction, d.event_id, attempts, ", gave up" if gave_up else "", error,
        )  # fmt: skip


def deliveries_retry_failed(*, reaction: str | None = None) -> int:
    """Put deliveries that gave up back in line (after the reaction was fixed); returns how many."""
    qs = Delivery.objects.filter(status=Delivery.Status.FAILED)
    if reaction:
        qs = qs.filter(reaction=reaction)
    return qs.update(status=Delivery.Status.PENDING, attempts=0, next_attempt_at=timezone.now())


def events_prune(*, now: datetime | None = None) -> int:
    """Delete events older than ``EVENTS_KEEP_DAYS`` whose deliveries all settled as done; returns
    how many. The audit trail, not the outbox, is the record of governed changes."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=float(getattr(settings, "EVENTS_KEEP_DAYS", 7)))
    old = Event.objects.filter(created_at__lt=cutoff).exclude(
        deliveries__status__in=(Delivery.Status.PENDING, Delivery.Status.FAILED)
    )
    _, per_model = Event.objects.filter(pk__in=old.values("pk")[:10000]).delete()
    return per_model.get(Event._meta.label, 0)


def events_sweep() -> int:
    """The beat's pass: deliver everything due, then prune what is old and settled."""
    settled = deliveries_dispatch()
    events_prune()
    return settled
