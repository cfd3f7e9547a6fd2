"""Signed checkpoints of the sealed chain, appended to the witness (ADR 0018).

``audit_checkpoint`` publishes the tree head of every sealed event (size, RFC 9162 root, the last
leaf hash) only when the chain in the database extends the last witnessed checkpoint and every event
sealed since is authentic; otherwise it raises an alarm naming what broke and publishes nothing, so
a truncated, rewritten or forged tail never gets witnessed however many writes follow.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from django.db import transaction

from audit import alarms, merkle
from audit.format import GENESIS, event_signature_problem, leaf_hash
from audit.models import AuditEvent
from audit.selectors import chain_head, event_record
from audit.signing import key_file, key_file_write, key_from_seed, signing_key
from audit.witness import witness
from audit.witness_state import WitnessBroken, entry_append, witness_bootstrap

log = logging.getLogger(__name__)

# This process's tree over the witnessed prefix: (size, root) → frontier, so a new checkpoint reads
# only the events sealed since the last one.
_frontiers: dict[str, tuple[int, str, merkle.Frontier]] = {}


class CheckpointRefused(RuntimeError):
    """The chain in the database does not extend the witnessed one (the alarm says why)."""


def _frontier_for(where: str, last: dict[str, Any] | None) -> merkle.Frontier:
    if last is None:
        return merkle.Frontier()
    cached = _frontiers.get(where)
    if cached and cached[0] == last["size"] and cached[1] == last["root"]:
        return cached[2]
    frontier = merkle.Frontier()
    hashes = (
        AuditEvent.objects.filter(chain_index__isnull=False, chain_index__lt=last["size"])
        .order_by("chain_index")
        .values_list("chain_index", "hash")
    )
    for index, h in hashes.iterator(chunk_size=5000):
        if index != frontier.size:
            raise CheckpointRefused(f"event at chain index {frontier.size} is missing (deleted)")
        frontier.append(bytes.fromhex(h))
    if frontier.size != last["size"]:
        raise CheckpointRefused(
            f"the database holds {frontier.size} sealed events but checkpoint {last['n']} witnessed"
            f" {last['size']} (tail truncated)"
        )
    if frontier.root().hex() != last["root"]:
        raise CheckpointRefused(
            f"the first {last['size']} events no longer hash to the root of checkpoint {last['n']} (rewritten)"
        )
    return frontier


def _extend(frontier: merkle.Frontier, last: dict[str, Any] | None, keys: dict[str, str], upto: int) -> str:
    """Append the events sealed after ``last`` to ``frontier``, checking each; returns the last leaf hash."""
    head = last["head"] if last else GENESIS
    start = frontier.size
    events = AuditEvent.objects.filter(chain_index__gte=start, chain_index__lte=upto).order_by("chain_index")
    for event in events.iterator(chunk_size=2000):
        record = event_record(event)
        index = record["chain_index"]
        where = f"event at chain index {index} (seq {record['seq']})"
        if index != frontier.size:
            raise CheckpointRefused(f"event at chain index {frontier.size} is missing (deleted)")
        if record["prev_hash"] != head:
            raise CheckpointRefused(
                f"{where} does not link to the witnessed chain: its prev_hash is not the hash of event"
                f" {index - 1} as witnessed (tail truncated and rewritten, or reordered)"
            )
        if leaf_hash(record) != record["hash"]:
            raise CheckpointRefused(f"{where}: content does not match its hash (edited)")
        if record.get("v") == 1:
            raise CheckpointRefused(f"{where}: a format-1 event sealed after format 2 began (forged)")
        problem = event_signature_problem(record, keys)
        if problem is not None:
            raise CheckpointRefused(f"{where}: {problem} (forged or edited)")
        frontier.append(bytes.fromhex(record["hash"]))
        head = record["hash"]
    if frontier.size != upto + 1:
        raise CheckpointRefused(f"event at chain index {frontier.size} is missing (deleted)")
    return head


def audit_checkpoint() -> dict[str, Any] | None:
    """Sign and witness the current tree head if it extends the last witnessed one.

    Returns the new (or unchanged last) checkpoint; None when refused (alarm ``witness`` raised).
    """
    w = witness()
    where = w.describe()
    try:
        with transaction.atomic():
            state = witness_bootstrap(w)
            key = signing_key()
            if key.key_id != state.current_key:
                raise CheckpointRefused(
                    f"the signing key in use ({key.key_id}) is not the witnessed key ({state.current_key}):"
                    " it was replaced without a recorded rotation"
                )
            last = state.checkpoints[-1] if state.checkpoints else None
            head = chain_head()
            if last is not None and head.index + 1 == last["size"] and head.hash == last["head"]:
                alarms.check_record(name="witness", ok=True, summary=f"checkpoint {last['n']} is current")
                return last
            if last is not None and head.index + 1 < last["size"]:
                raise CheckpointRefused(
                    f"the database's chain ends at index {head.index} but checkpoint {last['n']} witnessed"
                    f" {last['size']} events (tail truncated)"
                )
            frontier = _frontier_for(where, last)
            head_hash = _extend(frontier, last, state.keys, head.index)
            root = frontier.root().hex()
            fields = {"type": "checkpoint", "size": frontier.size, "root": root, "head": head_hash}
            entry = entry_append(w, fields, key=key)
            _frontiers[where] = (frontier.size, root, frontier)
    except (CheckpointRefused, WitnessBroken) as exc:
        _frontiers.pop(where, None)
        alarms.check_record(name="witness", ok=False, summary=f"checkpoint refused: {exc}")
        return None
    except OSError as exc:  # the witness cannot be written (disk full, permissions, store down)
        _frontiers.pop(where, None)
        alarms.check_record(name="witness", ok=False, summary=f"checkpoint not witnessed: {exc}")
        return None
    alarms.check_record(name="witness", ok=True, summary=f"checkpoint {entry['n']} witnessed")
    return entry


def audit_key_rotate(*, actor: Any, reason: str = "") -> dict[str, Any]:
    """Replace the signing key file with a new key: the witness records the new key signed by the old
    one, and an ``audit_key.rotate`` event (signed by the old key) records who rotated it."""
    from audit.services import audit_record

    old = signing_key()
    seed = secrets.token_bytes(32)
    new = key_from_seed(seed)
    w = witness()
    with transaction.atomic():
        state = witness_bootstrap(w)
        if old.key_id != state.current_key:
            raise CheckpointRefused(
                f"the key in use ({old.key_id}) is not the witnessed key; refusing to rotate"
            )
        audit_record(
            actor=actor,
            action="audit_key.rotate",
            object_type="audit.signingkey",
            object_id=new.key_id,
            object_repr=f"Ed25519 {new.key_id}",
            before={"key_id": old.key_id, "public_key": old.public_hex},
            after={"key_id": new.key_id, "public_key": new.public_hex},
            reason=reason,
        )
        entry = entry_append(
            w, {"type": "key", "public_key": new.public_hex, "introduces": new.key_id}, key=old
        )
        key_file_write(key_file(), seed, replace=True)
    return entry


def export_cut() -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Seal and checkpoint what is pending; the checkpoint an export is cut at (the last witnessed
    one when a new one is refused) and the witness's key entries."""
    from audit.services import audit_seal
    from audit.witness_state import witness_state

    audit_seal()
    audit_checkpoint()
    try:
        state = witness_state(witness())
    except WitnessBroken:
        return None, []
    return (state.checkpoints[-1] if state.checkpoints else None), list(state.key_entries)
