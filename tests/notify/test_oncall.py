"""The platform's on-call: the rota's shifts, a page to the member on shift, escalation to the next
and then to everyone, acknowledgement (audited) that stops it, signals from the event spine paging
once however often their reaction runs, resolution sent to the webhooks that had the firing
notification, signed as Standard Webhooks, and the on-call page by role, with its bad input."""

from __future__ import annotations

import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from audit.models import AuditEvent
from events.models import Event
from notify.models import Delivery, Endpoint, Notification, Page, Rota
from notify.reactions import page_oncall
from notify.selectors import oncall_member
from notify.services import (
    deliveries_due,
    notification_resolve,
    notify_oncall,
    page_acknowledge,
    pages_escalate,
    platform_endpoint_add,
    rota_set,
)
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
T0 = dt.datetime(2026, 12, 7, 9, 0, tzinfo=dt.UTC)


class Receiver:
    """A webhook receiver on loopback that keeps each request's headers and raw body."""

    def __init__(self):
        self.calls: list[tuple[dict, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.calls.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings):
    r = Receiver()
    settings.OUTBOUND_ALLOWED_DESTINATIONS = [f"127.0.0.1:{r.server.server_address[1]}"]
    yield r
    r.close()


@pytest.fixture
def admins(admin_user):
    others = [
        UserFactory(username=n, email=f"{n}@example.com", is_superuser=True, is_staff=True)
        for n in ("ana", "bo", "cy")
    ]
    admin_user.email = "admin@example.com"
    admin_user.save()
    return others


@pytest.fixture
def rota(admins, admin_user):
    return rota_set(
        name="Platform on-call",
        usernames=["ana", "bo", "cy"],
        shift_hours=24,
        escalate_after_minutes=15,
        handover_at=T0,
        actor=admin_user,
    )


def test_shifts_rotate_in_member_order(rota):
    names = [
        oncall_member(rota, now=T0 + dt.timedelta(hours=h)).username for h in (-5, 0, 23, 24, 47, 48, 72)
    ]
    assert names == ["ana", "ana", "ana", "bo", "bo", "cy", "ana"]


def test_a_page_escalates_to_the_next_member_then_to_everyone_until_acknowledged(rota, admin_user):
    at = T0 + dt.timedelta(hours=25)  # bo's shift
    note = notify_oncall(kind="deployments.cluster_unreachable", title="Ray down", body="b", now=at)
    page = note.page
    assert page.paged_user.username == "bo" and page.level == 0
    assert mail.outbox[-1].to == ["bo@example.com"]
    assert pages_escalate(now=at + dt.timedelta(minutes=14)) == 0  # not yet
    assert pages_escalate(now=at + dt.timedelta(minutes=15)) == 1
    page.refresh_from_db()
    assert page.paged_user.username == "cy" and page.level == 1
    assert mail.outbox[-1].to == ["cy@example.com"]
    pages_escalate(now=at + dt.timedelta(minutes=30))
    page.refresh_from_db()
    assert page.paged_user.username == "ana" and page.level == 2
    pages_escalate(now=at + dt.timedelta(minutes=45))
    page.refresh_from_db()
    # Everyone: every member and every platform admin, and nothing further to escalate to.
    assert page.paged_user is None and page.next_escalation_at is None
    assert sorted(mail.outbox[-1].to) == [
        "admin@example.com",
        "ana@example.com",
        "bo@example.com",
        "cy@example.com",
    ]
    assert pages_escalate(now=at + dt.timedelta(days=1)) == 0
    assert [h["why"] for h in page.history] == ["paged"] + ["not acknowledged"] * 3


def test_acknowledging_stops_escalation_and_is_audited(rota, admins):
    note = notify_oncall(kind="evaluations.gate_failed", title="Gate failed", body="b", now=T0)
    page = page_acknowledge(page=note.page, user=admins[0])
    assert page.status == Page.Status.ACKNOWLEDGED and page.acknowledged_by == admins[0]
    assert pages_escalate(now=T0 + dt.timedelta(hours=2)) == 0
    ev = AuditEvent.objects.get(action="page.acknowledge")
    assert ev.actor == "ana" and ev.object_type == "notify.page"
    # A second acknowledgement changes nothing and records nothing.
    page_acknowledge(page=page, user=admins[1])
    assert AuditEvent.objects.filter(action="page.acknowledge").count() == 1


def test_without_a_rota_everyone_is_paged_at_once(admins, admin_user):
    note = notify_oncall(kind="x.y", title="t", body="b", now=T0)
    assert note.page.paged_user is None and note.page.next_escalation_at is None
    assert len(mail.outbox[-1].to) == 4


def _event(kind: str, subject: str, payload: dict) -> Event:
    return Event.objects.create(kind=kind, subject=subject, payload=payload)


def test_a_signal_pages_once_however_often_its_reaction_runs(rota):
    ev = _event(
        "deployments.analysis_failed",
        "deployments.analysisrun:9",
        {"rollout": 4, "verdict": "failed", "failed_checks": ["ttft_p95"]},
    )
    page_oncall(ev)
    page_oncall(ev)  # at least once: the dispatcher may run it again
    note = Notification.objects.get()
    assert note.audience == "oncall" and note.title == "Rollout 4: canary analysis failed"
    assert (
        "ttft_p95" in note.body and note.dedup_key == "deployments.analysis_failed:deployments.analysisrun:9"
    )
    assert Page.objects.count() == 1
    # A different subject is a different cause.
    page_oncall(_event("deployments.analysis_failed", "deployments.analysisrun:10", {"rollout": 4}))
    assert Notification.objects.count() == 2


def test_the_registry_sends_the_spines_signals_to_the_on_call(settings):
    for kind in ("deployments.cluster_unreachable", "deployments.analysis_failed", "evaluations.gate_failed"):
        assert "notify.reactions.page_oncall" in settings.GOVERNOR_REACTIONS[kind]


def test_firing_and_resolved_reach_a_platform_webhook_signed_in_alertmanager_format(
    rota, admin_user, receiver
):
    endpoint = platform_endpoint_add(name="am", url=receiver.url, format="alertmanager", actor=admin_user)
    note = notify_oncall(
        kind="deployments.cluster_unreachable", title="Ray down", body="b", dedup_key="ray-down", now=T0
    )
    assert deliveries_due(now=timezone.now()) == 1
    notification_resolve(dedup_key="ray-down")
    notification_resolve(dedup_key="ray-down")  # once only
    assert deliveries_due(now=timezone.now()) == 1
    assert [d.status_sent for d in Delivery.objects.filter(notification=note).order_by("id")] == [
        "firing",
        "resolved",
    ]
    statuses = []
    for headers, body in receiver.calls:
        data = Webhook(endpoint.secret).verify(body, headers)  # the specification's library verifies it
        statuses.append((data["status"], data["alerts"][0]["labels"]["alertname"]))
        assert headers["webhook-id"] == f"msg_{headers['x-governor-delivery']}"
    assert statuses == [
        ("firing", "deployments.cluster_unreachable"),
        ("resolved", "deployments.cluster_unreachable"),
    ]
    note.refresh_from_db()
    assert note.resolved_at is not None and note.page.status == Page.Status.RESOLVED
    assert json.loads(receiver.calls[1][1])["alerts"][0]["endsAt"].startswith(str(note.resolved_at.year))


def test_a_removed_endpoint_fails_its_pending_delivery_without_a_call(rota, admin_user, receiver):
    endpoint = platform_endpoint_add(name="", url=receiver.url, format="governor", actor=admin_user)
    notify_oncall(kind="x.y", title="t", body="b")
    Endpoint.objects.filter(pk=endpoint.pk).update(is_active=False)
    assert deliveries_due(now=timezone.now()) == 0
    assert Delivery.objects.get().status == "failed" and receiver.calls == []


# --- the page, by role, and bad input ------------------------------------------------------------


def test_the_on_call_page_by_role(rota, role_clients, tenant_admin_client, admins):
    note = notify_oncall(kind="x.y", title="Something broke", body="b")
    url = reverse("notify:oncall")
    admin = role_clients["admin"].get(url).content.decode()
    assert "Something broke" in admin and 'id="rota-form"' in admin and "Acknowledge" in admin
    auditor = role_clients["auditor"].get(url).content.decode()
    assert "Something broke" in auditor and 'id="rota-form"' not in auditor and "Acknowledge" not in auditor
    for role in ("member", "outsider"):
        assert role_clients[role].get(url).status_code == 403
    assert tenant_admin_client.get(url).status_code == 403
    # The notifications list: platform readers see on-call notifications, tenant admins do not.
    lst = reverse("notify:notification_list")
    assert "Something broke" in role_clients["auditor"].get(lst).content.decode()
    assert "Something broke" not in tenant_admin_client.get(lst).content.decode()
    data = role_clients["admin"].get(lst, {"format": "json", "audience": "oncall"}).json()
    assert data["count"] == 1 and data["results"][0]["page"]["status"] == "open"
    # Only a platform admin acknowledges.
    ack = reverse("notify:page_ack", args=[note.page.pk])
    assert role_clients["auditor"].post(ack).status_code == 403
    assert role_clients["admin"].post(ack).status_code == 302
    assert Page.objects.get().status == "acknowledged"


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({"members": "ana\nnobody"}, "No active user named nobody"),
        ({"members": "ana\ntenantadmin"}, "Only platform admins take on-call shifts"),
        ({"members": "ana\nana"}, "listed twice"),
        ({"members": ""}, "at least one platform admin"),
        ({"shift_hours": "0"}, "between 1 hour and 4 weeks"),
        ({"shift_hours": "lots"}, "whole number"),
        ({"escalate_after_minutes": "100000"}, "1 minute to 24 hours"),
        ({"name": "  "}, "Name the rota"),
    ],
)
def test_bad_rota_input_is_refused_with_its_reason_and_changes_nothing(
    rota, admin_client, tenant_admin_user, form, says
):
    before = list(rota.members.values_list("user__username", flat=True))
    data = {
        "name": "Platform on-call",
        "members": "ana\nbo",
        "shift_hours": "12",
        "escalate_after_minutes": "5",
    }
    r = admin_client.post(reverse("notify:rota_set"), {**data, **form})
    assert r.status_code == 400 and says in r.content.decode()
    rota.refresh_from_db()
    assert list(rota.members.values_list("user__username", flat=True)) == before and rota.shift_hours == 24


def test_a_rota_change_is_audited(rota, admin_client):
    data = {
        "name": "Platform on-call",
        "members": "cy\nana",
        "shift_hours": "12",
        "escalate_after_minutes": "5",
    }
    assert admin_client.post(reverse("notify:rota_set"), data).status_code == 302
    rota = Rota.objects.get()
    assert [m.user.username for m in rota.members.all()] == ["cy", "ana"] and rota.shift_hours == 12
    ev = AuditEvent.objects.filter(action="rota.set").latest("seq")
    assert ev.before["members"] == ["ana", "bo", "cy"] and ev.after["members"] == ["cy", "ana"]


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9093/api/v2/alerts", "http://169.254.169.254/", "http://10.1.2.3/"]
)
def test_a_platform_webhook_to_an_internal_address_is_refused(admin_client, url):
    r = admin_client.post(
        reverse("notify:platform_webhook_add"), {"name": "am", "url": url, "format": "alertmanager"}
    )
    assert r.status_code == 400 and "cannot be used" in r.content.decode()
    assert not Endpoint.objects.exists()


def test_platform_webhooks_are_for_platform_admins(auditor_client, tenant_admin_client):
    url = reverse("notify:platform_webhook_add")
    for c in (auditor_client, tenant_admin_client):
        assert c.post(url, {"url": "https://hooks.example.com/", "format": "alertmanager"}).status_code == 403
    assert not Endpoint.objects.exists()


def test_ray_heard_from_again_resolves_the_unreachable_page(rota):
    from notify.reactions import unreachable_resolve

    down = _event("deployments.cluster_unreachable", "", {"message": "connection refused"})
    page_oncall(down)
    note = Notification.objects.get()
    assert "connection refused" in note.body and note.page.status == "open"
    back = _event("deployments.status_changed", "", {})
    unreachable_resolve(back)
    unreachable_resolve(back)  # at least once
    note.refresh_from_db()
    assert note.resolved_at is not None and note.page.status == "resolved"
