"""Test vectors of format 2 (docs/audit-format.md): ``python -m audit.vectors docs/audit-vectors``.

Deterministic (fixed key, times and nonces; Ed25519 signatures are deterministic), so the committed
files are exactly what this writes. The key is public: it signs nothing but these vectors.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from audit import merkle
from audit.format import GENESIS, entry_hash, entry_message, event_message, leaf_hash, leaf_object
from audit.jcs import canonical

SEED = hashlib.sha256(b"governor audit-format test vectors: a public key, never use it").digest()
OTHER_SEED = hashlib.sha256(b"governor audit-format test vectors: an impostor").digest()
FORMAT = "governor-audit-export/2"


def _key(seed: bytes):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from audit.format import key_id

    private = Ed25519PrivateKey.from_private_bytes(seed)
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    return private, public, key_id(public)


def _events(private, kid: str) -> list[dict[str, Any]]:
    base = {
        "actor_id": 3,
        "role": "platform_admin",
        "tenant_id": None,
        "evidence": {},
        "request_id": "req-1",
        "client_address": "192.0.2.10",
        "key_id": kid,
    }
    bodies = [
        {
            "actor": "alice",
            "action": "price.publish",
            "object_type": "billing.price",
            "object_id": "7",
            "object_repr": "gpt-small input",
            "before": {"amount": "2.5000"},
            "after": {"amount": "3.0000"},
            "reason": "quarterly review",
        },
        {
            "actor": "alice",
            "action": "model_version.gate_override",
            "object_type": "catalog.modelversion",
            "object_id": "12",
            "object_repr": "small v3",
            "tenant_id": 4,
            # Numbers whose text differs between JSON serialisers: RFC 8785 fixes each one.
            "before": {"score": 2.0, "ratio": 0.1, "huge": 1e21, "tiny": 1e-7, "neg": -5, "half": 1.5},
            "after": {"score": 0.93, "threshold": 100.0, "list": [1, 2.5, -0.0]},
            "reason": "manual gate override",
        },
        {
            "actor": "bob",
            "action": "tenant.update",
            "object_type": "billing.tenant",
            "object_id": "4",
            "object_repr": "Café ✓",
            # Keys sort by UTF-16 code unit: "😀" (U+D83D U+DE00) before "\ue000"; control characters escape.
            "before": {"name": "Cafe", "\ue000": "private use", "😀": "emoji", "a\u0001b": "ctl\n"},
            "after": {"name": "Café ✓"},
            "reason": "",
        },
    ]
    events = []
    for i, body in enumerate(bodies):
        record = {**base, **body, "at": f"2026-11-30T10:0{i}:00.12345{i}+00:00", "nonce": f"{i:032x}"}
        record["signature"] = private.sign(event_message(record)).hex()
        events.append(record)
    # An event the database's capture trigger wrote: unsigned, in the one shape allowed to be.
    events.append(
        {
            "at": "2026-11-30T10:03:00+00:00",
            "actor": "db:postgres",
            "actor_id": None,
            "role": "database",
            "action": "raw.update",
            "object_type": "billing.price",
            "object_id": "7",
            "object_repr": "",
            "tenant_id": None,
            "before": {"amount": "3.0000"},
            "after": {"amount": "0.0100"},
            "reason": "write outside the services, caught by a database trigger",
            "evidence": {"table": "billing_price", "transaction_id": "991"},
            "request_id": "",
            "client_address": "local",
            "nonce": None,
            "key_id": None,
            "signature": None,
        }
    )
    return events


def _chain(events: list[dict[str, Any]], first_seq: int = 101) -> list[dict[str, Any]]:
    prev = GENESIS
    out = []
    for i, event in enumerate(events):
        record = {"v": 2, "seq": first_seq + i, "chain_index": i, "prev_hash": prev, **event}
        record["hash"] = prev = leaf_hash(record)
        out.append(record)
    return out


def _entry(private, kid: str, fields: dict, n: int, prev: str, at: str) -> dict:
    entry = {**fields, "n": n, "prev": prev, "at": at, "key_id": kid}
    entry["signature"] = private.sign(entry_message(entry)).hex()
    return entry


def _export(header: dict, events: list[dict]) -> str:
    head = json.dumps(header, ensure_ascii=False)
    body = ",\n".join(json.dumps(e, ensure_ascii=False) for e in events)
    return head[:-1] + ', "events": [\n' + body + "\n]}\n"


def build() -> dict[str, str]:
    """File name → content of every vector file."""
    private, public, kid = _key(SEED)
    events = _chain(_events(private, kid))
    hashes = [bytes.fromhex(e["hash"]) for e in events]
    tree = merkle.Tree(hashes)
    key_entry = _entry(
        private,
        kid,
        {"type": "key", "public_key": public, "introduces": kid},
        0,
        GENESIS,
        "2026-11-30T09:59:00+00:00",
    )
    checkpoint = _entry(
        private,
        kid,
        {"type": "checkpoint", "size": len(events), "root": tree.root().hex(), "head": events[-1]["hash"]},
        1,
        entry_hash(key_entry),
        "2026-11-30T10:04:00+00:00",
    )

    def header(complete: bool, filters: dict, cp: dict = checkpoint, keys: list | None = None) -> dict:
        return {
            "format": FORMAT,
            "generated_at": "2026-11-30T10:05:00+00:00",
            "complete": complete,
            "filters": filters,
            "head": {"index": cp["size"] - 1, "hash": cp["head"]},
            "checkpoint": cp,
            "keys": [key_entry] if keys is None else keys,
        }

    files: dict[str, str] = {}
    cases: list[dict[str, Any]] = []

    def case(name: str, content: str, verdict: str, first_bad: Any, why: str) -> None:
        files[name] = content
        cases.append({"file": name, "verdict": verdict, "first_bad": first_bad, "why": why})

    case("export-complete.json", _export(header(True, {}), events), "ok", None, "genuine complete export")
    filtered = []
    for e in (events[1], events[3]):
        filtered.append({**e, "inclusion_proof": [h.hex() for h in tree.inclusion_proof(e["chain_index"])]})
    case("export-filtered.json", _export(header(False, {"object_type": "catalog.modelversion"}), filtered), "ok", None,
         "genuine filtered export: two events with inclusion proofs")  # fmt: skip

    edited = copy.deepcopy(events)
    edited[2]["reason"] = "nothing to see"
    case("tampered-edited-event.json", _export(header(True, {}), edited), "fail", 2,
         "event 2's reason edited: its hash no longer matches")  # fmt: skip

    rehashed = copy.deepcopy(events)
    rehashed[1]["reason"] = "routine change"
    case("tampered-edited-rehashed.json", _export(header(True, {}), _chain([_strip(e) for e in rehashed])), "fail", 1,
         "event 1 edited and every hash and link recomputed: its signature no longer verifies")  # fmt: skip

    swapped = [_strip(e) for e in (events[0], events[2], events[1], events[3])]
    case("tampered-reordered-relinked.json", _export(header(True, {}), _chain(swapped)), "fail", "checkpoint",
         "events 1 and 2 swapped, indexes, links and hashes recomputed: each event verifies, the tree root"
         " differs from the signed checkpoint")  # fmt: skip

    case("tampered-reordered.json", _export(header(True, {}), [events[0], events[2], events[1], events[3]]), "fail", 1,
         "events 1 and 2 swapped as they are: chain index 2 where 1 is expected")  # fmt: skip

    case("tampered-truncated.json", _export(header(True, {}), events[:3]), "fail", 3,
         "last event removed: the checkpoint covers 4 events")  # fmt: skip

    forged_cp = copy.deepcopy(checkpoint)
    forged_cp["size"] = 3
    forged_cp["root"] = merkle.root_of(hashes[:3]).hex()
    forged_cp["head"] = events[2]["hash"]
    case("tampered-checkpoint.json", _export(header(True, {}, cp=forged_cp), events[:3]), "fail", "checkpoint",
         "checkpoint rewritten to 3 events without the key: its signature does not verify")  # fmt: skip

    o_private, o_public, o_kid = _key(OTHER_SEED)
    impostor_events = _chain([_strip(e) for e in _events(o_private, o_kid)])
    impostor_tree = merkle.Tree([bytes.fromhex(e["hash"]) for e in impostor_events])
    impostor_key = _entry(o_private, o_kid, {"type": "key", "public_key": o_public, "introduces": o_kid}, 0, GENESIS,
                          "2026-11-30T09:59:00+00:00")  # fmt: skip
    impostor_cp = _entry(
        o_private,
        o_kid,
        {
            "type": "checkpoint",
            "size": 4,
            "root": impostor_tree.root().hex(),
            "head": impostor_events[-1]["hash"],
        },
        1,
        entry_hash(impostor_key),
        "2026-11-30T10:04:00+00:00",
    )
    case("tampered-impostor-key.json", _export(header(True, {}, cp=impostor_cp, keys=[impostor_key]), impostor_events),
         "fail-pinned", "keys",
         "the same events re-signed, re-chained and checkpointed by another key: consistent in itself, so it"
         " fails only when the verifier pins the genuine public key (from the Audit page)")  # fmt: skip

    bad_proof = copy.deepcopy(filtered)
    proof = bad_proof[1]["inclusion_proof"]
    proof[0] = proof[0][:-1] + ("0" if proof[0][-1] != "0" else "1")
    case("tampered-filtered-proof.json", _export(header(False, {"object_type": "catalog.modelversion"}), bad_proof),
         "fail", 3, "event 3's inclusion proof altered")  # fmt: skip

    manifest = {
        "about": "Test vectors of docs/audit-format.md. The signing key below is public; it signs only these files.",
        "public_key": public,
        "key_id": kid,
        "seed_hex_for_regeneration": SEED.hex(),
        "events": [
            {
                "chain_index": e["chain_index"],
                "leaf_jcs": canonical(leaf_object(e)).decode("utf-8"),
                "leaf_hash": e["hash"],
                "signed_message": event_message(e).decode("utf-8") if e["signature"] else None,
            }
            for e in events
        ],
        "roots": {str(n): merkle.root_of(hashes[:n]).hex() for n in range(len(hashes) + 1)},
        "checkpoint": checkpoint,
        "checkpoint_signed_message": entry_message(checkpoint).decode("utf-8"),
        "cases": cases,
    }
    files["vectors.json"] = json.dumps(manifest, ensure_ascii=False, indent=1) + "\n"
    return files


def _strip(event: dict) -> dict:
    return {k: v for k, v in event.items() if k not in ("v", "seq", "chain_index", "prev_hash", "hash")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    target = Path(argv[0] if argv else "docs/audit-vectors")
    target.mkdir(parents=True, exist_ok=True)
    for name, content in build().items():
        (target / name).write_text(content, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
