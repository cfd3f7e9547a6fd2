"""Streamed exports carry hashes and the head; ``python -m audit.verify`` checks them with no Django."""

from __future__ import annotations

import copy
import csv
import io
import json
import subprocess
import sys

import pytest
from django.http import StreamingHttpResponse
from django.urls import reverse

from audit.format import leaf_hash as event_hash
from audit.services import audit_seal
from audit.verify import verify_export
from tests.audit.conftest import record_events
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db


def _body(response) -> str:
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response.streaming_content).decode()


@pytest.fixture
def export(admin_client) -> dict:
    record_events(5)
    response = admin_client.get(reverse("audit:export_json"))
    assert response.status_code == 200
    return json.loads(_body(response))


def _run_verify(tmp_path, data, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "audit.verify", str(path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={},
    )


def test_json_export_is_complete_sealed_and_verifies(export):
    from audit.signing import signing_key

    assert export["format"] == "governor-audit-export/2" and export["complete"] is True
    assert [e["chain_index"] for e in export["events"]] == [0, 1, 2, 3, 4]
    assert export["head"] == {"index": 4, "hash": export["events"][-1]["hash"]}
    assert export["checkpoint"]["size"] == 5 and export["checkpoint"]["head"] == export["head"]["hash"]
    assert export["keys"][0]["public_key"] == signing_key().public_hex
    result = verify_export(export)
    assert result.ok and result.head.index == 4


def test_offline_verify_prints_ok_and_head_without_importing_django(tmp_path, export):
    done = _run_verify(tmp_path, export)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"OK 5 events, head index=4 hash={export['head']['hash']}")
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, runpy; sys.argv = ['verify', sys.argv[1]];\n"
            "try:\n runpy.run_module('audit.verify', run_name='__main__')\n"
            "except SystemExit: pass\n"
            "print('DJANGO-LOADED' if any(m == 'django' or m.startswith('django.') for m in sys.modules) else 'NO-DJANGO')",
            str(tmp_path / "export.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={},
    )
    assert probe.stdout.strip().endswith("NO-DJANGO"), probe.stdout + probe.stderr


def _tampered(export: dict, how: str) -> dict:
    data = copy.deepcopy(export)
    events = data["events"]
    if how == "edited":
        events[2]["reason"] = "nothing to see"
    elif how == "deleted":
        del events[2]
    elif how == "reordered":
        events[2], events[3] = events[3], events[2]
    elif how == "inserted":
        forged = copy.deepcopy(events[1])
        forged["actor"] = "mallory"
        forged["chain_index"] = 2
        forged["prev_hash"] = events[1]["hash"]
        forged["hash"] = event_hash(forged)
        events.insert(2, forged)
    elif how == "truncated":
        del events[3:]
    return data


@pytest.mark.parametrize(
    ("how", "bad_index"), [("edited", 2), ("deleted", 2), ("reordered", 2), ("inserted", 3), ("truncated", 3)]
)
def test_tampered_exports_are_rejected_at_the_first_bad_event(tmp_path, export, how, bad_index):
    data = _tampered(export, how)
    result = verify_export(data)
    assert not result.ok and result.bad_index == bad_index, result.describe()
    done = _run_verify(tmp_path, data)
    assert done.returncode == 1
    assert f"first bad event at chain index {bad_index}" in done.stdout


def test_rewritten_export_with_recomputed_hashes_fails_against_the_signed_checkpoint(tmp_path, export):
    data = copy.deepcopy(export)
    prev = data["events"][0]["prev_hash"]
    data["events"][0]["reason"] = "rewritten"
    for event in data["events"]:  # the forger recomputes every hash and the head
        event["prev_hash"] = prev
        event["hash"] = prev = event_hash(event)
    data["head"]["hash"] = prev
    done = _run_verify(tmp_path, data)
    assert done.returncode == 1 and "witnessed checkpoint" in done.stdout, done.stdout


def test_not_an_export_exits_2(tmp_path):
    done = _run_verify(tmp_path, {"hello": "world"})
    assert done.returncode == 2 and "not an audit export" in done.stderr


def test_filtered_export_verifies_each_event_but_says_completeness_is_unproven(admin_client, tmp_path):
    record_events(3, action="a.one")
    record_events(3, action="b.two")
    response = admin_client.get(reverse("audit:export_json"), {"action": "b.two"})
    data = json.loads(_body(response))
    assert data["complete"] is False and data["filters"] == {"action": "b.two"}
    assert [e["action"] for e in data["events"]] == ["b.two"] * 3
    done = _run_verify(tmp_path, data)
    assert done.returncode == 0 and "not that no event is missing" in done.stdout
    data["events"][1]["after"] = {"n": -1}
    assert _run_verify(tmp_path, data).returncode == 1


def test_csv_export_has_the_head_and_every_event_with_its_hashes(admin_client):
    record_events(4)
    response = admin_client.get(reverse("audit:export_csv"))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    text = _body(response)
    head = audit_seal()
    assert text.startswith(f"# governor-audit-export/2 head index={head.index} hash={head.hash}\n")
    rows = list(csv.DictReader(line for line in io.StringIO(text) if not line.startswith("#")))
    assert [int(r["chain_index"]) for r in rows] == [0, 1, 2, 3]
    assert all(len(r["hash"]) == 64 and len(r["prev_hash"]) == 64 for r in rows)
    assert json.loads(rows[0]["after"]) == {"n": 1, "note": "café ✓"}
    assert response["X-Audit-Head"] == f"{head.index}:{head.hash}"


def test_export_with_bad_filters_is_a_400_naming_the_problem(admin_client):
    response = admin_client.get(reverse("audit:export_json"), {"since": "2026-12-31", "until": "2026-01-01"})
    assert response.status_code == 400 and b"'From' must be on or before 'To'" in response.content


def test_export_streams_with_constant_queries(admin_client, django_assert_max_num_queries):
    record_events(120)
    audit_seal()
    with django_assert_max_num_queries(30):  # sealing, the checkpoint and its witness checks: fixed
        body = _body(admin_client.get(reverse("audit:export_json")))
    assert len(json.loads(body)["events"]) == 120


@pytest.fixture
def raw_export(admin_client, tmp_path):
    """The server's bytes, one event per line: the verifier streams these instead of loading them."""
    record_events(5)
    path = tmp_path / "raw.json"
    path.write_text(_body(admin_client.get(reverse("audit:export_json"))), encoding="utf-8")
    return path


def _run_file(path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "audit.verify", str(path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={},
    )


def test_server_layout_is_streamed_and_verifies(raw_export):
    lines = raw_export.read_text().splitlines()
    assert lines[0].endswith('"events": [') and lines[-1] == "]}" and len(lines) == 7
    done = _run_file(raw_export)
    assert done.returncode == 0 and done.stdout.startswith("OK 5 events, head index=4"), (
        done.stdout + done.stderr
    )


def test_streamed_file_with_an_edited_line_fails_at_that_event(raw_export):
    lines = raw_export.read_text().splitlines()
    lines[3] = lines[3].replace('"step 2"', '"step two"')
    raw_export.write_text("\n".join(lines) + "\n")
    done = _run_file(raw_export)
    assert done.returncode == 1 and "first bad event at chain index 2" in done.stdout


def test_streamed_file_with_a_deleted_line_fails_at_the_gap(raw_export):
    lines = raw_export.read_text().splitlines()
    del lines[3]
    raw_export.write_text("\n".join(lines) + "\n")
    done = _run_file(raw_export)
    assert done.returncode == 1 and "first bad event at chain index 2" in done.stdout


def test_streamed_file_cut_short_is_not_an_export(raw_export):
    lines = raw_export.read_text().splitlines()
    raw_export.write_text("\n".join(lines[:-1]) + "\n")
    done = _run_file(raw_export)
    assert done.returncode == 2 and "not closed" in done.stderr
