"""The hash chain of the audit trail, defined once, with no Django (the offline verifier uses it).

Format 1 (ADR 0005), below, is how events recorded before format 2 (audit.format, ADR 0018) were
hashed; they keep that hash as their leaf hash.

An event's *record* is a dict of plain JSON values (``at`` already an ISO-8601 UTC string). Its hash
is ``sha256(canonical_json(record))`` where the record includes ``chain_index`` and the previous
event's hash (``prev_hash``), so each hash commits to the whole history before it.

Canonical JSON: keys sorted, no whitespace, UTF-8 (non-ASCII kept as is), no NaN/Infinity.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GENESIS_HASH = "0" * 64

# The fields an event's hash covers, in no particular order (canonical JSON sorts them).
HASHED_FIELDS: tuple[str, ...] = (
    "seq",
    "chain_index",
    "prev_hash",
    "at",
    "actor",
    "actor_id",
    "role",
    "action",
    "object_type",
    "object_id",
    "object_repr",
    "tenant_id",
    "before",
    "after",
    "reason",
    "evidence",
    "request_id",
    "client_address",
)


def canonical_json(value: Any) -> bytes:
    """The one byte form every hash is computed over."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def event_hash(record: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the record's hashed fields (``prev_hash`` and ``chain_index`` included)."""
    return hashlib.sha256(canonical_json({name: record.get(name) for name in HASHED_FIELDS})).hexdigest()


@dataclass(frozen=True, slots=True)
class Head:
    """The last sealed event: its chain index and hash (``index=-1`` for an empty chain)."""

    index: int
    hash: str

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "hash": self.hash}


EMPTY_HEAD = Head(index=-1, hash=GENESIS_HASH)


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of a walk: ``ok``, the head reached, and on failure the first bad index and why."""

    ok: bool
    head: Head
    checked: int
    bad_index: int | None = None
    reason: str = ""
    bad_seq: int | None = None
    findings: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.ok and not self.findings:
            return f"OK {self.checked} events, head index={self.head.index} hash={self.head.hash}"
        if self.ok:
            return "FAIL " + "; ".join(self.findings)
        if self.bad_index is None:
            return f"FAIL {self.reason}"
        where = f"event at chain index {self.bad_index}"
        if self.bad_seq is not None:
            where += f" (seq {self.bad_seq})"
        return f"FAIL first bad {where}: {self.reason}"


def verify_records(
    records: Iterable[Mapping[str, Any]],
    *,
    published: Head | None = None,
    start: Head = EMPTY_HEAD,
    contiguous: bool = True,
) -> VerifyResult:
    """Walk records in chain order and name the first one that breaks the chain.

    ``start`` is the head before the first record (genesis for a whole chain). ``published`` is a
    head kept outside the database: the chain must contain it (same index, same hash), which is how
    a truncated tail or a consistently rewritten chain is caught. With ``contiguous=False`` (a
    filtered export) gaps between indexes are allowed and only each event's own hash and the order
    are checked; completeness is then not provable.
    """
    prev = start
    checked = 0
    published_seen = published is None or published.index <= start.index
    for record in records:
        index = record.get("chain_index")
        seq = record.get("seq")
        expected = prev.index + 1
        if not isinstance(index, int):
            return VerifyResult(False, prev, checked, expected, "event is not sealed (no chain index)", seq)
        if contiguous and index != expected:
            if index > expected:
                reason = f"chain index jumps from {prev.index} to {index}: event {expected} is missing"
            else:
                reason = f"chain index {index} repeats or goes backwards after {prev.index} (reordered or inserted)"
            return VerifyResult(False, prev, checked, expected, reason, seq)
        if not contiguous and index < expected:
            return VerifyResult(
                False, prev, checked, index, f"chain index {index} out of order after {prev.index}", seq
            )
        if contiguous and record.get("prev_hash") != prev.hash:
            return VerifyResult(
                False,
                prev,
                checked,
                index,
                "prev_hash does not match the previous event's hash (inserted, deleted or reordered)",
                seq,
            )
        recomputed = event_hash(record)
        if recomputed != record.get("hash"):
            return VerifyResult(False, prev, checked, index, "content does not match its hash (edited)", seq)
        prev = Head(index=index, hash=record["hash"])
        checked += 1
        if published is not None and index == published.index:
            published_seen = True
            if prev.hash != published.hash:
                return VerifyResult(
                    False,
                    prev,
                    checked,
                    index,
                    f"hash differs from the published head {published.hash} (chain rewritten)",
                    seq,
                )
    if contiguous and not published_seen and published is not None:
        return VerifyResult(
            False,
            prev,
            checked,
            prev.index + 1,
            f"chain ends at index {prev.index} but the published head is index {published.index} (tail truncated)",
        )
    return VerifyResult(True, prev, checked)
