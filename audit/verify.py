"""Offline verification of an audit export: ``python -m audit.verify EXPORT.json [--public-key HEX]``.

No Django, no database (the project's pure modules and ``cryptography`` only): an auditor can check
an export on any machine. Format 2 (docs/audit-format.md): the checkpoint's Ed25519 signature, then
a complete export's Merkle root against it, or each event's inclusion proof in a filtered one.
Format-1 exports (ADR 0005) are still read. Prints ``OK`` and the head, or the first bad event or
checkpoint and why; exits 1 on failure, 2 when the file cannot be read as an export.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from audit import jcs, merkle
from audit.chain import EMPTY_HEAD, GENESIS_HASH, Head, VerifyResult, verify_records

FORMAT = "governor-audit-export/1"
FORMAT_2 = "governor-audit-export/2"


class ExportError(ValueError):
    """The file is not an audit export this verifier understands."""


def _head(value: Any, what: str) -> Head:
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("index"), int)
        or not isinstance(value.get("hash"), str)
    ):
        raise ExportError(f"{what} must be an object with an integer 'index' and a string 'hash'")
    return Head(index=value["index"], hash=value["hash"])


def verify_export(
    data: Any,
    *,
    expected_head: Head | None = None,
    pinned: frozenset[str] = frozenset(),
    signatures: str = "unwitnessed",
    witness: list[Any] | None = None,
) -> VerifyResult:
    """Verify a parsed export (values as ``audit.jcs.loads`` parses them, or plain ``json``)."""
    if not isinstance(data, dict) or data.get("format") not in (FORMAT, FORMAT_2):
        raise ExportError(f"not an audit export (expected format {FORMAT_2!r})")
    events = data.get("events")
    if not isinstance(events, list):
        raise ExportError("'events' must be a list of objects")
    if data["format"] == FORMAT_2:
        events = [jcs.loads(jcs.canonical(e).decode()) if isinstance(e, dict) else e for e in events]
    return verify_stream(
        data, events, expected_head=expected_head, pinned=pinned, signatures=signatures, witness=witness
    )


def verify_v2(
    header: dict,
    events: Iterable[Any],
    *,
    pinned: frozenset[str] = frozenset(),
    signatures: str = "unwitnessed",
    witness: list[Any] | None = None,
) -> VerifyResult:
    """Format 2: keys, the checkpoint's signature, then the events against the checkpoint (and,
    given a copy of the witness, against every checkpoint it holds up to the export's size)."""
    from audit.format import ed25519_verify, entry_message, keys_from_entries, leaf_hash
    from audit.walk import walk

    try:
        keys = keys_from_entries(header.get("keys") or [], pinned=pinned)
    except ValueError as exc:
        return VerifyResult(False, EMPTY_HEAD, 0, None, f"bad key list: {exc}")
    cp = header.get("checkpoint")
    if not isinstance(cp, dict) or cp.get("type") != "checkpoint":
        return VerifyResult(
            False, EMPTY_HEAD, 0, None, "the export carries no signed checkpoint: nothing vouches for it"
        )
    size, root = cp.get("size"), cp.get("root")
    if not isinstance(size, int) or not isinstance(root, str) or len(root) != 64:
        return VerifyResult(False, EMPTY_HEAD, 0, None, "malformed checkpoint")
    public = keys.get(cp.get("key_id"))
    if public is None or not ed25519_verify(public, entry_message(cp), cp.get("signature")):
        return VerifyResult(
            False, EMPTY_HEAD, 0, None, f"checkpoint {cp.get('n')}: signature does not verify with a listed key (forged or edited)"
        )  # fmt: skip

    def checked_events() -> Iterator[dict]:
        for event in events:
            if not isinstance(event, dict):
                raise ExportError("every event must be a JSON object")
            yield event

    checkpoints = [cp]
    if witness is not None:
        from audit.format import WitnessState

        state = WitnessState()
        try:
            for entry in witness:
                state.add(entry)
        except ValueError as exc:
            return VerifyResult(False, EMPTY_HEAD, 0, None, f"witness: {exc}")
        if pinned and state.key_entries and state.key_entries[0]["public_key"] not in pinned:
            return VerifyResult(
                False, EMPTY_HEAD, 0, None, "bad key list: the witness's first key is not the pinned key"
            )
        if not any(
            c.get("n") == cp.get("n") and c.get("signature") == cp.get("signature") for c in state.checkpoints
        ):
            return VerifyResult(
                False, EMPTY_HEAD, 0, None, f"checkpoint {cp.get('n')} of the export is not in the witness (forged or replaced)"
            )  # fmt: skip
        checkpoints = [c for c in state.checkpoints if c["size"] <= size]
        keys = {**keys, **state.keys}
    if header.get("complete") is True:
        result = walk(checked_events(), checkpoints=checkpoints, keys=keys, signatures=signatures)
        if result.ok and result.checked != size:
            return VerifyResult(
                False, result.head, result.checked, size, f"events after checkpoint {cp.get('n')}'s {size} events"
            )  # fmt: skip
        return result
    # Filtered: each event stands alone, proved by its inclusion proof against the signed root.
    root_bytes = bytes.fromhex(root)
    last = -1
    checked = 0
    prev = EMPTY_HEAD
    for event in checked_events():
        index, seq = event.get("chain_index"), event.get("seq")
        if not isinstance(index, int) or index <= last:
            return VerifyResult(
                False, prev, checked, index, f"chain index {index!r} out of order after {last}", seq
            )
        try:
            h = leaf_hash(event, fast=True)
        except ValueError as exc:
            return VerifyResult(False, prev, checked, index, f"not canonical JSON: {exc}", seq)
        if h != event.get("hash"):
            return VerifyResult(False, prev, checked, index, "content does not match its hash (edited)", seq)
        try:
            proof = [bytes.fromhex(p) for p in event.get("inclusion_proof") or []]
            merkle.verify_inclusion(
                index=index, size=size, leaf=bytes.fromhex(h), path=proof, root=root_bytes
            )
        except (ValueError, TypeError) as exc:
            return VerifyResult(
                False, prev, checked, index, f"not in the tree of checkpoint {cp.get('n')}: {exc} (forged or edited)", seq
            )  # fmt: skip
        if signatures == "all" and event.get("v") == 2:
            from audit.format import event_signature_problem

            problem = event_signature_problem(event, keys)
            if problem is not None:
                return VerifyResult(False, prev, checked, index, f"{problem} (forged)", seq)
        last = index
        prev = Head(index, h)
        checked += 1
    return VerifyResult(True, prev, checked)


def verify_stream(
    header: dict,
    events: Iterable[Any],
    *,
    expected_head: Head | None = None,
    pinned: frozenset[str] = frozenset(),
    signatures: str = "unwitnessed",
    witness: list[Any] | None = None,
) -> VerifyResult:
    """Like ``verify_export`` with the events as any iterable (read one at a time, any file size)."""
    if header.get("format") == FORMAT_2:
        return verify_v2(header, events, pinned=pinned, signatures=signatures, witness=witness)
    if header.get("format") != FORMAT:
        raise ExportError(f"not an audit export (expected format {FORMAT!r})")
    head = _head(header.get("head"), "'head'")
    complete = header.get("complete") is True
    pinned: list[str | None] = [None]  # the hash found at the expected head's index, if any

    def checked_events() -> Iterator[dict]:
        for event in events:
            if not isinstance(event, dict):
                raise ExportError("every event must be a JSON object")
            if expected_head is not None and event.get("chain_index") == expected_head.index:
                pinned[0] = event.get("hash")
            yield jcs.floats(event)

    result = verify_records(checked_events(), published=head, contiguous=complete)
    if result.ok and complete and result.head != head:
        return VerifyResult(
            False,
            result.head,
            result.checked,
            head.index + 1,
            f"events after the export's head index {head.index}",
        )
    if (
        result.ok
        and expected_head is not None
        and expected_head.index >= 0
        and pinned[0] != expected_head.hash
    ):
        # A head obtained independently (Redis, the log, an earlier export) pins the history.
        if complete and expected_head.index > head.index:
            reason = f"export ends at {head.index}, before the expected head {expected_head.index} (tail truncated)"
            return VerifyResult(False, result.head, result.checked, head.index + 1, reason)
        return VerifyResult(
            False,
            result.head,
            result.checked,
            expected_head.index,
            f"hash at index {expected_head.index} differs from the expected head {expected_head.hash}",
        )
    return result


_EVENTS_OPEN = ', "events": ['


def _stream_events(lines: Iterator[str]) -> Iterator[Any]:
    """Events of the server's layout: one per line, ``,`` at the end of all but the last, then ``]}``."""
    closed = False
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if closed:
            raise ExportError("data after the end of the events list")
        if line == "]}":
            closed = True
            continue
        yield jcs.loads(line[:-1] if line.endswith(",") else line)
    if not closed:
        raise ExportError("the events list is not closed (file cut short?)")


def _verify_file(path: str, expected_head: Head | None, **kw: Any) -> tuple[VerifyResult, dict]:
    """Stream the server's one-event-per-line layout; any other JSON layout is loaded whole."""
    with open(path, encoding="utf-8") as fh:
        first = fh.readline().rstrip("\n")
        if first.startswith("{") and first.endswith(_EVENTS_OPEN):
            header = json.loads(first[: -len(_EVENTS_OPEN)] + "}")
            if not isinstance(header, dict):
                raise ExportError(f"not an audit export (expected format {FORMAT_2!r})")
            return verify_stream(header, _stream_events(fh), expected_head=expected_head, **kw), header
        fh.seek(0)
        data = json.load(fh)
        return verify_export(data, expected_head=expected_head, **kw), data


def _parse_head(text: str) -> Head:
    index, _, hash_ = text.partition(":")
    try:
        head = Head(index=int(index), hash=hash_ or GENESIS_HASH)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("--head must be INDEX:HASH") from exc
    if len(head.hash) != 64:
        raise argparse.ArgumentTypeError("--head hash must be 64 hex digits")
    return head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m audit.verify", description=__doc__.splitlines()[0])
    parser.add_argument("export", help="a JSON export of the audit trail")
    parser.add_argument(
        "--head", type=_parse_head, help="format 1: INDEX:HASH of a head obtained independently"
    )
    parser.add_argument(
        "--public-key",
        action="append",
        default=[],
        help="the trail's first public key (hex, from the Audit page): the export's keys must start at it",
    )
    parser.add_argument(
        "--signatures",
        choices=["unwitnessed", "all", "none"],
        default="unwitnessed",
        help="also check every event's own Ed25519 signature ('all'); the signed checkpoint covers them anyway",
    )
    parser.add_argument(
        "--witness",
        help="a copy of the witness file (JSON lines): the export must agree with every checkpoint in it",
    )
    args = parser.parse_args(argv)
    try:
        witness = None
        if args.witness:
            with open(args.witness, encoding="utf-8") as fh:
                witness = [jcs.loads(line) for line in fh if line.strip()]
        result, header = _verify_file(
            args.export,
            args.head,
            pinned=frozenset(k.lower() for k in args.public_key),
            signatures=args.signatures,
            witness=witness,
        )
    except (OSError, ValueError) as exc:  # json.JSONDecodeError and ExportError are ValueErrors
        print(f"ERROR {exc}", file=sys.stderr)
        return 2
    print(result.describe())
    if result.ok and header.get("complete") is not True:
        print("note: a filtered export proves each event's hash, not that no event is missing")
    if result.ok and header.get("format") == FORMAT_2 and not args.public_key:
        print(
            "note: the signing key was not pinned: compare keys[0].public_key with the Audit page (--public-key)"
        )
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
