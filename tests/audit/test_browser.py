"""The audit page as an auditor uses it, in a real browser: filter, expand, verify, export."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.db import transaction

from audit.services import audit_record
from audit.verify import verify_export
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def trail(db):
    for actor, action, reason in [
        ("alice", "price.publish", "new quarter prices"),
        ("bob", "key.revoke", "key leaked in a ticket"),
        ("alice", "model_version.transition", "gates passed"),
    ]:
        with transaction.atomic():
            audit_record(
                actor=actor,
                action=action,
                object_type="tests.thing",
                object_id=1,
                before={"state": "old"},
                after={"state": "new"},
                reason=reason,
            )


def test_auditor_filters_expands_verifies_and_exports(page, live_server, auditor_user, trail, tmp_path):
    login(page, live_server.url, "auditor")
    page.click("nav >> text=Audit")
    page.wait_for_url(f"{live_server.url}/audit/")
    assert page.locator("tbody tr").count() == 3
    page.fill("input[name=actor]", "alice")
    page.click("button:has-text('Filter')")
    page.wait_for_url("**actor=alice**")
    rows = page.locator("tbody tr")
    assert rows.count() == 2
    assert "model_version.transition" in rows.first.inner_text()  # newest first
    rows.first.locator("summary").click()
    details = rows.first.locator("details")
    assert details.locator("text=gates passed").is_visible()
    assert details.locator(".audit-hash").first.is_visible()
    page.click("text=Verify the whole chain")
    page.locator("#audit-verify .alert-success").wait_for()
    assert "Chain verifies: 3 events" in page.locator("#audit-verify").inner_text()
    with page.expect_download() as download_info:
        page.click("text=Export JSON")
    path = tmp_path / "export.json"
    download_info.value.save_as(path)
    data = json.loads(path.read_text())
    assert data["filters"] == {"actor": "alice"} and len(data["events"]) == 2
    assert verify_export(data).ok
    shots = os.environ.get("GOVERNOR_SCREENSHOT_DIR")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(shots) / "audit-trail.png"), full_page=True)
