"""The on-call page in a real browser: an admin sets the rota, a signal from the event spine pages
the member on shift, and the page is acknowledged from the console (no inline script involved)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from events.models import Event
from notify.models import Page
from notify.reactions import page_oncall
from tests.factories import UserFactory
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_sets_the_rota_sees_the_page_and_acknowledges_it(page, live_server, admin_user, tmp_path):
    UserFactory(username="ana", email="ana@example.com", is_superuser=True, is_staff=True)
    login(page, live_server.url, "admin")
    page.goto(live_server.url + reverse("notify:oncall"))
    page.fill("#rota-members-input", "ana\nadmin")
    page.fill("#rota-shift", "12")
    page.fill("#rota-escalate", "10")
    page.click("#rota-form button")
    page.wait_for_selector("text=Rota saved.")
    assert page.locator("#on-call-now").inner_text().startswith("On call now: ana")

    # A failed gate: the spine's reaction pages the on-call.
    event = Event.objects.create(
        kind="evaluations.gate_failed",
        subject="evaluations.gatedecision:3",
        payload={"gate_run": 3, "version": 12, "kind": "quality", "verdict": "failed"},
    )
    page_oncall(event)
    page.goto(live_server.url + reverse("notify:oncall"))
    row = page.locator("#open-pages tbody tr", has_text="Model version 12: quality gate failed")
    assert "ana" in row.inner_text()
    page.screenshot(path=str(tmp_path / "oncall.png"), full_page=True)
    row.locator("button", has_text="Acknowledge").click()
    page.wait_for_selector("text=Acknowledged: Model version 12")
    assert page.locator("#open-pages").inner_text().count("Nothing open.") == 1
    assert "Acknowledged by admin" in page.locator("#recent-pages").inner_text()
    assert Page.objects.get().acknowledged_by == admin_user
