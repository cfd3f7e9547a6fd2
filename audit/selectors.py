"""Reads of the audit trail."""

from __future__ import annotations

import contextlib
import datetime as dt
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet

from audit import jcs
from audit.chain import EMPTY_HEAD, Head, VerifyResult
from audit.head import published_head
from audit.models import AuditCheck, AuditCheckpoint, AuditEvent


def events_for_object(*, object_type: str, object_id: str | int) -> QuerySet[AuditEvent]:
    """One object's timeline, oldest first."""
    return AuditEvent.objects.filter(object_type=object_type, object_id=str(object_id)).order_by("seq")


def event_record(event: AuditEvent) -> dict[str, Any]:
    """An event as the plain JSON data its hash covers (plus ``hash``), as exports carry it."""
    at = event.at.astimezone(dt.UTC).isoformat() if event.at is not None else None
    return {
        "v": event.version,
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
        "nonce": event.nonce,
        "key_id": event.key_id,
        "signature": event.signature,
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


_STREAM_COLUMNS = (
    "v", "seq", "chain_index", "prev_hash", "hash", "at", "actor", "actor_id", "role", "action",
    "object_type", "object_id", "object_repr", "tenant_id", "before", "after", "reason", "evidence",
    "request_id", "client_address", "nonce", "key_id", "signature",
)  # fmt: skip
# ``at`` as Python's ``datetime.isoformat()`` of the UTC time writes it (what the signature covers),
# made by the server: no datetime object per row.
_AT_ISO = (
    "to_char(at AT TIME ZONE 'UTC', CASE WHEN date_part('microseconds', at)::bigint % 1000000 = 0"
    " THEN 'YYYY-MM-DD\"T\"HH24:MI:SS' ELSE 'YYYY-MM-DD\"T\"HH24:MI:SS.US' END) || '+00:00'"
)
_STREAM_SQL = (
    "SELECT version, seq, chain_index, prev_hash, hash, "
    + _AT_ISO
    + ", actor, actor_id, role, action, object_type,"
    " object_id, object_repr, tenant_id, before::text, after::text, reason, evidence::text, request_id,"
    " client_address, nonce, key_id, signature FROM audit_auditevent WHERE {where} ORDER BY {order}"
)


def stream_records(*, sealed: bool = True, itersize: int = 10000) -> Iterator[dict[str, Any]]:
    """Sealed events in chain order (or unsealed ones in ``seq`` order) as verifier records, read
    through a server-side cursor with no model instances: JSON columns come as text and are parsed
    with ``audit.jcs.loads`` (what the fast canonical form expects). Runs in its own transaction."""
    where, order = ("chain_index IS NOT NULL", "chain_index") if sealed else ("hash IS NULL", "seq")
    loads = jcs.loads
    cols = _STREAM_COLUMNS
    with transaction.atomic():
        connection.ensure_connection()
        with connection.connection.cursor(name=f"audit_stream_{id(object())}") as cursor:
            cursor.execute(_STREAM_SQL.format(where=where, order=order))
            # The next batch is fetched on a helper thread while this one is hashed: PostgreSQL
            # produces rows on one core while the walk runs on the other (psycopg waits without the GIL).
            batches: queue.Queue = queue.Queue(maxsize=2)
            stop = threading.Event()

            def fetch() -> None:
                try:
                    while not stop.is_set():
                        rows = cursor.fetchmany(itersize)
                        batches.put(rows)
                        if not rows:
                            return
                except BaseException as exc:  # handed to the consumer, raised there
                    batches.put(exc)

            fetcher = threading.Thread(target=fetch, name="audit-verify-fetch", daemon=True)
            fetcher.start()
            try:
                while True:
                    rows = batches.get()
                    if isinstance(rows, BaseException):
                        raise rows
                    if not rows:
                        break
                    for row in rows:
                        record = dict(zip(cols, row, strict=True))
                        record["before"] = loads(row[14])
                        record["after"] = loads(row[15])
                        record["evidence"] = loads(row[17])
                        yield record
            finally:
                # A walk that stops early: let the fetcher finish its batch before the cursor closes.
                stop.set()
                while fetcher.is_alive():
                    with contextlib.suppress(queue.Empty):
                        batches.get(timeout=0.1)
                fetcher.join()


def chain_verify(*, published: Head | None = None, signatures: str = "unwitnessed") -> VerifyResult:
    """Walk the whole sealed chain against the witness's checkpoints (and the published head), then
    name every unsealed event that fails authentication and any witness entry the witness lost."""
    from audit.format import WitnessState, event_signature_problem
    from audit.walk import walk
    from audit.witness import WitnessReadError, witness

    w = witness()
    state = WitnessState()
    findings: list[str] = []
    try:
        for entry in w.entries():
            state.add(entry)
    except (WitnessReadError, ValueError) as exc:
        findings.append(f"witness {w.describe()}: {exc}")
    copies = AuditCheckpoint.objects.filter(n__gte=state.entries).order_by("n").values_list("n", flat=True)
    first_lost = copies.first()
    if first_lost is not None and not findings:
        findings.append(
            f"witness {w.describe()} holds {state.entries} entries but the database recorded entry {first_lost}"
            " being appended to it (witness truncated or replaced)"
        )
    result = walk(stream_records(), checkpoints=state.checkpoints, keys=state.keys, signatures=signatures)
    if result.ok and published is not None and published.index > result.head.index:
        result = VerifyResult(
            False, result.head, result.checked, result.head.index + 1,
            f"chain ends at index {result.head.index} but the published head is index {published.index}"
            " (tail truncated)",
        )  # fmt: skip
    for record in stream_records(sealed=False):
        problem = event_signature_problem(record, state.keys)
        if problem is not None:
            findings.append(
                f"unsealed event seq {record['seq']} ({record['actor']} {record['action']}): {problem}"
            )
    if findings:
        return VerifyResult(
            False, result.head, result.checked, result.bad_index, result.reason or findings[0], result.bad_seq,
            tuple(findings),
        )  # fmt: skip
    return result


@dataclass(frozen=True, slots=True)
class AuditHealth:
    """The last automatic checks of the trail: green only when every one ran and passed."""

    checks: tuple[AuditCheck, ...]

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks) and self.verified

    @property
    def verified(self) -> bool:
        return any(c.name == "chain" for c in self.checks)

    @property
    def failing(self) -> tuple[AuditCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)


def audit_health() -> AuditHealth:
    """What the badge shows: the stored result of each check (``chain``, ``seal``, ``witness``, and
    ``drift`` where audit.drift writes it)."""
    return AuditHealth(checks=tuple(AuditCheck.objects.order_by("name")))


def signing_public_key() -> dict[str, str] | None:
    """The key events are signed with now (its id and public half), for the Audit page; None when
    it cannot be read (the page then says so rather than failing)."""
    from audit.signing import SigningKeyError, signing_key

    try:
        key = signing_key()
    except (SigningKeyError, OSError):
        return None
    return {"key_id": key.key_id, "public_key": key.public_hex}
