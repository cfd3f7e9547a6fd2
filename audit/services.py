"""The one way to record a governed change, and the seal that chains recorded events.

Every app's services call ``audit_record`` inside the same transaction as the write it describes, so
the event and the change commit (or roll back) together. Events are inserted unsealed (no lock, no
read of the previous event); ``audit_seal`` later gives them, in one short serialised step, their
chain index, the previous hash and their own hash (see docs/decisions/0005-audit-hash-chain.md).
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import math
import os
import secrets
import threading
import uuid
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from audit import alarms, context
from audit.chain import Head
from audit.format import event_message, event_signature_problem, leaf_hash
from audit.head import head_publish
from audit.jcs import MAX_SAFE_INTEGER
from audit.models import AuditEvent
from audit.selectors import chain_head, event_record
from audit.signing import signing_key
from audit.store import event_insert, events_seal
from audit.witness_state import WitnessBroken, trusted_keys
from events.services import emit

log = logging.getLogger(__name__)

# pg_advisory_xact_lock key of the seal ("audit" in ASCII): one sealer at a time, writers never wait.
SEAL_LOCK_KEY = 0x6175646974
SEAL_BATCH = 500

SYSTEM_ACTORS = ("controller", "system", "seed", "reconciler", "gateway")


def _actor_fields(actor: Any) -> tuple[str, int | None, str]:
    """``actor`` is a user, or a string naming a non-human actor (``"controller"``, ``"system:seed"``)."""
    if actor is None:
        return "system", None, "system"
    if isinstance(actor, str):
        return actor, None, "system"
    if not getattr(actor, "is_authenticated", False):
        return "anonymous", None, "anonymous"
    if actor.is_superuser:
        role = "platform_admin"
    elif actor.groups.filter(name="auditors").exists():
        role = "auditor"
    else:
        role = "user"
    return actor.get_username(), actor.pk, role


def jsonable(value: Any) -> Any:
    """A value as canonical JSON data (decimals and times as strings, model instances as their pk)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, models.Model):
        return value.pk
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    # RFC 8785 (and JavaScript) carry numbers as IEEE doubles: beyond 2**53 a number would not come
    # back from the database as the same value, so it is kept as its decimal text instead.
    if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
        return str(value)
    if isinstance(value, float) and (not math.isfinite(value) or abs(value) > MAX_SAFE_INTEGER):
        return repr(value)
    return value


def fields_of(instance: models.Model, names: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The named fields of an instance (foreign keys by id) as JSON data, for ``before``/``after``."""
    out = {}
    for name in names:
        field = instance._meta.get_field(name)
        out[name] = jsonable(getattr(instance, field.attname))
    return out


def audit_record(
    *,
    actor: Any,
    action: str,
    target: models.Model | None = None,
    object_type: str = "",
    object_id: str | int = "",
    object_repr: str = "",
    tenant_id: int | None = None,
    before: dict | None = None,
    after: dict | None = None,
    reason: str = "",
    evidence: dict | None = None,
) -> AuditEvent:
    """Append one event. ``target`` fills object type/id/repr (``app_label.model``) when given.

    ``action`` is ``<noun>.<verb>`` (``model_version.transition``, ``price.publish``). Only changed
    fields belong in ``before``/``after``. The event is also emitted into the event spine under its
    action, so the reactions registered for it run after commit.
    """
    if target is not None:
        object_type = object_type or target._meta.label_lower
        object_id = object_id or target.pk
        object_repr = object_repr or str(target)[:200]
    name, actor_id, role = _actor_fields(actor)
    ctx = context.current()
    # event_insert also marks the transaction, so its governed rows' raw-write triggers stay silent.
    key = signing_key()
    at = timezone.now()
    fields: dict[str, Any] = {
        "actor": name[:150],
        "actor_id": actor_id,
        "role": role,
        "action": action,
        "object_type": object_type,
        "object_id": str(object_id),
        "object_repr": object_repr[:200],
        "tenant_id": tenant_id,
        "before": jsonable(before or {}),
        "after": jsonable(after or {}),
        "reason": reason,
        "evidence": jsonable(evidence or {}),
        "request_id": ctx.request_id,
        "client_address": ctx.client_address,
        # Unique per event: a copy of a genuine signed row is refused by the unique constraint.
        "nonce": secrets.token_hex(16),
        "key_id": key.key_id,
    }
    # Signed now, with a key PostgreSQL never sees: the seal refuses any row without a valid one.
    fields["signature"] = key.sign(event_message({**fields, "at": at.astimezone(dt.UTC).isoformat()}))
    event = event_insert(fields={**fields, "at": at})
    # The same change enters the event spine's outbox (ADR 0030): reactions that follow governed
    # changes (a snapshot publish, a reconcile) are registered for its action in GOVERNOR_REACTIONS.
    emit(
        action,
        subject=f"{object_type}:{object_id}" if object_type else "",
        payload={"object_type": object_type, "object_id": str(object_id), "tenant_id": tenant_id},
        audit_event=event.seq,
    )
    if not any(func is audit_seal_soon for _, func, _ in connection.run_on_commit):
        transaction.on_commit(audit_seal_soon)
    return event


# --- the seal ------------------------------------------------------------------------------------


def audit_seal(*, wait: bool = True, batch: int = SEAL_BATCH) -> Head:
    """Seal every committed unsealed event, in ``seq`` order, and publish the new head.

    One sealer runs at a time (a transaction-scoped advisory lock). With ``wait=False`` a caller
    that finds another sealer at work returns at once: that sealer, or the next beat tick, seals
    its events. Returns the head after sealing (or the current head when it skipped).
    """
    sealed_any = False
    head: Head | None = None
    refused: dict[int, str] = {}
    after_seq = 0
    while True:
        with transaction.atomic():
            with connection.cursor() as cursor:
                if wait:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SEAL_LOCK_KEY])
                else:
                    cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [SEAL_LOCK_KEY])
                    if not cursor.fetchone()[0]:
                        return chain_head()  # another sealer is at work; it (or the beat) seals ours
            head = chain_head()
            pending = list(
                AuditEvent.objects.filter(hash__isnull=True, seq__gt=after_seq).order_by("seq")[:batch]
            )
            try:
                keys = trusted_keys() if pending else {}
            except WitnessBroken as exc:
                # No trustworthy list of keys: seal nothing (the events wait, visible) and say why.
                alarms.check_record(name="witness", ok=False, summary=f"sealing paused: {exc}")
                return chain_head()
            sealed = []
            for event in pending:
                record = event_record(event)
                problem = event_signature_problem(record, keys)
                if problem is not None:
                    refused[event.seq] = problem  # stays unsealed: never part of the chain
                    continue
                event.chain_index = head.index + 1
                event.prev_hash = head.hash
                event.hash = leaf_hash({**record, "chain_index": event.chain_index, "prev_hash": head.hash})
                head = Head(index=event.chain_index, hash=event.hash)
                sealed.append(event)
            if sealed:
                events_seal(events=sealed)
                sealed_any = True
            if pending:
                after_seq = pending[-1].seq
        if len(pending) < batch:
            break
    alarms.seal_result(refused=refused)
    if sealed_any and head is not None:
        head_publish(head=head)
    return head if head is not None else chain_head()


def audit_seal_soon() -> None:
    """After a commit that recorded events: seal them now, off the request's thread.

    With ``settings.AUDIT_SEAL_IN_BACKGROUND`` (the default) this only wakes the process's sealer
    thread, so a governed write pays for its signature and its INSERT, not for the seal's own
    transaction (ADR 0018); otherwise it seals here, unless another sealer already is (never blocks).
    """
    if getattr(settings, "AUDIT_SEAL_IN_BACKGROUND", True):
        _background_sealer_wake()
        return
    try:
        audit_seal(wait=False)
    except Exception:  # the beat task seals what this missed; a write must not fail after its commit
        log.exception("audit: seal after commit failed; the periodic seal will retry")


_wake = threading.Event()
_sealer: tuple[int, threading.Thread] | None = None
_sealer_lock = threading.Lock()


def _background_sealer_wake() -> None:
    global _sealer
    if _sealer is None or _sealer[0] != os.getpid() or not _sealer[1].is_alive():
        with _sealer_lock:  # one thread per process (a forked worker starts its own)
            if _sealer is None or _sealer[0] != os.getpid() or not _sealer[1].is_alive():
                thread = threading.Thread(target=_background_sealer, name="audit-sealer", daemon=True)
                _sealer = (os.getpid(), thread)
                thread.start()
    _wake.set()


_stop = threading.Event()


def background_sealer_stop() -> None:
    """Stop this process's sealer thread and close its connection (tests, before dropping a database)."""
    global _sealer
    if _sealer is not None and _sealer[1].is_alive():
        _stop.set()
        _wake.set()
        _sealer[1].join(timeout=30)
    _sealer = None
    _stop.clear()


def _background_sealer() -> None:
    while True:
        _wake.wait()
        # Gather the commits of the next few milliseconds into one seal: under a burst of writes the
        # seal's own transaction is paid once per batch, not once per write.
        _stop.wait(getattr(settings, "AUDIT_SEAL_BATCH_DELAY_S", 0.05))
        _wake.clear()
        if _stop.is_set():
            connection.close()
            return
        try:
            audit_seal(wait=False)
        except Exception:  # the beat task seals what this missed; reconnect next time
            log.exception("audit: background seal failed; the periodic seal will retry")
            connection.close()


def snapshot(instance: models.Model) -> dict[str, Any]:
    """Every concrete field of a row (foreign keys by id) as JSON data: the ``before`` of an update.

    ``auto_now`` timestamps are left out: they change on every save and say nothing of what changed.
    """
    return {
        f.attname: jsonable(getattr(instance, f.attname))
        for f in instance._meta.concrete_fields
        if not getattr(f, "auto_now", False)
    }


def changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields that differ, as (before, after) dicts holding only those fields."""
    keys = [k for k in after if before.get(k) != after.get(k)]
    return {k: before.get(k) for k in keys}, {k: after[k] for k in keys}


def audit_save(
    *,
    actor: Any,
    instance: models.Model,
    before: dict[str, Any] | None,
    tenant_id: int | None = None,
    reason: str = "",
    action: str = "",
    evidence: dict | None = None,
) -> AuditEvent | None:
    """Record a create (``before`` is None) or an update (only the changed fields) of ``instance``.

    Call after the row is saved, inside the same transaction. An update that changed nothing
    records nothing and returns None. ``action`` defaults to ``<model>.create`` / ``<model>.update``.
    """
    noun = instance._meta.model_name
    # Read back what the database stored, so before and after compare in one canonical form
    # (a form's Decimal("2.5") and the column's Decimal("2.5000") are the same value).
    stored = type(instance)._base_manager.filter(pk=instance.pk).first()
    after = snapshot(stored if stored is not None else instance)
    if before is None:
        b, a = {}, after
        action = action or f"{noun}.create"
    else:
        b, a = changes(before, after)
        if not a:
            return None
        action = action or f"{noun}.update"
    return audit_record(
        actor=actor, action=action, target=instance, tenant_id=tenant_id, before=b, after=a, reason=reason,
        evidence=evidence,
    )  # fmt: skip


def audit_delete(
    *, actor: Any, instance: models.Model, tenant_id: int | None = None, reason: str = ""
) -> AuditEvent:
    """Record the deletion of ``instance`` (call before deleting it, inside the same transaction)."""
    return audit_record(
        actor=actor,
        action=f"{instance._meta.model_name}.delete",
        target=instance,
        tenant_id=tenant_id,
        before=snapshot(instance),
        reason=reason,
    )


def audit_verify_record(*, seal: bool = True, signatures: str = "unwitnessed"):
    """Seal and checkpoint what is pending, verify the whole trail, and store the verdict as the
    ``chain`` check (what the console's badge shows). Returns the ``VerifyResult``."""
    from audit.checkpoints import audit_checkpoint
    from audit.head import published_head
    from audit.selectors import chain_verify

    if seal:
        audit_seal()
        audit_checkpoint()
    result = chain_verify(published=published_head(), signatures=signatures)
    alarms.check_record(
        name="chain",
        ok=result.ok,
        summary=result.describe(),
        details={"bad_index": result.bad_index, "bad_seq": result.bad_seq, "findings": list(result.findings)},
    )
    return result
