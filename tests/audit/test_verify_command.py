"""``manage.py audit_verify`` names the first bad event for each kind of tampering."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from audit.format import leaf_hash
from audit.models import AuditEvent
from audit.selectors import event_record
from audit.services import audit_seal
from tests.audit.conftest import record_events, tamper
from tests.conftest import ROOT, subprocess_env

pytestmark = pytest.mark.django_db


@pytest.fixture
def chain():
    record_events(5)
    return audit_seal()


def _verify() -> str:
    out = io.StringIO()
    call_command("audit_verify", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _fails_at(index: int) -> str:
    with pytest.raises(CommandError) as excinfo:
        _verify()
    assert excinfo.value.returncode == 1
    assert re.search(rf"first bad event at chain index {index}\b", str(excinfo.value)), excinfo.value
    return str(excinfo.value)


def test_intact_chain_verifies_and_prints_the_head(chain):
    out = _verify()
    assert f"OK 5 events, head index=4 hash={chain.hash}" in out


def test_verify_seals_pending_events_first(chain):
    record_events(2)
    assert "OK 7 events, head index=6" in _verify()


def test_edited_event(chain):
    tamper("UPDATE audit_auditevent SET reason = 'nothing happened' WHERE chain_index = 2")
    assert "edited" in _fails_at(2)


def test_deleted_event(chain):
    tamper("DELETE FROM audit_auditevent WHERE chain_index = 2")
    assert "missing" in _fails_at(2)


def test_reordered_events(chain):
    tamper("UPDATE audit_auditevent SET chain_index = -1 WHERE chain_index = 1")
    tamper("UPDATE audit_auditevent SET chain_index = 1 WHERE chain_index = 2")
    tamper("UPDATE audit_auditevent SET chain_index = 2 WHERE chain_index = -1")
    _fails_at(1)


def test_inserted_event_with_a_junk_hash(chain):
    tamper("UPDATE audit_auditevent SET chain_index = -chain_index WHERE chain_index >= 2")
    tamper("UPDATE audit_auditevent SET chain_index = 1 - chain_index WHERE chain_index < 0")
    prev = AuditEvent.objects.get(chain_index=1)
    tamper(
        "INSERT INTO audit_auditevent (at, actor, role, action, object_type, object_id, object_repr, before, after,"
        " reason, evidence, request_id, client_address, chain_index, prev_hash, hash)"
        " VALUES (now(), 'mallory', '', 'price.publish', 'billing.price', '1', '', '{}', '{}', '', '{}', '', '',"
        " 2, %s, %s)",
        (prev.hash, "e" * 64),
    )
    assert "edited" in _fails_at(2)


def test_inserted_event_with_a_recomputed_hash_breaks_the_next_link(chain):
    tamper("UPDATE audit_auditevent SET chain_index = -chain_index WHERE chain_index >= 2")
    tamper("UPDATE audit_auditevent SET chain_index = 1 - chain_index WHERE chain_index < 0")
    prev = AuditEvent.objects.get(chain_index=1)
    tamper(
        "INSERT INTO audit_auditevent (at, actor, role, action, object_type, object_id, object_repr, before, after,"
        " reason, evidence, request_id, client_address, chain_index, prev_hash)"
        " VALUES (now(), 'mallory', '', 'price.publish', 'billing.price', '1', '', '{}', '{}', '', '{}', '', '',"
        " 2, %s)",
        (prev.hash,),
    )
    forged = AuditEvent.objects.get(chain_index=2)
    tamper(
        "UPDATE audit_auditevent SET hash = %s WHERE seq = %s", (leaf_hash(event_record(forged)), forged.seq)
    )
    # Format 2: the forged row has no signature, so it is named itself before its broken link.
    assert "no signature" in _fails_at(2)


def test_truncated_tail(chain):
    tamper("DELETE FROM audit_auditevent WHERE chain_index >= 3")
    assert "tail truncated" in _fails_at(3)


def test_truncated_tail_is_caught_by_the_witness_even_when_redis_lost_the_head(chain):
    from audit.head import head_forget

    _verify()  # witnesses a checkpoint of the 5 events
    head_forget()
    tamper("DELETE FROM audit_auditevent WHERE chain_index >= 3")
    assert "tail truncated" in _fails_at(3)


def test_passes_on_the_demo_data():
    with connection.cursor() as cursor:
        # The raw-write triggers fire at commit; this test's transaction never commits.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    call_command("seed_demo", stdout=io.StringIO())
    out = _verify()
    assert AuditEvent.objects.exists()
    assert f"OK {AuditEvent.objects.count()} events" in out


@pytest.mark.process
@pytest.mark.django_db(transaction=True)
def test_command_exits_non_zero_on_a_broken_chain(settings):
    env = subprocess_env(
        AUDIT_HEAD_KEY=settings.AUDIT_HEAD_KEY, AUDIT_WITNESS_PATH=settings.AUDIT_WITNESS_PATH
    )
    record_events(3)
    audit_seal()
    ok = subprocess.run(
        [sys.executable, "manage.py", "audit_verify"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("UPDATE audit_auditevent SET actor = 'someone' WHERE chain_index = 1")
        cursor.execute("SET session_replication_role = DEFAULT")
    bad = subprocess.run(
        [sys.executable, "manage.py", "audit_verify"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert "first bad event at chain index 1" in bad.stderr
