"""Attacks on the trail by the PostgreSQL superuser (the tests' connection), each ending in a named
finding from ``audit_verify``, an alarm, and a red badge, however many ordinary writes follow.

The application role's variants (it cannot even perform most of these) are tested with the roles.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from audit.checkpoints import audit_checkpoint, audit_key_rotate
from audit.format import leaf_hash
from audit.models import AuditCheck, AuditEvent
from audit.selectors import audit_health, event_record
from audit.services import audit_record, audit_seal, audit_verify_record
from tests.audit.conftest import record_events, tamper

pytestmark = pytest.mark.django_db


def _witnessed(n: int = 5) -> dict:
    """``n`` genuine events, sealed and witnessed in a checkpoint."""
    record_events(n)
    audit_seal()
    checkpoint = audit_checkpoint()
    assert checkpoint is not None and checkpoint["size"] == n
    return checkpoint


def _verify_fails() -> str:
    with pytest.raises(CommandError) as excinfo:
        call_command("audit_verify", stdout=io.StringIO(), stderr=io.StringIO())
    assert excinfo.value.returncode == 1
    return str(excinfo.value)


def _ordinary_writes(n: int = 3) -> None:
    """What follows an attack in real life: admins keep working (each write seals after commit)."""
    record_events(n, action="later.write")
    audit_seal()
    audit_checkpoint()


def _check(name: str) -> AuditCheck:
    return AuditCheck.objects.get(name=name)


def _forge_alice(sql_extra: str = "", params: tuple = ()) -> int:
    """The issue's attack: a plain INSERT of an event credited to alice."""
    tamper(
        "INSERT INTO audit_auditevent (at, actor, actor_id, role, action, object_type, object_id, object_repr,"
        " before, after, reason, evidence, request_id, client_address" + sql_extra + ")"
        " VALUES (now(), 'alice', 7, 'platform_admin', 'model_version.gate_override', 'catalog.modelversion',"
        " '3', '', '{}', '{}', 'any reason', '{}', '', ''" + (", %s" * len(params)) + ")",
        params,
    )
    return AuditEvent.objects.get(actor="alice").seq


def test_forged_insert_is_never_sealed_and_verify_names_it():
    _witnessed()
    seq = _forge_alice()
    audit_seal()
    forged = AuditEvent.objects.get(seq=seq)
    assert forged.hash is None and forged.chain_index is None  # refused, stays out of the chain
    seal = _check("seal")
    assert not seal.ok and f"seq {seq}" in seal.summary and "no signature" in seal.summary
    _ordinary_writes()
    assert AuditEvent.objects.get(seq=seq).hash is None  # still refused after later writes
    message = _verify_fails()
    assert f"unsealed event seq {seq} (alice model_version.gate_override)" in message
    assert not audit_health().ok


def test_forged_insert_with_a_genuine_signature_copied_from_another_event_is_refused():
    _witnessed()
    genuine = AuditEvent.objects.get(chain_index=0)
    seq = _forge_alice(
        ", nonce, key_id, signature", (secrets.token_hex(16), genuine.key_id, genuine.signature)
    )
    audit_seal()
    assert AuditEvent.objects.get(seq=seq).hash is None
    assert "signature does not verify" in _check("seal").summary
    assert f"unsealed event seq {seq}" in _verify_fails()


def test_replayed_genuine_row_is_refused_by_the_database():
    """A byte-for-byte copy of a signed event (its nonce included) cannot be inserted again."""
    from django.db import IntegrityError, transaction

    _witnessed()
    with pytest.raises(IntegrityError), transaction.atomic():
        tamper(
            "INSERT INTO audit_auditevent (at, actor, actor_id, role, action, object_type, object_id, object_repr,"
            " tenant_id, before, after, reason, evidence, request_id, client_address, nonce, key_id, signature)"
            " SELECT at, actor, actor_id, role, action, object_type, object_id, object_repr, tenant_id, before,"
            " after, reason, evidence, request_id, client_address, nonce, key_id, signature"
            " FROM audit_auditevent WHERE chain_index = 1"
        )


def test_forged_event_appended_already_sealed_is_not_witnessed_and_verify_names_it():
    """The forger skips the sealer: inserts a row with chain index, link and a correct leaf hash."""
    _witnessed()
    last = AuditEvent.objects.get(chain_index=4)
    seq = _forge_alice(", chain_index, prev_hash", (5, last.hash))
    forged = AuditEvent.objects.get(seq=seq)
    tamper("UPDATE audit_auditevent SET hash = %s WHERE seq = %s", (leaf_hash(event_record(forged)), seq))
    _ordinary_writes()
    witness = _check("witness")
    assert not witness.ok and "chain index 5" in witness.summary and "no signature" in witness.summary
    message = _verify_fails()
    assert re.search(r"first bad event at chain index 5\b", message) and "no signature" in message


def test_rewrite_with_recomputed_hashes_fails_against_the_checkpoint_however_many_writes_follow():
    _witnessed()
    victim = AuditEvent.objects.get(chain_index=1)
    tamper("UPDATE audit_auditevent SET reason = 'nothing happened' WHERE seq = %s", (victim.seq,))
    prev = AuditEvent.objects.get(chain_index=0).hash
    for event in AuditEvent.objects.filter(chain_index__gte=1).order_by("chain_index"):
        record = {**event_record(event), "prev_hash": prev}
        prev = leaf_hash(record)
        tamper(
            "UPDATE audit_auditevent SET prev_hash = %s, hash = %s WHERE seq = %s",
            (record["prev_hash"], prev, event.seq),
        )
    for _ in range(3):
        _ordinary_writes()
        assert not _check("witness").ok
        assert "witnessed checkpoint" in _verify_fails()
    assert "no longer hash to the root of checkpoint" in _check("witness").summary


def test_truncated_tail_followed_by_new_writes_never_extends_the_witnessed_head():
    _witnessed()
    tamper("DELETE FROM audit_auditevent WHERE chain_index >= 3")
    _ordinary_writes(4)  # before the next checkpoint the chain is already longer than the witnessed one
    summary = _check("witness").summary
    assert not _check("witness").ok and "chain index 5" in summary and "does not link" in summary, summary
    assert "witnessed checkpoint" in _verify_fails()
    for _ in range(2):  # however many writes follow
        _ordinary_writes(3)
        assert not _check("witness").ok
        assert "witnessed checkpoint" in _verify_fails()


def test_truncated_tail_is_named_before_new_writes_catch_up():
    _witnessed()
    tamper("DELETE FROM audit_auditevent WHERE chain_index >= 3")
    _ordinary_writes(1)
    assert not _check("witness").ok and "tail truncated" in _check("witness").summary
    assert "tail truncated" in _verify_fails()


def test_reordering_is_named():
    _witnessed()
    a, b = AuditEvent.objects.get(chain_index=1), AuditEvent.objects.get(chain_index=2)
    tamper("UPDATE audit_auditevent SET chain_index = -1 WHERE seq = %s", (a.seq,))
    tamper("UPDATE audit_auditevent SET chain_index = 1 WHERE seq = %s", (b.seq,))
    tamper("UPDATE audit_auditevent SET chain_index = 2 WHERE seq = %s", (a.seq,))
    _ordinary_writes()
    assert re.search(r"first bad event at chain index 1\b", _verify_fails())


def test_replaced_signing_key_is_refused_by_the_sealer_and_named(settings):
    _witnessed()
    from pathlib import Path

    Path(settings.AUDIT_SIGNING_KEY_FILE).write_text(secrets.token_hex(32) + "\n")
    os.chmod(settings.AUDIT_SIGNING_KEY_FILE, 0o600)
    audit_record(actor="mallory", action="price.publish", object_type="billing.price", object_id=1)
    audit_seal()
    seal = _check("seal")
    assert not seal.ok and "which the witness never introduced" in seal.summary
    assert audit_checkpoint() is None
    assert "replaced without a recorded rotation" in _check("witness").summary
    assert "which the witness never introduced" in _verify_fails()


def test_rotation_is_recorded_and_keeps_the_trail_verifiable(admin_user):
    from audit.signing import signing_key

    _witnessed()
    old = signing_key().key_id
    entry = audit_key_rotate(actor=admin_user, reason="yearly rotation")
    assert signing_key().key_id == entry["introduces"] != old and entry["key_id"] == old
    rotation = AuditEvent.objects.get(action="audit_key.rotate")
    assert rotation.key_id == old and rotation.after["key_id"] == signing_key().key_id
    _ordinary_writes()
    assert AuditEvent.objects.filter(key_id=signing_key().key_id).exists()
    assert audit_verify_record().ok, _check("chain").summary
    assert audit_health().ok


def _witness_lines(settings) -> list[bytes]:
    with open(settings.AUDIT_WITNESS_PATH, "rb") as fh:
        return fh.read().splitlines(keepends=True)


def test_edited_checkpoint_file_is_named(settings):
    _witnessed()
    _ordinary_writes()
    lines = _witness_lines(settings)
    entry = json.loads(lines[1])
    entry["root"] = "0" * 64
    lines[1] = json.dumps(entry).encode() + b"\n"
    with open(settings.AUDIT_WITNESS_PATH, "wb") as fh:
        fh.writelines(lines)
    message = _verify_fails()
    assert "witness entry 1: signature does not verify" in message, message


def test_truncated_checkpoint_file_is_named_and_not_appended_to(settings):
    _witnessed()
    _ordinary_writes()
    lines = _witness_lines(settings)
    assert len(lines) == 3
    with open(settings.AUDIT_WITNESS_PATH, "wb") as fh:
        fh.writelines(lines[:2])
    from audit import witness_state

    witness_state._states.clear()  # a fresh process (a restart) reads the truncated file
    _ordinary_writes()
    assert "witness truncated" in _check("witness").summary
    assert "holds 2 entries but the database recorded" in _verify_fails()


def test_broken_chain_turns_the_badge_red_without_pressing_verify(admin_client):
    from audit.tasks import audit_checks_task, audit_verify_task

    _witnessed()
    assert audit_verify_task() is True
    audit_checks_task()  # the drift check: the badge is green only when chain and drift both passed
    body = admin_client.get(reverse("audit:event_list")).content.decode()
    assert 'id="audit-health" data-state="ok"' in body
    tamper("UPDATE audit_auditevent SET reason = 'edited' WHERE chain_index = 2")
    assert audit_verify_task() is False  # the periodic task, not a button
    body = admin_client.get(reverse("audit:event_list")).content.decode()
    assert (
        'id="audit-health" data-state="failed"' in body and 'data-check="chain" data-state="failed"' in body
    )
    assert "first bad event at chain index 2" in body


def test_unedited_export_after_a_deleted_tail_fails_offline(admin_client, tmp_path):
    """The issue's case: delete the last three events as superuser, then take an ordinary export."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    _witnessed(6)
    tamper("DELETE FROM audit_auditevent WHERE chain_index >= 3")
    body = b"".join(admin_client.get(reverse("audit:export_json")).streaming_content)
    path = tmp_path / "export.json"
    path.write_bytes(body)
    done = subprocess.run(
        [sys.executable, "-m", "audit.verify", str(path)], cwd=ROOT, capture_output=True, text=True, env={}
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "first bad event at chain index 3" in done.stdout and "tail truncated" in done.stdout


def test_offline_verifier_checks_an_export_against_a_copy_of_the_witness(admin_client, settings, tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    _witnessed(3)
    _ordinary_writes(2)  # a second checkpoint
    path = tmp_path / "export.json"
    path.write_bytes(b"".join(admin_client.get(reverse("audit:export_json")).streaming_content))
    lines = _witness_lines(settings)
    assert len(lines) >= 3

    def verify(witness_lines: list[bytes]) -> subprocess.CompletedProcess:
        copy = tmp_path / "witness-copy.jsonl"
        copy.write_bytes(b"".join(witness_lines))
        return subprocess.run(
            [sys.executable, "-m", "audit.verify", str(path), "--witness", str(copy)],
            cwd=ROOT, capture_output=True, text=True, env={},
        )  # fmt: skip

    ok = verify(lines)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    older = verify(lines[:2])  # a witness that never saw the export's checkpoint
    assert older.returncode == 1 and "is not in the witness" in older.stdout
    edited = [*lines]
    entry = json.loads(edited[1])
    entry["size"] = 1
    edited[1] = json.dumps(entry).encode() + b"\n"
    bad = verify(edited)
    assert bad.returncode == 1 and "witness: witness entry 1" in bad.stdout, bad.stdout


def test_a_witness_edited_before_a_restart_pauses_sealing_with_an_alarm_not_an_error(admin_client, settings):
    from audit import witness_state

    _witnessed()
    lines = _witness_lines(settings)
    entry = json.loads(lines[0])
    entry["public_key"] = "0" * 64
    lines[0] = json.dumps(entry).encode() + b"\n"
    with open(settings.AUDIT_WITNESS_PATH, "wb") as fh:
        fh.writelines(lines)
    witness_state._states.clear()  # a fresh process
    record_events(1)
    audit_seal()
    assert AuditEvent.objects.filter(hash__isnull=True).count() == 1  # waits, visible, unsealed
    assert "sealing paused" in _check("witness").summary
    response = admin_client.get(reverse("audit:verify"))
    assert response.status_code == 200 and "witness entry 0" in response.content.decode()
    assert admin_client.get(reverse("audit:export_json")).status_code == 200
