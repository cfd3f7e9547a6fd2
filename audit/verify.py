"""Offline verification of an audit export: ``python -m audit.verify EXPORT.json [--head INDEX:HASH]``.

Standard library only (no Django, no database): an auditor can check an export on any machine.
Prints ``OK`` and the head, or the chain index of the first bad event and why; exits 1 on failure,
2 when the file cannot be read as an export.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from audit.chain import GENESIS_HASH, Head, VerifyResult, verify_records

FORMAT = "governor-audit-export/1"


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


def verify_export(data: Any, *, expected_head: Head | None = None) -> VerifyResult:
    """Verify a parsed export. A complete export must be the whole chain from genesis to its head;
    a filtered one proves each event's hash and the order only (it cannot prove nothing is missing).
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExportError(f"not an audit export (expected format {FORMAT!r})")
    events = data.get("events")
    if not isinstance(events, list):
        raise ExportError("'events' must be a list of objects")
    return verify_stream(data, events, expected_head=expected_head)


def verify_stream(header: dict, events: Iterable[Any], *, expected_head: Head | None = None) -> VerifyResult:
    """Like ``verify_export`` with the events as any iterable (read one at a time, any file size)."""
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
            yield event

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
        yield json.loads(line[:-1] if line.endswith(",") else line)
    if not closed:
        raise ExportError("the events list is not closed (file cut short?)")


def _verify_file(path: str, expected_head: Head | None) -> tuple[VerifyResult, dict]:
    """Stream the server's one-event-per-line layout; any other JSON layout is loaded whole."""
    with open(path, encoding="utf-8") as fh:
        first = fh.readline().rstrip("\n")
        if first.startswith("{") and first.endswith(_EVENTS_OPEN):
            header = json.loads(first[: -len(_EVENTS_OPEN)] + "}")
            if not isinstance(header, dict):
                raise ExportError(f"not an audit export (expected format {FORMAT!r})")
            return verify_stream(header, _stream_events(fh), expected_head=expected_head), header
        fh.seek(0)
        data = json.load(fh)
        return verify_export(data, expected_head=expected_head), data


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
    parser.add_argument("--head", type=_parse_head, help="INDEX:HASH of a head obtained independently")
    args = parser.parse_args(argv)
    try:
        result, header = _verify_file(args.export, args.head)
    except (OSError, ValueError) as exc:  # json.JSONDecodeError and ExportError are ValueErrors
        print(f"ERROR {exc}", file=sys.stderr)
        return 2
    print(result.describe())
    if result.ok and header.get("complete") is not True:
        print("note: a filtered export proves each event's hash, not that no event is missing")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
