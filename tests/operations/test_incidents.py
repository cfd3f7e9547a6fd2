"""Incidents from breaches: opened once per route, diagnosed with the evidence of the window,
joined by later breaches, resolved by recovery, exported as a postmortem, and shown by role."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.urls import reverse
from django.utils import timezone

from events.models import Event
from operations.models import Incident, SloBreach
from operations.reactions import incident_open, incident_recover
from operations.services import slo_create, slo_evaluate
from tests.operations.test_slos import _req

pytestmark = pytest.mark.django_db


@pytest.fixture
def route(db):
    from deployments.models import ModelRoute

    return ModelRoute.objects.create(public_name="sim-llama")


def _spike(tenant, route, admin_user, now):
    slo = slo_create(route=route, kind="ttft", threshold_ms=500, target="0.99", window_scale=0.01, min_requests=5,
                     actor=admin_user)  # fmt: skip
    # Baseline: short prompts, fast first tokens, for six windows before the spike.
    for s in range(240):
        _req(tenant, at=now - dt.timedelta(seconds=250 - s), ttft=120)
    # The spike: long prompts, slow first tokens.
    from billing.models import UsageEvent

    for s in range(10):
        e = _req(tenant, at=now - dt.timedelta(seconds=10 - s), ttft=2500)
        UsageEvent.objects.filter(pk=e.pk).update(prompt_tokens=4000)
    return slo


def _event_for(kind, breach):
    return Event.objects.create(
        kind=kind, subject=f"operations.slobreach:{breach.pk}", payload={"breach": breach.pk}
    )


def test_a_breach_opens_one_diagnosed_incident_and_recovery_resolves_it(route, tenant, admin_user):
    now = timezone.now()
    slo = _spike(tenant, route, admin_user, now)
    assert slo_evaluate(slo, now=now) == "firing"
    breach = SloBreach.objects.get()
    ev = _event_for("operations.slo_breached", breach)
    incident_open(ev)
    incident_open(ev)  # at least once
    incident = Incident.objects.get()
    assert incident.status == "open" and incident.severity == "page"
    assert incident.diagnosis["cause"] == "long_prompts"
    # The route's playbook only suggests (the default): the cap is proposed, not applied.
    assert [e.kind for e in incident.entries.all()] == ["breach", "diagnosis", "action"]
    assert incident.mitigations.get().state == "proposed"
    # Recovery: the breach ends, the incident resolves.
    SloBreach.objects.filter(pk=breach.pk).update(ended_at=now + dt.timedelta(seconds=30))
    done = _event_for("operations.slo_recovered", breach)
    incident_recover(done)
    incident_recover(done)
    incident.refresh_from_db()
    assert incident.status == "resolved" and incident.resolved_at == now + dt.timedelta(seconds=30)
    assert [e.kind for e in incident.entries.all()] == [
        "breach",
        "diagnosis",
        "action",
        "recovery",
        "resolved",
    ]


def test_a_second_breach_joins_the_open_incident(route, tenant, admin_user):
    now = timezone.now()
    slo = _spike(tenant, route, admin_user, now)
    slo_evaluate(slo, now=now)
    first = SloBreach.objects.get()
    incident_open(_event_for("operations.slo_breached", first))
    errors = slo_create(route=route, kind="errors", target="0.99", actor=admin_user)
    second = SloBreach.objects.create(slo=errors, severity="ticket", condition="ticket", started_at=now)
    incident_open(_event_for("operations.slo_breached", second))
    assert Incident.objects.count() == 1
    assert Incident.objects.get().entries.filter(kind="breach").count() == 2


def test_the_postmortem_exports_and_the_pages_by_role(
    route, tenant, admin_user, role_clients, tenant_admin_client
):
    now = timezone.now()
    slo = _spike(tenant, route, admin_user, now)
    slo_evaluate(slo, now=now)
    incident_open(_event_for("operations.slo_breached", SloBreach.objects.get()))
    incident = Incident.objects.get()
    url = reverse("operations:incident_detail", args=[incident.pk])
    page = role_clients["auditor"].get(url).content.decode()
    assert "long_prompts" in page and 'id="timeline"' in page
    md = role_clients["auditor"].get(url, {"format": "md"})
    assert md["Content-Type"].startswith("text/markdown")
    text = md.content.decode()
    assert text.startswith("# Postmortem: sim-llama") and "| long_prompts | likely |" in text
    data = json.loads(role_clients["admin"].get(url, {"format": "json"}).content)
    assert data["route"] == "sim-llama" and data["diagnosis"]["cause"] == "long_prompts"
    assert [e["kind"] for e in data["timeline"]] == ["breach", "diagnosis", "action"]
    assert (
        data["mitigations"][0]["kind"] == "cap_input_tokens" and data["mitigations"][0]["state"] == "proposed"
    )
    lst = role_clients["admin"].get(reverse("operations:incident_list"), {"status": "open"})
    assert "sim-llama" in lst.content.decode()
    assert role_clients["admin"].get(reverse("operations:incident_list"), {"status": "resolved"}).content.decode().count(
        "sim-llama: ") == 0  # fmt: skip
    for c in (role_clients["member"], tenant_admin_client):
        assert c.get(url).status_code == 403
        assert c.get(reverse("operations:incident_list")).status_code == 403
