"""SLOs over the gateway's metered requests: counts per window, burn-rate alerts that open a breach
and page the on-call through the event spine, recovery that closes it and resolves the page, the
pages by role, and bad input refused with its reason."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from billing.models import UsageEvent
from deployments.models import ModelRoute
from events.models import Event
from notify.models import Notification
from operations.models import Slo, SloBreach
from operations.reactions import breach_page, recovery_resolve
from operations.services import slo_create, slo_evaluate, slo_measure

pytestmark = pytest.mark.django_db
NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)
# Rehearsal-sized windows: the workbook's 1 h / 5 min become 36 s / 3 s.
SCALE = 0.01


def _req(tenant, *, at, model="sim-llama", status="ok", http=200, ttft=100.0, tpot=20.0):
    return UsageEvent.objects.create(
        event_id=uuid.uuid4(), tenant=tenant, public_model=model, prompt_tokens=10, completion_tokens=5,
        cost_nanos=1, status=status, http_status=http, started_at=at, finished_at=at, received_at=at,
        ttft_ms=ttft, tpot_ms=tpot,
    )  # fmt: skip


@pytest.fixture
def route(db):
    return ModelRoute.objects.create(public_name="sim-llama")


@pytest.fixture
def ttft_slo(route, admin_user):
    return slo_create(route=route, kind="ttft", threshold_ms=500, target="0.99", window_scale=SCALE,
                      min_requests=5, actor=admin_user)  # fmt: skip


def test_each_kind_counts_its_own_good_and_valid_requests(route, tenant, admin_user):
    at = NOW - dt.timedelta(seconds=1)
    _req(tenant, at=at, ttft=100, tpot=10)  # good everywhere
    _req(tenant, at=at, ttft=900, tpot=10)  # slow first token
    _req(tenant, at=at, ttft=100, tpot=80)  # slow tokens
    _req(tenant, at=at, status="error", http=502, ttft=None, tpot=None)  # upstream failure
    _req(tenant, at=at, status="error", http=429, ttft=None, tpot=None)  # the client's fault
    _req(tenant, at=at, status="client_disconnected", ttft=100, tpot=None)  # abandoned: not counted
    _req(tenant, at=at, model="other", ttft=5000)  # another route
    _req(tenant, at=NOW - dt.timedelta(days=40), ttft=5000)  # outside the period
    expect = {"ttft": (1, 3), "tpot": (1, 3), "errors": (1, 5), "attainment": (4, 5)}
    for kind, (bad, valid) in expect.items():
        slo = slo_create(route=route, kind=kind, threshold_ms=500 if kind != "tpot" else 50, tpot_threshold_ms=50,
                         target="0.9", actor=admin_user)  # fmt: skip
        period = slo_measure(slo, now=NOW)["period"]
        assert (period["bad"], period["valid"]) == (bad, valid), kind


def test_a_fast_burn_pages_once_and_recovery_resolves_it(
    ttft_slo, tenant, admin_user, django_capture_on_commit_callbacks
):
    # Healthy traffic: one request a second for the last 40 s.
    for s in range(40):
        _req(tenant, at=NOW - dt.timedelta(seconds=40 - s), ttft=120)
    assert slo_evaluate(ttft_slo, now=NOW) == "ok"
    # A TTFT spike: every request for 10 s is slow. Both fast windows (36 s, 3 s) burn > 14.4x.
    t1 = NOW + dt.timedelta(seconds=10)
    for s in range(10):
        _req(tenant, at=NOW + dt.timedelta(seconds=s), ttft=2000)
    with django_capture_on_commit_callbacks(execute=True):
        assert slo_evaluate(ttft_slo, now=t1) == "firing"
    breach = SloBreach.objects.get()
    assert (breach.severity, breach.condition, breach.ended_at) == ("page", "fast", None)
    assert breach.evidence["windows"]["fast_long"]["bad"] == 10
    # The spine's reaction paged the on-call, once, however often the evaluator runs.
    with django_capture_on_commit_callbacks(execute=True):
        slo_evaluate(ttft_slo, now=t1 + dt.timedelta(seconds=1))
    notes = Notification.objects.filter(kind="operations.slo_breached")
    assert notes.count() == 1 and "sim-llama" in notes[0].title and notes[0].severity == "critical"
    assert SloBreach.objects.count() == 1
    # Fast again. 6 s later the fast pair's short window (3 s) is clean, but the slow pair (216 s /
    # 18 s, above 6x) still holds: still a page, the same breach, no second notification.
    for s in range(240):
        _req(tenant, at=t1 + dt.timedelta(seconds=s), ttft=110)
    with django_capture_on_commit_callbacks(execute=True):
        assert slo_evaluate(ttft_slo, now=t1 + dt.timedelta(seconds=6)) == "firing"
    assert SloBreach.objects.count() == 1 and notes.count() == 1
    # 20 s later only the ticket pair (2,592 s / 216 s, above 1x) holds: the page resolves, a
    # ticket-severity breach opens and tells the on-call at warning level.
    with django_capture_on_commit_callbacks(execute=True):
        assert slo_evaluate(ttft_slo, now=t1 + dt.timedelta(seconds=20)) == "firing"
    breach.refresh_from_db()
    page_note = notes.get(severity="critical")
    assert breach.ended_at is not None and page_note.resolved_at is not None
    assert page_note.page.status == "resolved"
    ticket = SloBreach.objects.get(ended_at__isnull=True)
    assert (ticket.severity, ticket.condition) == ("ticket", "ticket")
    assert notes.filter(severity="warning").count() == 1
    # Once the ticket pair's short window (216 s) holds no slow request, the SLO is met again.
    t2 = t1 + dt.timedelta(seconds=230)
    with django_capture_on_commit_callbacks(execute=True):
        assert slo_evaluate(ttft_slo, now=t2) == "ok"
    ticket.refresh_from_db()
    assert ticket.ended_at == t2
    assert not Notification.objects.filter(kind="operations.slo_breached", resolved_at__isnull=True).exists()
    kinds = list(
        Event.objects.filter(kind__startswith="operations.").values_list("kind", flat=True).order_by("id")
    )
    assert kinds == ["operations.slo_breached", "operations.slo_recovered"] * 2


def test_too_few_requests_do_not_page(ttft_slo, tenant):
    for s in range(3):  # min_requests is 5
        _req(tenant, at=NOW - dt.timedelta(seconds=s + 1), ttft=5000)
    assert slo_evaluate(ttft_slo, now=NOW) == "no_data"
    assert not SloBreach.objects.exists()


def test_the_reactions_are_idempotent(ttft_slo):
    ev = Event.objects.create(
        kind="operations.slo_breached", subject="operations.slobreach:1",
        payload={"breach": 1, "slo": ttft_slo.pk, "route": "sim-llama", "objective": ttft_slo.objective,
                 "severity": "page", "condition": "fast", "burn": 40.0, "threshold": 14.4, "long_s": 36.0,
                 "short_s": 3.0},
    )  # fmt: skip
    breach_page(ev)
    breach_page(ev)
    assert Notification.objects.count() == 1
    done = Event.objects.create(kind="operations.slo_recovered", subject="x", payload={"breach": 1})
    recovery_resolve(done)
    recovery_resolve(done)
    assert Notification.objects.get().resolved_at is not None


# --- pages and bad input -------------------------------------------------------------------------


def test_the_slo_pages_by_role(ttft_slo, role_clients, tenant_admin_client):
    slo_evaluate(ttft_slo, now=timezone.now())
    url = reverse("operations:slo_list")
    assert ttft_slo.objective in role_clients["admin"].get(url).content.decode()
    assert 'id="slo-form"' in role_clients["admin"].get(url).content.decode()
    auditor = role_clients["auditor"].get(url).content.decode()
    assert ttft_slo.objective in auditor and 'id="slo-form"' not in auditor
    for c in (role_clients["member"], tenant_admin_client):
        assert c.get(url).status_code == 403
    panel = role_clients["auditor"].get(reverse("operations:route_slos", args=[ttft_slo.route_id]))
    assert panel.status_code == 200 and "No data" in panel.content.decode()
    data = role_clients["admin"].get(url, {"format": "json"}).json()["results"][0]
    assert data["route"] == "sim-llama" and data["state"] == "no_data" and "windows" in data
    assert (
        role_clients["auditor"].post(reverse("operations:slo_delete", args=[ttft_slo.pk])).status_code == 403
    )
    assert Slo.objects.exists()


def test_an_admin_adds_and_removes_an_slo_audited(route, admin_client):
    form = {"route": route.pk, "kind": "errors", "target": "0.995", "period_days": "30", "window_scale": "1",
            "min_requests": "10"}  # fmt: skip
    assert admin_client.post(reverse("operations:slo_create"), form).status_code == 302
    slo = Slo.objects.get()
    assert slo.threshold_ms is None and slo.objective == "99.5 % of requests without a server error"
    assert AuditEvent.objects.filter(action="slo.create").count() == 1
    assert admin_client.post(reverse("operations:slo_delete", args=[slo.pk])).status_code == 302
    assert not Slo.objects.exists() and AuditEvent.objects.filter(action="slo.delete").count() == 1


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"target": "1.5"}, "less than or equal to 0.99999"),
        ({"target": "0.2"}, "greater than or equal to 0.5"),
        ({"target": "lots"}, "Enter a number"),
        ({"threshold_ms": ""}, "needs its bound"),
        ({"threshold_ms": "-3"}, "greater than or equal to 1"),
        ({"period_days": "0"}, "greater than or equal to 1"),
        ({"window_scale": "5"}, "less than or equal to 1"),
        ({"kind": "vibes"}, "Unknown SLO kind"),
        ({"route": "999999"}, "Choose a route"),
    ],
)
def test_bad_slo_input_is_refused_with_its_reason(route, admin_client, change, says):
    form = {"route": route.pk, "kind": "ttft", "threshold_ms": "500", "target": "0.99", "period_days": "30",
            "window_scale": "1", "min_requests": "10", **change}  # fmt: skip
    r = admin_client.post(reverse("operations:slo_create"), form)
    assert r.status_code == 400 and says in r.content.decode()
    assert not Slo.objects.exists() and not AuditEvent.objects.filter(action="slo.create").exists()


def test_the_same_slo_twice_is_refused(ttft_slo, admin_client):
    form = {"route": ttft_slo.route_id, "kind": "ttft", "threshold_ms": "500", "target": "0.99",
            "period_days": "30", "window_scale": "0.01", "min_requests": "5"}  # fmt: skip
    r = admin_client.post(reverse("operations:slo_create"), form)
    assert r.status_code == 400 and "already" in r.content.decode()
