"""Format 2 against outside references: RFC 8785 (the ``rfc8785`` package), RFC 9162 Merkle vectors
from transparency-dev/merkle, and a verifier in another language written only from
docs/audit-format.md, run on the committed test vectors and on a real export."""

from __future__ import annotations

import base64
import json
import math
import shutil
import struct
import subprocess

import pytest
import rfc8785
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import jcs, merkle, vectors
from audit.verify import verify_export
from tests.conftest import ROOT

VECTORS = ROOT / "docs" / "audit-vectors"
VERIFIER = ROOT / "tests" / "audit" / "independent_verifier.mjs"
MANIFEST = json.loads((VECTORS / "vectors.json").read_text(encoding="utf-8"))
NODE = shutil.which("node")


# --- RFC 8785 -----------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_fast_canonical_form_is_rfc8785_byte_for_byte(value):
    """The verifier's fast path (orjson + ECMAScript number layout) against the rfc8785 package."""
    text = json.dumps(value)
    assert jcs.canonical_fast(jcs.loads(text)) == rfc8785.dumps(json.loads(text))


@settings(max_examples=3000, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_number_layout_is_ecmascripts_for_any_double(bits):
    value = struct.unpack("<d", struct.pack("<Q", bits))[0]
    if not math.isfinite(value):
        return
    assert jcs.number(value) == rfc8785.dumps(value).decode()


def test_integers_beyond_what_json_numbers_carry_are_refused():
    with pytest.raises(jcs.CanonicalError):
        jcs.loads('{"n": 9007199254740993}')


# --- RFC 9162 Merkle tree ---------------------------------------------------------------------------

_REF = json.loads((ROOT / "tests" / "audit" / "vectors" / "transparency_dev_merkle.json").read_text())


def _b64(s: str) -> bytes:
    return base64.b64decode(s)


@pytest.mark.parametrize("name", sorted(_REF["files"]))
def test_merkle_proofs_against_transparency_dev_vectors(name):
    case = _REF["files"][name]
    if name.startswith("inclusion"):
        check = lambda: merkle.verify_inclusion(  # noqa: E731
            index=case["leafIdx"], size=case["treeSize"], leaf=_b64(case["leafHash"]),
            path=[_b64(p) for p in case["proof"]], root=_b64(case["root"]),
        )  # fmt: skip
    else:
        check = lambda: merkle.verify_consistency(  # noqa: E731
            old=case["size1"], new=case["size2"], old_root=_b64(case["root1"]), new_root=_b64(case["root2"]),
            proof=[_b64(p) for p in case["proof"]],
        )  # fmt: skip
    if case["wantErr"]:
        with pytest.raises(merkle.ProofError):
            check()
    else:
        check()


def test_our_tree_gives_the_reference_roots_and_proofs():
    """Over the reference leaves, our roots and our proofs are the published ones."""
    leaves = [merkle.leaf_hash(bytes.fromhex(h)) for h in _REF["leaves"]]
    tree = merkle.Tree(leaves)
    for name, case in _REF["files"].items():
        if case["wantErr"]:
            continue
        if name.startswith("inclusion"):
            size = case["treeSize"]
            assert merkle.root_of(leaves[:size]) == _b64(case["root"])
            assert leaves[case["leafIdx"]] == _b64(case["leafHash"])
            assert tree.inclusion_proof(case["leafIdx"], size) == [_b64(p) for p in case["proof"]], name
        else:
            assert merkle.root_of(leaves[: case["size1"]]) == _b64(case["root1"])
            assert tree.consistency_proof(case["size1"], case["size2"]) == [_b64(p) for p in case["proof"]], (
                name
            )


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 33])
def test_every_inclusion_and_consistency_proof_of_small_trees_verifies(n):
    leaves = [merkle.leaf_hash(bytes([i])) for i in range(n)]
    tree = merkle.Tree(leaves)
    frontier = merkle.Frontier()
    for leaf in leaves:
        frontier.append(leaf)
    assert frontier.root() == tree.root() == merkle.root_of(leaves)
    for size in range(1, n + 1):
        for i in range(size):
            merkle.verify_inclusion(
                index=i,
                size=size,
                leaf=leaves[i],
                path=tree.inclusion_proof(i, size),
                root=merkle.root_of(leaves[:size]),
            )
        merkle.verify_consistency(
            old=size, new=n, old_root=merkle.root_of(leaves[:size]), new_root=tree.root(),
            proof=tree.consistency_proof(size, n),
        )  # fmt: skip
    if n > 1:
        with pytest.raises(merkle.ProofError):
            merkle.verify_inclusion(
                index=0, size=n, leaf=leaves[1], path=tree.inclusion_proof(0), root=tree.root()
            )


# --- test vectors -----------------------------------------------------------------------------------


def test_committed_vectors_are_what_the_format_produces():
    for name, content in vectors.build().items():
        assert (VECTORS / name).read_text(encoding="utf-8") == content, (
            f"{name} differs: rerun python -m audit.vectors"
        )


def _verdict(file, *, pinned: bool) -> tuple[bool, object]:
    """Python's offline verifier, every signature checked, as (ok, first bad)."""
    data = json.loads((VECTORS / file).read_text(encoding="utf-8"))
    result = verify_export(
        data, pinned=frozenset([MANIFEST["public_key"]]) if pinned else frozenset(), signatures="all"
    )
    if result.ok:
        return True, None
    if result.reason.startswith("bad key list"):
        return False, "keys"
    if result.bad_index is None or "root of witnessed checkpoint" in result.reason:
        return False, "checkpoint"
    return False, result.bad_index


def _expected(case: dict, *, pinned: bool) -> tuple[bool, object]:
    if case["verdict"] == "ok" or (case["verdict"] == "fail-pinned" and not pinned):
        return True, None
    return False, case["first_bad"]


@pytest.mark.parametrize("pinned", [False, True])
def test_python_offline_verifier_gives_every_expected_verdict(pinned):
    for case in MANIFEST["cases"]:
        assert _verdict(case["file"], pinned=pinned) == _expected(case, pinned=pinned), case["file"]


def _node(*args: str) -> list[dict]:
    done = subprocess.run([NODE, str(VERIFIER), *args], capture_output=True, text=True, timeout=120)
    assert done.stderr == "", done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
@pytest.mark.parametrize("pinned", [False, True])
def test_independent_javascript_verifier_gives_every_expected_verdict(pinned):
    files = [str(VECTORS / c["file"]) for c in MANIFEST["cases"]]
    key = ["--public-key", MANIFEST["public_key"]] if pinned else []
    got = {r["file"]: (r["ok"], r["first_bad"]) for r in _node(*key, *files)}
    for case in MANIFEST["cases"]:
        assert got[str(VECTORS / case["file"])] == _expected(case, pinned=pinned), (case, got)


def test_manifest_hashes_follow_from_the_documented_leaf_bytes():
    import hashlib

    for event in MANIFEST["events"]:
        leaf = event["leaf_jcs"].encode("utf-8")
        assert hashlib.sha256(b"\x00" + leaf).hexdigest() == event["leaf_hash"]
        assert rfc8785.dumps(json.loads(leaf)) == leaf  # the documented bytes are RFC 8785 themselves
    leaves = [bytes.fromhex(e["leaf_hash"]) for e in MANIFEST["events"]]
    assert merkle.root_of(leaves).hex() == MANIFEST["roots"]["4"] == MANIFEST["checkpoint"]["root"]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
@pytest.mark.django_db
def test_events_written_through_postgresql_verify_in_javascript(admin_client, tmp_path):
    """The issue's failure: genuine events with awkward numbers and text, stored in jsonb and read
    back, then exported (complete and filtered), verify in the JavaScript verifier."""
    from audit.services import audit_record
    from audit.signing import signing_key

    awkward = {
        "score": 2.0,
        "ratio": 0.1,
        "huge": 1e20,
        "tiny": 1e-7,
        "list": [1, 2.5, -0.0],
        "😀": "é\u0001\n",
    }
    for i in range(3):
        audit_record(
            actor="alice", action="thing.change", object_type="tests.thing", object_id=i, after=awkward
        )
    body = b"".join(admin_client.get(reverse("audit:export_json")).streaming_content)
    (tmp_path / "all.json").write_bytes(body)
    body = b"".join(admin_client.get(reverse("audit:export_json"), {"object_id": "1"}).streaming_content)
    (tmp_path / "one.json").write_bytes(body)
    results = _node(
        "--public-key", signing_key().public_hex, str(tmp_path / "all.json"), str(tmp_path / "one.json")
    )
    assert [r["ok"] for r in results] == [True, True], results
    assert json.loads((tmp_path / "one.json").read_text())["events"][0]["inclusion_proof"]
