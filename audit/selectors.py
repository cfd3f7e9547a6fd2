"""Reads of the audit trail."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from audit.chain import EMPTY_HEAD, Head, VerifyResult, verify_records
from audit.head import published_head
from audit.models import AuditEvent


def events_for_object(*, object_type: str, object_id: str | int) -> QuerySet[AuditEvent]:
    """One object's timeline, oldest first."""
    return AuditEvent.objects.filter(object_type=object_type, object_id=str(object_id)).order_by("seq")


def event_record(event: AuditEvent) -> dict[str, Any]:
    """An event as the plain JSON data its hash covers (plus ``hash``), as exports carry it."""
    at = event.at.astimezone(dt.UTC).isoformat() if event.at is not None else None
    return {
        "seq": event.seq,
        "chain_index": event.chain_index,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
        "at": at,
        "actor": event.actor,
        "actor_id": event.actor_id,
        "role": event.role,
        "action": event.action,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "object_repr": event.object_repr,
        "tenant_id": event.tenant_id,
        "before": event.before,
        "after": event.after,
        "reason": event.reason,
        "evidence": event.evidence,
        "request_id": event.request_id,
        "client_address": event.client_address,
    }


def chain_head() -> Head:
    """The last sealed event in the database (``EMPTY_HEAD`` before the first seal)."""
    last = (
        AuditEvent.objects.filter(chain_index__isnull=False)
        .order_by("-chain_index")
        .values_list("chain_index", "hash")[:1]
    )
    return Head(index=last[0][0], hash=last[0][1]) if last else EMPTY_HEAD


def events_filtered(
    *,
    actor: str = "",
    action: str = "",
    object_type: str = "",
    object_id: str = "",
    tenant_id: int | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> QuerySet[AuditEvent]:
    """Events matching every given filter (empty ones ignored), in ``seq`` order."""
    qs = AuditEvent.objects.all()
    if actor:
        qs = qs.filter(actor=actor)
    if action:
        # Part of the name finds the family: ``model_version`` finds ``model_version.gate_override``.
        qs = qs.filter(action__icontains=action)
    if object_type:
        qs = qs.filter(object_type=object_type)
    if object_id:
        qs = qs.filter(object_id=object_id)
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    if since is not None:
        qs = qs.filter(at__gte=since)
    if until is not None:
        qs = qs.filter(at__lt=until)
    return qs.order_by("seq")


def sealed_records(*, up_to: int | None = None, chunk_size: int = 2000) -> Iterator[dict[str, Any]]:
    """Every sealed event as its hashed record, in chain order, streamed from the database."""
    qs = AuditEvent.objects.filter(chain_index__isnull=False).order_by("chain_index")
    if up_to is not None:
        qs = qs.filter(chain_index__lte=up_to)
    for event in qs.iterator(chunk_size=chunk_size):
        yield event_record(event)


@dataclass(frozen=True, slots=True)
class ChainStatus:
    """What the audit page shows: the database head, the published head, and unsealed events."""

    head: Head
    published: Head | None
    unsealed: int

    @property
    def published_matches(self) -> bool | None:
        if self.published is None:
            return None
        if self.published.index > self.head.index:
            return False
        if self.published.index < 0:
            return True
        stored = (
            AuditEvent.objects.filter(chain_index=self.published.index).values_list("hash", flat=True).first()
        )
        return stored == self.published.hash


def chain_status() -> ChainStatus:
    return ChainStatus(
        head=chain_head(),
        published=published_head(),
        unsealed=AuditEvent.objects.filter(hash__isnull=True).count(),
    )


def chain_verify(*, published: Head | None = None) -> VerifyResult:
    """Walk the whole sealed chain in the database and compare it with the published head."""
    return verify_records(sealed_records(), published=published)
