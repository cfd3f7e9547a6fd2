"""This process's view of the witness: its keys and last checkpoint, read incrementally, and the
one way an entry is signed and appended to it."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from audit.format import WitnessState, entry_message
from audit.signing import SigningKey, signing_key
from audit.witness import Witness, WitnessReadError, witness


class WitnessBroken(RuntimeError):
    """The witness does not hold a valid log (edited, truncated, unreadable): nothing is appended."""


_states: dict[str, WitnessState] = {}


def witness_state(w: Witness | None = None, *, fresh: bool = False) -> WitnessState:
    """The witness's keys and checkpoints, every entry checked (only new entries are read again)."""
    w = w or witness()
    where = w.describe()
    state = None if fresh else _states.get(where)
    if state is None:
        state = WitnessState()
    try:
        new = w.entries(start=state.entries)
        for entry in new:
            state.add(entry)
    except (WitnessReadError, ValueError) as exc:
        _states.pop(where, None)
        raise WitnessBroken(f"witness {where}: {exc}") from exc
    _states[where] = state
    return state


# pg_advisory_xact_lock key of witness appends ("witness" in ASCII): one writer of entries at a time.
WITNESS_LOCK_KEY = 0x7769746E657373


def entry_append(w: Witness, fields: dict[str, Any], *, key: SigningKey | None = None) -> dict:
    """Sign ``fields`` as the next entry (number, link to the previous one, time, signer) and append
    it. Call inside a transaction: the append is serialised on an advisory lock."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [WITNESS_LOCK_KEY])
    state = witness_state(w)
    from audit.models import AuditCheckpoint

    lost = (
        AuditCheckpoint.objects.filter(n__gte=state.entries).order_by("n").values_list("n", flat=True).first()
    )
    if lost is not None:
        raise WitnessBroken(
            f"witness {w.describe()} holds {state.entries} entries but the database recorded appending entry"
            f" {lost} (witness truncated or replaced)"
        )
    key = key or signing_key()
    entry = {
        **fields,
        "n": state.entries,
        "prev": state.last_hash,
        "at": timezone.now().isoformat(),
        "key_id": key.key_id,
    }
    entry["signature"] = key.sign(entry_message(entry))
    state.add(entry)  # checks it as any reader will, before it is stored
    w.append(entry)
    AuditCheckpoint.objects.create(n=entry["n"], entry=entry)
    return entry


def witness_bootstrap(w: Witness | None = None) -> WitnessState:
    """An empty witness gets its first entry: the current key, signed by itself."""
    from django.db import transaction

    w = w or witness()
    state = witness_state(w)
    if state.entries == 0:
        key = signing_key()
        with transaction.atomic():
            if witness_state(w).entries == 0:
                fields = {"type": "key", "public_key": key.public_hex, "introduces": key.key_id}
                entry_append(w, fields, key=key)
        state = witness_state(w)
    return state


def trusted_keys() -> dict[str, str]:
    """Key id → public key of every key the witness introduced (bootstrapping an empty witness)."""
    return dict(witness_bootstrap().keys)
