"""An incident in a real browser, from breach to recovery: TTFT goes bad on a route with an SLO,
the evaluator fires, the spine's reactions page the on-call and open a diagnosed incident; the
admin reads the diagnosis, the route's live SLO panel and the on-call page, then traffic recovers
and the incident resolves; its postmortem downloads as Markdown."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from deployments.models import ModelRoute
from events.services import events_sweep
from operations.models import Incident
from operations.services import slo_create, slo_evaluate
from tests.operations.test_slos import _req
from tests.support.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_incident_from_breach_to_recovery(page, live_server, admin_user, tenant, tmp_path):
    route = ModelRoute.objects.create(public_name="sim-llama")
    slo = slo_create(route=route, kind="ttft", threshold_ms=500, target="0.99", window_scale=0.01, min_requests=5,
                     actor=admin_user)  # fmt: skip
    now = timezone.now()
    for s in range(240):  # a healthy baseline
        _req(tenant, at=now - dt.timedelta(seconds=250 - s), ttft=120)
    for s in range(10):  # the spike
        _req(tenant, at=now - dt.timedelta(seconds=10 - s), ttft=2400)
    assert slo_evaluate(slo, now=now) == "firing"
    events_sweep()  # the reactions, as the beat's sweep runs them (the after-commit dispatch did too)
    incident = Incident.objects.get()
    assert incident.status == "open"

    login(page, live_server.url, "admin")
    page.goto(live_server.url + reverse("deployments:route_detail", args=[route.pk]))
    page.wait_for_selector("#route-slos .slo-state")
    assert "Burning budget" in page.locator("#route-slos").inner_text()
    page.goto(live_server.url + reverse("notify:oncall"))
    assert "sim-llama: SLO burning" in page.locator("#open-pages").inner_text()
    page.goto(live_server.url + reverse("operations:incident_list"))
    page.click(f"#incidents a[href='{reverse('operations:incident_detail', args=[incident.pk])}']")
    assert page.locator("#diagnosis-cause").inner_text().startswith("Most likely:")
    assert page.locator("#diagnosis-branches tbody tr").count() == len(incident.diagnosis["branches"]) == 9
    assert page.locator("#incident-status").inner_text() == "Open"
    page.screenshot(path=str(tmp_path / "incident-open.png"), full_page=True)

    # Recovery: good traffic for longer than the slowest short window (216 s at this scale).
    later = now + dt.timedelta(seconds=230)
    for s in range(230):
        _req(tenant, at=now + dt.timedelta(seconds=s), ttft=110)
    slo_evaluate(slo, now=now + dt.timedelta(seconds=6))
    slo_evaluate(slo, now=now + dt.timedelta(seconds=20))
    assert slo_evaluate(slo, now=later) == "ok"
    events_sweep()
    page.reload()
    assert page.locator("#incident-status").inner_text() == "Resolved"
    timeline = page.locator("#timeline").inner_text()
    assert "Resolved" in timeline and "SLO recovered" in timeline
    with page.expect_download() as dl:
        page.click("#export-md")
    text = Path(dl.value.path()).read_text(encoding="utf-8")
    assert text.startswith("# Postmortem: sim-llama") and "resolved" in text
