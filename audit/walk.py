"""The walk every verifier shares (``audit_verify`` over the database, ``python -m audit.verify``
over an export): hashes, links, format rules, signatures and the Merkle roots of witnessed
checkpoints, naming the first event or checkpoint that fails. No Django (the offline verifier uses it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from audit import merkle
from audit.chain import EMPTY_HEAD, Head, VerifyResult
from audit.format import event_signature_problem, leaf_hash


def walk(
    records: Iterable[Mapping[str, Any]],
    *,
    checkpoints: Sequence[Mapping[str, Any]] = (),
    keys: Mapping[str, str] | None = None,
    signatures: str = "unwitnessed",
) -> VerifyResult:
    """Walk a whole chain from genesis in chain order (JSON values parsed with ``audit.jcs.loads``).

    ``checkpoints`` (witnessed, by size): the tree of the first ``size`` leaves must have their root
    and last leaf hash, and the chain must reach the largest. ``signatures``: ``"unwitnessed"``
    checks the signature of each event after the last checkpoint (those before are covered by a
    signed root whose events the sealer authenticated), ``"all"`` checks every one, ``"none"`` none.
    """
    keys = keys or {}
    cps = sorted(checkpoints, key=lambda c: (c["size"], c.get("n", 0)))
    witnessed = cps[-1]["size"] if cps else 0
    cp_i = 0
    while cp_i < len(cps) and cps[cp_i]["size"] == 0:
        if cps[cp_i]["root"] != merkle.EMPTY_ROOT.hex():
            return VerifyResult(False, EMPTY_HEAD, 0, 0, f"checkpoint {cps[cp_i].get('n')}: bad empty root")
        cp_i += 1
    frontier = merkle.Frontier()
    append = frontier.append
    fromhex = bytes.fromhex
    prev = EMPTY_HEAD.hash
    index = -1
    seen_v2 = False
    checked = 0
    for record in records:
        expected = index + 1
        got = record.get("chain_index")
        seq = record.get("seq")
        if got != expected:
            if not isinstance(got, int):
                reason = "event is not sealed (no chain index)"
            elif got > expected:
                reason = f"chain index jumps from {index} to {got}: event {expected} is missing"
            else:
                reason = f"chain index {got} repeats or goes backwards after {index} (reordered or inserted)"
            return VerifyResult(False, Head(index, prev), checked, expected, reason, seq)
        if record.get("prev_hash") != prev:
            return VerifyResult(
                False,
                Head(index, prev),
                checked,
                expected,
                "prev_hash does not match the previous event's hash (inserted, deleted or reordered)",
                seq,
            )
        version = record.get("v")
        if version == 1:
            if seen_v2:
                return VerifyResult(
                    False,
                    Head(index, prev),
                    checked,
                    expected,
                    "format-1 event after format 2 began (forged)",
                    seq,
                )
        elif version == 2:
            seen_v2 = True
        else:
            return VerifyResult(
                False, Head(index, prev), checked, expected, f"unknown format {version!r}", seq
            )
        try:
            h = leaf_hash(record, fast=True)
        except ValueError as exc:
            return VerifyResult(
                False, Head(index, prev), checked, expected, f"not canonical JSON: {exc}", seq
            )
        if h != record.get("hash"):
            return VerifyResult(
                False, Head(index, prev), checked, expected, "content does not match its hash (edited)", seq
            )
        if version == 2 and (signatures == "all" or (signatures == "unwitnessed" and expected >= witnessed)):
            problem = event_signature_problem(record, keys)
            if problem is not None:
                return VerifyResult(False, Head(index, prev), checked, expected, f"{problem} (forged)", seq)
        append(fromhex(h))
        index = expected
        prev = h
        checked += 1
        while cp_i < len(cps) and cps[cp_i]["size"] == checked:
            cp = cps[cp_i]
            if cp["root"] != frontier.root().hex() or cp.get("head", prev) != prev:
                first = cps[cp_i - 1]["size"] if cp_i else 0
                return VerifyResult(
                    False,
                    Head(index, prev),
                    checked,
                    first,
                    f"the first {checked} events do not hash to the root of witnessed checkpoint {cp.get('n')}:"
                    f" an event at chain index {first}..{index} was rewritten, inserted, deleted or reordered",
                )
            cp_i += 1
    if cp_i < len(cps):
        cp = cps[cp_i]
        return VerifyResult(
            False,
            Head(index, prev),
            checked,
            index + 1,
            f"chain ends at index {index} but witnessed checkpoint {cp.get('n')} covers {cp['size']} events"
            " (tail truncated)",
        )
    return VerifyResult(True, Head(index, prev), checked)
