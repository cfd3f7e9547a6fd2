"""The Django-free chain: canonical JSON and the walk that names the first bad record."""

from __future__ import annotations

import copy

from audit.chain import GENESIS_HASH, Head, canonical_json, event_hash, verify_records


def _chain(n: int) -> list[dict]:
    records, prev = [], GENESIS_HASH
    for i in range(n):
        record = {
            "seq": 100 + i,
            "chain_index": i,
            "prev_hash": prev,
            "at": f"2026-11-30T10:00:0{i}+00:00",
            "actor": "alice",
            "action": "thing.change",
            "before": {"n": i},
            "after": {"n": i + 1},
        }
        record["hash"] = prev = event_hash(record)
        records.append(record)
    return records


def test_canonical_json_sorts_keys_drops_whitespace_and_keeps_utf8():
    assert (
        canonical_json({"b": 1, "a": ["é", {"d": None, "c": 1.5}]})
        == '{"a":["é",{"c":1.5,"d":null}],"b":1}'.encode()
    )


def test_hash_covers_content_and_previous_hash():
    record = _chain(1)[0]
    assert event_hash({**record, "after": {"n": 2}}) != record["hash"]
    assert event_hash({**record, "prev_hash": "1" * 64}) != record["hash"]


def test_intact_chain_verifies_to_its_head():
    records = _chain(5)
    result = verify_records(records, published=Head(4, records[-1]["hash"]))
    assert result.ok and result.head == Head(4, records[-1]["hash"]) and result.checked == 5


def test_edited_record_is_named():
    records = _chain(5)
    records[2]["after"] = {"n": 99}
    result = verify_records(records)
    assert not result.ok and result.bad_index == 2 and "edited" in result.reason


def test_deleted_record_is_named():
    records = _chain(5)
    del records[3]
    result = verify_records(records)
    assert not result.ok and result.bad_index == 3 and "missing" in result.reason


def test_reordered_records_are_named():
    records = _chain(5)
    records[1], records[2] = records[2], records[1]
    result = verify_records(records)
    assert not result.ok and result.bad_index == 1


def test_inserted_record_is_named_even_with_a_recomputed_hash():
    records = _chain(5)
    forged = copy.deepcopy(records[2])
    forged["after"] = {"n": 1000}
    forged["hash"] = event_hash(forged)
    records.insert(3, forged)
    result = verify_records(records)
    assert not result.ok and result.bad_index == 3


def test_truncated_tail_is_caught_only_against_a_published_head():
    records = _chain(5)
    published = Head(4, records[-1]["hash"])
    assert verify_records(records[:3]).ok  # the chain alone cannot know its tail is gone
    result = verify_records(records[:3], published=published)
    assert not result.ok and result.bad_index == 3 and "truncated" in result.reason


def test_consistently_rewritten_chain_differs_from_the_published_head():
    records = _chain(5)
    published = Head(4, records[-1]["hash"])
    rewritten = _chain(5)
    rewritten[0]["after"] = {"n": 42}
    prev = GENESIS_HASH
    for record in rewritten:  # a forger recomputes every hash after the edit
        record["prev_hash"] = prev
        record["hash"] = prev = event_hash(record)
    assert verify_records(rewritten).ok
    result = verify_records(rewritten, published=published)
    assert not result.ok and result.bad_index == 4 and "published head" in result.reason
