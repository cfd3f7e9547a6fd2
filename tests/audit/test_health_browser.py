"""After a silent price change, the periodic check (a real Celery worker) turns the Audit page red.

Attacker: a PostgreSQL superuser who changes the price in force with ``session_replication_role =
replica`` (no capture trigger, no event). Nobody presses "Verify": the ``audit.checks`` task that
beat runs finds it, and an auditor opening the page sees the red badge and the object and fields.
"""

from __future__ import annotations

import os
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection

from audit.checks import check_results
from audit.models import AuditCheck
from audit.tasks import audit_checks_task
from billing.services.prices import price_set
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _run_checks_in_the_worker() -> None:
    """Enqueue the beat task and wait until the worker stored a drift result newer than the last."""
    last = AuditCheck.objects.filter(name="drift").values_list("checked_at", flat=True).first()
    audit_checks_task.delay()
    deadline = time.monotonic() + 90
    while AuditCheck.objects.filter(name="drift").values_list("checked_at", flat=True).first() in (
        None,
        last,
    ):
        assert time.monotonic() < deadline, "the worker stored no drift check within 90 s"
        time.sleep(0.2)


def test_silent_price_change_turns_the_audit_badge_red_with_the_finding(
    celery_worker_process, page, live_server, admin_user, auditor_user
):
    price = price_set(
        public_model="llama-3-8b",
        input_per_million=Decimal("0.200"),
        output_per_million=Decimal("0.600"),
        actor=admin_user,
        note="launch price",
    )
    _run_checks_in_the_worker()
    login(page, live_server.url, "auditor")
    page.goto(f"{live_server.url}/audit/")
    badge = page.locator("#audit-health")
    drift = badge.locator("[data-check=drift]")
    assert drift.get_attribute("data-state") == "ok"

    with connection.cursor() as cursor:  # autocommit: this commits, as a psql session would
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("UPDATE billing_price SET input_per_million = 0.001 WHERE id = %s", [price.pk])
        cursor.execute("SET session_replication_role = DEFAULT")
    _run_checks_in_the_worker()

    page.goto(f"{live_server.url}/audit/")
    assert badge.get_attribute("data-state") == "failed"
    assert drift.get_attribute("data-state") == "failed"
    assert badge.locator(".badge.text-bg-danger").first.is_visible()
    text = drift.inner_text()
    assert f"billing.price #{price.pk} changed without an event" in text
    assert "input_per_million: 0.2 in the trail, 0.001 in the row" in text
    assert "last ran" in text
    assert check_results().state == "failed"
    shots = os.environ.get("GOVERNOR_SCREENSHOT_DIR")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(shots) / "audit-drift-detected.png"), full_page=True)
