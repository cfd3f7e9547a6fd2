"""Budget notifications through the notify app: once per threshold per period (across a period reset),
email, webhook with backoff against a real loopback receiver, the list and badge by role, and tenant
webhooks."""

from __future__ import annotations

import datetime as dt
import json
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.urls import reverse

from audit.models import AuditEvent
from billing.models import BudgetAlert
from billing.services.budgets import budget_alerts_record, budget_set
from notify.models import Delivery as WebhookDelivery
from notify.models import Endpoint as TenantWebhook
from notify.models import Notification
from notify.services import WEBHOOK_MAX_ATTEMPTS
from notify.services import deliveries_due as webhook_deliveries_due
from notify.services import delivery_send as webhook_deliver
from notify.services import tenant_endpoint_set as tenant_webhook_set
from tests.billing.test_rollups import make_event

pytestmark = pytest.mark.django_db
DAY1 = dt.datetime(2026, 11, 2, 10, 0, tzinfo=dt.UTC)


class Receiver:
    """A webhook receiver on loopback that answers the given statuses in turn (then the last one)."""

    def __init__(self, statuses):
        self.statuses = list(statuses)
        self.calls: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.calls.append(
                    {"body": json.loads(body), "delivery": self.headers["X-Governor-Delivery"]}
                )
                status = outer.statuses[min(len(outer.calls) - 1, len(outer.statuses) - 1)]
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def allow(settings):
    """The platform admin allows a loopback receiver (internal addresses are refused otherwise)."""

    def _allow(receiver: Receiver) -> None:
        settings.OUTBOUND_ALLOWED_DESTINATIONS = [f"127.0.0.1:{receiver.server.server_address[1]}"]

    return _allow


@pytest.fixture
def budget(tenant, admin_user, tenant_admin_user):
    return budget_set(
        tenant=tenant,
        amount_usd=Decimal("1"),
        period="daily",
        soft_threshold_percents=[50, 80],
        actor=admin_user,
    )


def test_a_threshold_notifies_once_per_period_and_again_after_the_reset(tenant, budget):
    make_event(tenant, at=DAY1, cost=600_000_000)  # $0.60 of $1: past 50%, not 80%
    assert budget_alerts_record(at=DAY1 + dt.timedelta(hours=1)) == 1
    assert budget_alerts_record(at=DAY1 + dt.timedelta(hours=2)) == 0  # same period: nothing new
    notes = list(Notification.objects.all())
    assert len(notes) == 1 and "50%" in notes[0].title
    assert notes[0].payload["period"] == BudgetAlert.objects.get().period_key
    assert notes[0].audience == "tenant" and notes[0].tenant == tenant
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["tenantadmin@example.com"]
    assert notes[0].emailed_to == ["tenantadmin@example.com"]
    # Next day: a new period; the same threshold notifies again, and 80% for the first time.
    day2 = DAY1 + dt.timedelta(days=1)
    make_event(tenant, at=day2, cost=900_000_000)
    assert budget_alerts_record(at=day2 + dt.timedelta(hours=1)) == 2
    assert Notification.objects.count() == 3
    k1 = notes[0].payload["period"]
    k2 = BudgetAlert.objects.exclude(period_key=k1).values_list("period_key", flat=True).first()
    assert k2 and k2 != k1
    assert set(BudgetAlert.objects.values_list("period_key", "percent")) == {(k1, 50), (k2, 50), (k2, 80)}
    assert len(mail.outbox) == 3


def test_webhook_is_retried_with_backoff_until_delivered(tenant, budget, admin_user, allow):
    receiver = Receiver([500, 200])
    try:
        allow(receiver)
        tenant_webhook_set(tenant=tenant, url=receiver.url, actor=admin_user)
        make_event(tenant, at=DAY1, cost=600_000_000)
        budget_alerts_record(at=DAY1 + dt.timedelta(hours=1))
        d = WebhookDelivery.objects.get()
        t0 = d.next_attempt_at
        assert webhook_deliver(delivery_id=d.pk, now=t0) == "pending"
        d.refresh_from_db()
        assert d.attempts == 1 and d.last_error == "HTTP 500"
        assert d.next_attempt_at - t0 == dt.timedelta(seconds=30)
        assert webhook_deliveries_due(now=t0 + dt.timedelta(seconds=10)) == 0  # not due yet: no call
        assert len(receiver.calls) == 1
        assert webhook_deliveries_due(now=t0 + dt.timedelta(seconds=31)) == 1
        d.refresh_from_db()
        assert d.status == "delivered" and d.attempts == 2
        assert [c["delivery"] for c in receiver.calls] == [str(d.pk), str(d.pk)]  # same id: receivers dedupe
        body = receiver.calls[-1]["body"]
        assert (
            body["event"] == "budget.threshold_crossed" and body["percent"] == 50 and body["tenant"] == "acme"
        )
    finally:
        receiver.close()


def test_webhook_gives_up_after_the_last_attempt(tenant, budget, admin_user, allow):
    receiver = Receiver([503])
    try:
        allow(receiver)
        tenant_webhook_set(tenant=tenant, url=receiver.url, actor=admin_user)
        make_event(tenant, at=DAY1, cost=600_000_000)
        budget_alerts_record(at=DAY1 + dt.timedelta(hours=1))
        d = WebhookDelivery.objects.get()
        now = d.next_attempt_at
        for _ in range(WEBHOOK_MAX_ATTEMPTS):
            webhook_deliveries_due(now=now)
            now += dt.timedelta(hours=1)
        d.refresh_from_db()
        assert d.status == "failed" and d.attempts == WEBHOOK_MAX_ATTEMPTS
        assert webhook_deliveries_due(now=now + dt.timedelta(days=1)) == 0
        assert len(receiver.calls) == WEBHOOK_MAX_ATTEMPTS
    finally:
        receiver.close()


def test_notification_list_and_badge_by_role(
    role_clients, tenant_admin_client, norole_client, tenant, other_tenant, budget
):
    make_event(tenant, at=DAY1, cost=600_000_000)
    budget_alerts_record(at=DAY1 + dt.timedelta(hours=1))
    url = reverse("notify:notification_list")
    for role, sees in [("admin", True), ("auditor", True), ("member", False), ("outsider", False)]:
        r = role_clients[role].get(url)
        assert r.status_code == 200
        assert ("passed 50%" in r.content.decode()) == sees, role
    assert role_clients["anon"].get(url).status_code == 302
    assert norole_client.get(url).status_code == 403
    assert "passed 50%" in tenant_admin_client.get(url).content.decode()
    badge = reverse("notify:notification_badge")
    assert ">1</span>" in tenant_admin_client.get(badge).content.decode()
    assert role_clients["member"].get(badge).content.decode() == ""
    note = Notification.objects.get()
    assert (
        role_clients["outsider"].post(reverse("notify:notification_read", args=[note.pk])).status_code == 404
    )
    assert tenant_admin_client.post(reverse("notify:notification_read", args=[note.pk])).status_code == 302
    assert tenant_admin_client.get(badge).content.decode() == ""


def test_tenant_webhook_permissions_and_validation(tenant_admin_client, role_clients, tenant):
    url = reverse("notify:tenant_webhook", args=[tenant.slug])
    assert role_clients["member"].post(url, {"url": "http://127.0.0.1:9/x"}).status_code == 403
    assert role_clients["outsider"].post(url, {"url": "http://127.0.0.1:9/x"}).status_code == 404
    assert role_clients["auditor"].post(url, {"url": "http://127.0.0.1:9/x"}).status_code == 403
    bad = tenant_admin_client.post(url, {"url": "not a url"})
    assert bad.status_code == 400 and "http(s) URL" in bad.content.decode()
    assert not TenantWebhook.objects.exists()
    assert tenant_admin_client.post(url, {"url": "https://hooks.example.com/acme"}).status_code == 302
    assert TenantWebhook.objects.get(tenant=tenant).url == "https://hooks.example.com/acme"
    assert AuditEvent.objects.filter(action="tenant_webhook.set").count() == 1
    # Saving the same URL and format records nothing; a new format is a change, recorded.
    tenant_admin_client.post(url, {"url": "https://hooks.example.com/acme", "format": "governor"})
    assert AuditEvent.objects.filter(action="tenant_webhook.set").count() == 1
    tenant_admin_client.post(url, {"url": "https://hooks.example.com/acme", "format": "alertmanager"})
    ev = AuditEvent.objects.filter(action="tenant_webhook.set").latest("seq")
    assert ev.before["format"] == "governor" and ev.after["format"] == "alertmanager"
    assert TenantWebhook.objects.get(tenant=tenant).format == "alertmanager"


@pytest.mark.parametrize(
    "hook",
    [
        "http://127.0.0.1:6379/",
        "http://localhost:8265/api/jobs/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]/",
        "http://2130706433/",
        "http://10.0.0.7/",
    ],
)
def test_a_tenant_admin_cannot_point_the_webhook_at_an_internal_address(tenant_admin_client, tenant, hook):
    r = tenant_admin_client.post(reverse("notify:tenant_webhook", args=[tenant.slug]), {"url": hook})
    assert r.status_code == 400
    text = r.content.decode()
    assert "cannot be used" in text and "OUTBOUND_ALLOWED_DESTINATIONS" in text
    assert "navbar" in text and 'id="notifications"' in text  # the console's page, not a bare text
    assert not TenantWebhook.objects.exists()
    assert not AuditEvent.objects.filter(action="tenant_webhook.set").exists()


def test_the_send_path_checks_again_and_never_calls_an_internal_address(
    tenant, budget, admin_user, allow, settings
):
    """Saved while allowed (or while its name resolved elsewhere): the delivery is refused when the
    destination is internal at send time, fails at once and records why; nothing is POSTed."""
    receiver = Receiver([200])
    try:
        allow(receiver)
        tenant_webhook_set(tenant=tenant, url=receiver.url, actor=admin_user)
        settings.OUTBOUND_ALLOWED_DESTINATIONS = []
        make_event(tenant, at=DAY1, cost=600_000_000)
        budget_alerts_record(at=DAY1 + dt.timedelta(hours=1))
        d = WebhookDelivery.objects.get()
        assert webhook_deliver(delivery_id=d.pk, now=d.next_attempt_at) == "failed"
        d.refresh_from_db()
        assert d.last_error.startswith("refused: 127.0.0.1 is a loopback address") and d.attempts == 1
        assert receiver.calls == []
    finally:
        receiver.close()
