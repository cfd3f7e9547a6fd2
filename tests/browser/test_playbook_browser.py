"""A playbook in a real browser: the admin sets a route's playbook to apply after an approval (a
floor of 0 is refused on the form first), a long-prompt flood breaches the route's TTFT SLO, the
incident page shows the proposed cap, the admin applies it and then reverts it, and the timeline
and the tenant's limits follow."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import TenantLimits, UsageEvent
from deployments.models import ModelRoute
from events.services import events_sweep
from operations.models import Incident, Mitigation
from operations.services import slo_create, slo_evaluate
from tests.operations.test_slos import _req
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_sets_the_playbook_then_approves_and_reverts_its_action(page, live_server, admin_user, tenant,
                                                                          tmp_path):  # fmt: skip
    route = ModelRoute.objects.create(public_name="sim-llama")
    slo = slo_create(route=route, kind="ttft", threshold_ms=500, target="0.99", window_scale=0.01, min_requests=5,
                     actor=admin_user)  # fmt: skip
    login(page, live_server.url, "admin")
    page.goto(live_server.url + reverse("operations:playbook_policy", args=[route.pk]))
    page.select_option("#id_mode", "approve")
    page.fill("#id_min_rpm", "0")
    page.click("#playbook-form button")
    assert "stops the tenant" in page.locator("#playbook-errors").inner_text()
    page.fill("#id_min_rpm", "60")
    page.click("#playbook-form button")
    assert "Playbook of sim-llama saved" in page.content()

    now = timezone.now()
    for s in range(240):  # a healthy baseline of short prompts
        _req(tenant, at=now - dt.timedelta(seconds=250 - s), ttft=120)
    for s in range(10):  # the flood: long prompts, slow first tokens
        e = _req(tenant, at=now - dt.timedelta(seconds=10 - s), ttft=2500)
        UsageEvent.objects.filter(pk=e.pk).update(prompt_tokens=4000)
    assert slo_evaluate(slo, now=now) == "firing"
    events_sweep()
    incident = Incident.objects.get()
    assert incident.diagnosis["cause"] == "long_prompts"

    page.goto(live_server.url + reverse("operations:incident_detail", args=[incident.pk]))
    row = page.locator("#mitigations tbody tr").first
    assert row.get_attribute("data-state") == "proposed" and "Cap" in row.inner_text()
    page.click("#mitigations button[name=apply]")
    assert page.locator("#mitigations tbody tr").first.get_attribute("data-state") == "applied"
    assert TenantLimits.objects.get(tenant=tenant).max_input_tokens == 1024
    assert "Applied by admin" in page.locator("#timeline").inner_text()
    page.screenshot(path=str(tmp_path / "incident-actions.png"), full_page=True)
    if os.environ.get("GOVERNOR_SCREENSHOTS"):
        page.screenshot(
            path=str(Path(os.environ["GOVERNOR_SCREENSHOTS"]) / "incident-actions.png"), full_page=True
        )

    page.click("#mitigations button:has-text('Revert now')")
    assert page.locator("#mitigations tbody tr").first.get_attribute("data-state") == "reverted"
    assert TenantLimits.objects.get(tenant=tenant).max_input_tokens == 0
    assert Mitigation.objects.get().ended_by == "admin"
