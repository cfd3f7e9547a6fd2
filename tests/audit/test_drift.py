"""Drift: a governed row changed without an event is named with its fields, by audit_verify and the page.

Attackers: a PostgreSQL superuser (``session_replication_role = replica``, or ``ALTER TABLE ...
DISABLE TRIGGER`` as the table's owner) who changes a governed table with the capture trigger off.
The application role's own bypass (claiming a service write and recording nothing) is in
test_least_privilege, which runs as that role.

The capture triggers fire at COMMIT; a test's transaction never commits, so ``_commit_point`` fires
them where a commit would, and clears the transaction-local "a service recorded this" flag as the
next transaction would start without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from audit.checks import check_results, drift_check_run
from audit.drift import drift_findings
from audit.models import AuditCheck
from audit.raw_capture import SERVICE_FLAG
from audit.services import audit_verify_record
from billing.services.prices import price_set
from billing.services.tenancy import membership_set, tenant_create, tenant_delete, tenant_update
from tests.audit.conftest import tamper
from tests.conftest import subprocess_env
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def _commit_point() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute("SELECT set_config(%s, '', true)", [SERVICE_FLAG])


def _sql(sql: str, params: tuple = ()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.fixture
def price(admin_user):
    price = price_set(
        public_model="llama-3-8b",
        input_per_million=Decimal("0.200"),
        output_per_million=Decimal("0.600"),
        actor=admin_user,
        note="launch price",
    )
    _commit_point()
    return price


def _by_object(findings):
    return {(f["object_type"], f["object_id"]): f for f in findings if "object_id" in f}


def test_rows_written_through_the_services_do_not_drift(admin_user, price):
    tenant = tenant_create(name="Initech", slug="initech", actor=admin_user)
    member_user = UserFactory(username="member")
    tenant_update(tenant=tenant, name="Initech Labs", is_active=False, actor=admin_user)
    membership_set(user=member_user, tenant=tenant, role="admin", actor=admin_user)
    # Deleting a tenant through its service records one event; its membership goes with it (CASCADE).
    tenant_delete(instance=tenant, actor=admin_user)
    _commit_point()
    checked, findings = drift_findings()
    assert findings == [], findings
    assert checked >= 1


def test_raw_write_caught_by_the_trigger_is_not_drift(price):
    _sql("UPDATE billing_price SET note = 'edited in psql' WHERE id = %s", (price.pk,))
    _commit_point()  # the capture trigger records raw.update: the trail knows the new value
    assert (f := drift_findings()[1]) == [], f


def test_superuser_update_with_replication_role_replica_is_named_with_its_fields(price):
    tamper("UPDATE billing_price SET input_per_million = 0.001 WHERE id = %s", (price.pk,))
    _commit_point()
    findings = drift_findings()[1]
    assert [f["kind"] for f in findings] == ["changed"]
    finding = findings[0]
    assert (finding["table"], finding["object_type"], finding["object_id"]) == (
        "billing_price",
        "billing.price",
        str(price.pk),
    )
    # Compared through the column's type: the event's "0.200" is the numeric 0.200, not a string.
    assert finding["fields"] == {"input_per_million": {"expected": 0.2, "actual": 0.001}}


def test_superuser_update_with_the_capture_trigger_disabled_is_named(admin_user, price):
    tenant = tenant_create(name="Initech", slug="initech", actor=admin_user)
    _commit_point()
    _sql("ALTER TABLE billing_tenant DISABLE TRIGGER audit_capture_raw")
    _sql("UPDATE billing_tenant SET name = 'Evil Corp' WHERE id = %s", (tenant.pk,))
    _commit_point()
    _sql("ALTER TABLE billing_tenant ENABLE TRIGGER audit_capture_raw")
    finding = _by_object(drift_findings()[1])[("billing.tenant", str(tenant.pk))]
    assert finding["fields"] == {"name": {"expected": "Initech", "actual": "Evil Corp"}}


def test_rows_inserted_or_deleted_with_triggers_off_are_named(admin_user, price):
    tenant = tenant_create(name="Initech", slug="initech", actor=admin_user)
    tamper("DELETE FROM billing_tenant WHERE id = %s", (tenant.pk,))
    tamper(
        "INSERT INTO billing_price (public_model, input_per_million, output_per_million, effective_from,"
        " source, note, created_at, provenance) VALUES ('llama-3-8b', 0.001, 0.001, now(), 'manual', '', now(),"
        " '{}') RETURNING id"
    )
    _commit_point()
    findings = drift_findings()[1]
    kinds = {(f["kind"], f["object_type"]) for f in findings}
    assert kinds == {("missing", "billing.tenant"), ("untracked", "billing.price")}
    untracked = next(f for f in findings if f["kind"] == "untracked")
    assert untracked["actual"]["input_per_million"] == 0.001


def test_audit_verify_names_the_drifted_object_and_fails(price):
    tamper("UPDATE billing_price SET output_per_million = 0.001 WHERE id = %s", (price.pk,))
    _commit_point()
    err = StringIO()
    with pytest.raises(CommandError) as exc:
        call_command("audit_verify", stdout=StringIO(), stderr=err)
    assert exc.value.returncode == 1 and "DRIFT" in str(exc.value)
    assert f"billing.price #{price.pk} changed without an event" in err.getvalue()
    assert "output_per_million: 0.6 in the trail, 0.001 in the row" in err.getvalue()
    stored = AuditCheck.objects.get(name="drift")
    assert (
        stored.ok is False
        and stored.details["findings"][0]["fields"]["output_per_million"]["actual"] == 0.001
    )


def test_audit_verify_passes_when_nothing_drifted(price):
    out = StringIO()
    call_command("audit_verify", stdout=out, stderr=StringIO())
    assert "OK drift" in out.getvalue()


def test_health_is_red_after_a_drift_check_finds_something_and_green_when_both_pass(price):
    audit_verify_record()  # the chain check, as audit.verify stores it
    drift_check_run()
    assert check_results().state == "ok"
    tamper("UPDATE billing_price SET input_per_million = 0.001 WHERE id = %s", (price.pk,))
    drift_check_run()
    health = check_results()
    assert health.state == "failed"
    drift = next(r for r in health.results if r.name == "drift")
    assert not drift.check.ok and "input_per_million" in drift.lines[0]


def test_audit_page_shows_the_red_badge_and_the_finding_without_pressing_verify(auditor_client, price):
    audit_verify_record()  # the chain check, as audit.verify stores it
    drift_check_run()
    page = auditor_client.get("/audit/").content.decode()
    assert 'id="audit-health" data-state="ok"' in page
    tamper("UPDATE billing_price SET input_per_million = 0.001 WHERE id = %s", (price.pk,))
    drift_check_run()  # what the periodic task does
    page = auditor_client.get("/audit/").content.decode()
    assert 'id="audit-health" data-state="failed"' in page
    assert f"billing.price #{price.pk} changed without an event" in page
    assert "last ran" in page


def test_a_check_that_cannot_run_shows_as_an_error_not_as_passing(price, monkeypatch):
    def broken():
        raise RuntimeError("database went away")

    monkeypatch.setattr("audit.checks.drift_findings", broken)
    with pytest.raises(RuntimeError):
        drift_check_run()
    drift = AuditCheck.objects.get(name="drift")
    assert not drift.ok and "could not run: database went away" in drift.summary
    assert check_results().state == "failed"


@pytest.mark.process
def test_drift_benchmark_smoke_names_exactly_the_rows_it_changed(tmp_path):
    """``python -m benchmarks.audit_chain --drift-only`` at a small size (the figure is the 1 M run)."""
    out = tmp_path / "drift.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.audit_chain",
            "--drift-only",
            "--drift-events",
            "3000",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["drift"]["events"] == 3000 and result["drift"]["findings"] == 10
    assert result["drift"]["found_exactly_the_ten_changed_rows"] is True
    assert result["drift_check_s"] > 0 and "load_avg_1m_start" in result["conditions"]
