"""A rehearsal in a real browser: an admin starts one from the console (a nonsense length is refused
on the form first), watches its progress while a real Celery worker runs it, reads what happened,
and opens the incident it produced, labelled a rehearsal, with the playbook's action applied and
undone on its timeline."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from operations.models import RehearsalRun
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_admin_rehearses_a_lost_replica_from_the_console(page, live_server, admin_user, celery_worker_process,
                                                            tmp_path):  # fmt: skip
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    login(page, live_server.url, "admin")
    page.goto(live_server.url + "/operations/incidents/")
    page.click("text=Rehearse an incident")
    page.select_option("#r-scenario", "lost_replica")
    page.select_option("#r-mode", "auto")
    page.evaluate("document.querySelector('#r-length').add(new Option('forever', 'forever'))")
    page.select_option("#r-length", "forever")
    page.click("#rehearse")
    assert "Choose one of" in page.locator("#rehearsal-form").inner_text()
    assert not RehearsalRun.objects.exists()

    page.select_option("#r-length", "quick")
    page.click("#rehearse")
    page.wait_for_url(re.compile(r"/operations/rehearsals/\d+/$"))
    run = RehearsalRun.objects.get()
    # A worker runs it while the page polls its progress, then reloads itself with the result.
    page.wait_for_selector("#rehearsal-result", timeout=600_000)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    assert "errors_one_deployment" in page.locator("#r-cause").inner_text()
    assert "the injected cause" in page.locator("#r-cause").inner_text()
    assert re.search(r"\d+ s after the fault started", page.locator("#r-detect").inner_text())

    page.click("#r-incident")
    assert "rehearsal" in page.locator("h1").inner_text()
    assert "errors_one_deployment" in page.locator("#diagnosis-cause").inner_text()
    row = page.locator("#mitigations tbody tr").first
    assert row.get_attribute("data-state") == "reverted" and "weight to 0" in row.inner_text()
    assert "Applied by playbook" in page.locator("#timeline").inner_text()
    page.screenshot(path=str(tmp_path / "rehearsal-incident.png"), full_page=True)
    if os.environ.get("GOVERNOR_SCREENSHOTS"):
        page.screenshot(
            path=str(Path(os.environ["GOVERNOR_SCREENSHOTS"]) / "rehearsal-incident.png"), full_page=True
        )
    assert not errors, errors
