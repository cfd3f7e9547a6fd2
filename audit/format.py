"""Format 2 of the audit trail, defined once with no Django (docs/audit-format.md is its text).

- An event's *signature* is Ed25519 over ``EVENT_DOMAIN || JCS(signed part)``, made when the event is
  written (``audit_record``), before it has a chain index.
- Its *leaf* is ``JCS`` of the signed part plus ``seq``, ``chain_index``, ``prev_hash`` and
  ``signature``; its hash is the RFC 9162 leaf hash ``SHA-256(0x00 || leaf)``, hex. Sealed events
  form both a hash chain (``prev_hash``) and a Merkle tree (``audit.merkle``) over these hashes.
- Events recorded before format 2 keep their format-1 hash (``audit.chain.event_hash``) as their
  leaf hash; it hashes a JSON object (first byte ``{``), never a ``0x00``/``0x01``-prefixed input.
- A *witness entry* (a checkpoint or a key) is signed over ``<type domain> || JCS(entry minus
  signature)`` and chained by ``prev = SHA-256(JCS(previous entry))``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from audit import jcs
from audit.chain import event_hash as v1_event_hash

VERSION = 2
EVENT_DOMAIN = b"governor-audit/2 event\n"
ENTRY_DOMAINS = {"checkpoint": b"governor-audit/2 checkpoint\n", "key": b"governor-audit/2 key\n"}
GENESIS = "0" * 64

# What the writer signs (with "v": 2); the leaf adds LEAF_ONLY.
SIGNED_FIELDS: tuple[str, ...] = (
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
    "nonce",
    "key_id",
)
LEAF_ONLY: tuple[str, ...] = ("seq", "chain_index", "prev_hash", "signature")
LEAF_FIELDS: tuple[str, ...] = SIGNED_FIELDS + LEAF_ONLY

# Events the database's capture trigger writes (audit.raw_capture) carry no signature: nothing in
# PostgreSQL holds a key. The sealer accepts an unsigned event only in exactly this shape.
CAPTURE_ACTION_PREFIX = "raw."
CAPTURE_ACTOR_PREFIX = "db:"
CAPTURE_ROLE = "database"


def signed_part(record: Mapping[str, Any]) -> dict[str, Any]:
    out = {name: record.get(name) for name in SIGNED_FIELDS}
    out["v"] = VERSION
    return out


def event_message(record: Mapping[str, Any]) -> bytes:
    """The bytes an event's signature covers (values as Python or ``jcs.loads`` gives them)."""
    return EVENT_DOMAIN + jcs.canonical(jcs.floats(signed_part(record)))


def leaf_object(record: Mapping[str, Any]) -> dict[str, Any]:
    out = {name: record.get(name) for name in LEAF_FIELDS}
    out["v"] = VERSION
    return out


def leaf_hash(record: Mapping[str, Any], *, fast: bool = False) -> str:
    """Hex leaf hash of a sealed event of either format (``fast``: values parsed by ``jcs.loads``)."""
    if record.get("v", VERSION) == 1:
        return v1_event_hash(jcs.floats(dict(record)) if fast else record)
    data = (jcs.canonical_fast if fast else jcs.canonical)(leaf_object(record))
    return hashlib.sha256(b"\x00" + data).hexdigest()


def is_capture(record: Mapping[str, Any]) -> bool:
    """An unsigned event in the shape only the database's capture trigger writes."""
    return (
        str(record.get("action") or "").startswith(CAPTURE_ACTION_PREFIX)
        and str(record.get("actor") or "").startswith(CAPTURE_ACTOR_PREFIX)
        and record.get("role") == CAPTURE_ROLE
        and record.get("actor_id") is None
    )


def key_id(public_key_hex: str) -> str:
    """The first 16 hex digits of SHA-256 of the raw 32-byte Ed25519 public key."""
    return hashlib.sha256(bytes.fromhex(public_key_hex)).hexdigest()[:16]


def ed25519_verify(public_key_hex: str, message: bytes, signature_hex: Any) -> bool:
    try:
        key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex))
        key.verify(bytes.fromhex(signature_hex), message)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def event_signature_problem(record: Mapping[str, Any], keys: Mapping[str, str]) -> str | None:
    """Why an event's authentication fails (None when it holds). ``keys``: key id → public key hex."""
    if record.get("v", VERSION) != VERSION:
        return f"format {record.get('v')} event after the format-2 cut-over"
    if record.get("signature") is None:
        if record.get("key_id") is None and is_capture(record):
            return None
        return "no signature (not written by the application, nor in the capture trigger's shape)"
    kid = record.get("key_id")
    public = keys.get(kid) if isinstance(kid, str) else None
    if public is None:
        return f"signed with key {kid!r}, which the witness never introduced"
    try:
        message = event_message(record)
    except jcs.CanonicalError as exc:
        return f"not canonicalisable: {exc}"
    if not ed25519_verify(public, message, record.get("signature")):
        return f"signature does not verify with key {kid}"
    return None


# --- witness entries -------------------------------------------------------------------------------


def entry_message(entry: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in entry.items() if k != "signature"}
    return ENTRY_DOMAINS[entry["type"]] + jcs.canonical(body)


def entry_hash(entry: Mapping[str, Any]) -> str:
    return hashlib.sha256(jcs.canonical(dict(entry))).hexdigest()


class WitnessState:
    """The keys and checkpoints of a witness log, checked entry by entry (``add`` raises on a bad one).

    The first entry introduces a key and is signed by it; every later key is introduced by an entry
    signed with a key already introduced; every checkpoint is signed by an introduced key, never
    shrinks the tree, and links to the previous entry by hash.
    """

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.key_entries: list[dict[str, Any]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.entries = 0
        self.last_hash = GENESIS
        self.current_key: str | None = None

    def add(self, entry: Any) -> None:
        n = self.entries
        if not isinstance(entry, dict) or entry.get("type") not in ENTRY_DOMAINS:
            raise ValueError(f"witness entry {n}: not a checkpoint or key entry")
        if entry.get("n") != n:
            raise ValueError(f"witness entry {n}: numbered {entry.get('n')!r} (entries removed or inserted)")
        if entry.get("prev") != self.last_hash:
            raise ValueError(
                f"witness entry {n}: prev does not match the previous entry (edited or reordered)"
            )
        signer = entry.get("key_id")
        if entry["type"] == "key":
            public = entry.get("public_key")
            if not isinstance(public, str) or len(public) != 64 or key_id(public) != entry.get("introduces"):
                raise ValueError(f"witness entry {n}: malformed key entry")
            signer_public = public if n == 0 and signer == entry["introduces"] else self.keys.get(signer)
        else:
            signer_public = self.keys.get(signer)
            size, root = entry.get("size"), entry.get("root")
            if not isinstance(size, int) or size < 0 or not isinstance(root, str) or len(root) != 64:
                raise ValueError(f"witness entry {n}: malformed checkpoint")
            if self.checkpoints and size < self.checkpoints[-1]["size"]:
                raise ValueError(f"witness entry {n}: checkpoint size {size} shrinks the tree")
        if signer_public is None:
            raise ValueError(
                f"witness entry {n}: signed by key {signer!r}, which no earlier entry introduced"
            )
        if not ed25519_verify(signer_public, entry_message(entry), entry.get("signature")):
            raise ValueError(f"witness entry {n}: signature does not verify (forged or edited)")
        if entry["type"] == "key":
            self.keys[entry["introduces"]] = entry["public_key"]
            self.key_entries.append(entry)
            self.current_key = entry["introduces"]
        else:
            self.checkpoints.append(entry)
        self.entries += 1
        self.last_hash = entry_hash(entry)


def keys_from_entries(entries: list[Any], *, pinned: frozenset[str] = frozenset()) -> dict[str, str]:
    """The keys an export lists (its witness's key entries, in order), each checked: the first is
    signed by itself, every later one by a key listed before it. ``pinned`` public keys (hex), when
    given, must include the first one. Raises ``ValueError`` naming the bad entry."""
    keys: dict[str, str] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.get("type") != "key":
            raise ValueError(f"keys[{i}] is not a key entry")
        public = entry.get("public_key")
        if not isinstance(public, str) or len(public) != 64 or key_id(public) != entry.get("introduces"):
            raise ValueError(f"keys[{i}] is malformed")
        signer = (
            public
            if i == 0 and entry.get("key_id") == entry.get("introduces")
            else keys.get(entry.get("key_id"))
        )
        if signer is None:
            raise ValueError(f"keys[{i}] is signed by a key not listed before it")
        if not ed25519_verify(signer, entry_message(entry), entry.get("signature")):
            raise ValueError(f"keys[{i}] signature does not verify")
        if i == 0 and pinned and public not in pinned:
            raise ValueError(f"keys[0] ({entry['introduces']}) is not the pinned public key")
        keys[entry["introduces"]] = public
    return keys
