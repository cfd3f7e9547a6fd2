"""Notifications: budget thresholds become a console notification, an email to the tenant's admins and,
when the tenant set one, a webhook POST retried with exponential backoff."""

from __future__ import annotations

import datetime as dt
import logging
import smtplib

import orjson
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import URLValidator
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from billing.models import BudgetAlert, Membership, Notification, Tenant, TenantWebhook, WebhookDelivery
from billing.models.money import NANOS_PER_USD
from core.outbound import OutboundRefused, outbound_request, url_check
from events.services import emit

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_MAX_ATTEMPTS = 6
WEBHOOK_BACKOFF_S = 30.0  # 30 s, 1 min, 2 min, 4 min, 8 min, then give up


def backoff_after(attempts: int) -> dt.timedelta:
    return dt.timedelta(seconds=WEBHOOK_BACKOFF_S * 2 ** max(0, attempts - 1))


def _admin_emails(tenant_id: int) -> list[str]:
    return sorted(
        {
            e
            for e in Membership.objects.filter(tenant_id=tenant_id, role=Membership.Role.ADMIN).values_list(
                "user__email", flat=True
            )
            if e
        }
    )


def budget_notification_create(*, alert: BudgetAlert) -> Notification:
    """The notification of a newly recorded threshold crossing (called once per alert row)."""
    tenant = alert.tenant
    budget = getattr(tenant, "budget", None)
    amount = f"${budget.amount_usd:.2f} {budget.period}" if budget else "its budget"
    spent = alert.spent_nanos / NANOS_PER_USD
    if alert.kind == BudgetAlert.Kind.CAP:
        kind = Notification.Kind.BUDGET_CAP
        title = f"{tenant.name}: requests refused, hard cap of {amount} reached ({alert.period_key})"
        body = (
            f"The gateway is refusing {tenant.name}'s requests (HTTP 429, budget_exceeded): spend in period "
            f"{alert.period_key} is ${spent:.4f} and, with requests in flight, no room is left under the "
            f"hard cap of {alert.percent}% of {amount}. Raise the budget or the cap to serve again; "
            "otherwise requests are served from the next period on."
        )
        event = "budget.cap_reached"
    else:
        kind = Notification.Kind.BUDGET_THRESHOLD
        title = f"{tenant.name} passed {alert.percent}% of {amount} ({alert.period_key})"
        body = (
            f"Spend in period {alert.period_key} reached ${spent:.4f}, past the {alert.percent}% threshold of "
            f"{amount}. See the tenant's cost page for the burn-down and forecast."
        )
        event = "budget.threshold_crossed"
    payload = {
        "event": event,
        "tenant": tenant.slug,
        "period": alert.period_key,
        "percent": alert.percent,
        "spent_usd": f"{spent:.6f}",
        "budget_usd": str(budget.amount_usd) if budget else None,
    }
    with transaction.atomic():
        note = Notification.objects.create(
            tenant=tenant,
            kind=kind,
            alert=alert,
            title=title,
            body=body,
            payload=payload,
        )
        hook = TenantWebhook.objects.filter(tenant=tenant, is_active=True).first()
        if hook is not None:
            delivery = WebhookDelivery.objects.create(
                notification=note, url=hook.url, next_attempt_at=timezone.now()
            )
            emit("billing.webhook_queued", subject=delivery, payload={"delivery": delivery.pk})
    recipients = _admin_emails(tenant.pk)
    if recipients:
        try:
            send_mail(title, body, None, recipients)
            Notification.objects.filter(pk=note.pk).update(emailed_to=recipients)
            note.emailed_to = recipients
        except (smtplib.SMTPException, OSError):
            # The console notification and webhook stand; the mail server's failure is logged, not fatal.
            log.exception("could not email budget notification %s", note.pk)
    return note


def _enqueue_delivery(delivery_id: int) -> None:
    """The first attempt of a delivery (``billing.reactions.webhook_enqueue``); a broker that is down
    raises, so the event spine retries it, and the retry beat sends it in any case."""
    from billing.tasks import webhook_deliver  # the task module imports services; import at call time

    webhook_deliver.delay(delivery_id)


def webhook_deliver(*, delivery_id: int, now: dt.datetime | None = None) -> str:
    """Try one delivery if it is pending and due; returns its status afterwards."""
    now = now or timezone.now()
    with transaction.atomic():
        d = (
            WebhookDelivery.objects.select_for_update(skip_locked=True)
            .select_related("notification__tenant")
            .filter(pk=delivery_id, status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now)
            .first()
        )
        if d is None:
            row = WebhookDelivery.objects.filter(pk=delivery_id).values_list("status", flat=True).first()
            return row or "missing"
        note = d.notification
        body = orjson.dumps(
            {**note.payload, "notification_id": note.pk, "title": note.title, "body": note.body}
        )
        d.attempts += 1
        refused = False
        try:
            # Checked again at send time (DNS answers change since the URL was saved), and the
            # connection goes to the checked address: a tenant admin cannot reach internal services.
            resp = outbound_request(
                d.url,
                body=body,
                timeout=WEBHOOK_TIMEOUT_S,
                headers={
                    "Content-Type": "application/json",
                    "User-Agent": "governor-webhooks/1",
                    # Receivers deduplicate retries on this.
                    "X-Governor-Delivery": str(d.pk),
                    "X-Governor-Event": note.payload.get("event", note.kind),
                },
            )
            error = "" if 200 <= resp.status < 300 else f"HTTP {resp.status}"
        except OutboundRefused as exc:
            error, refused = f"refused: {exc}"[:500], True
        except (OSError, TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        if not error:
            d.status, d.delivered_at, d.last_error = WebhookDelivery.Status.DELIVERED, timezone.now(), ""
        elif refused or d.attempts >= WEBHOOK_MAX_ATTEMPTS:
            d.status, d.last_error = WebhookDelivery.Status.FAILED, error
        else:
            d.last_error = error
            d.next_attempt_at = now + backoff_after(d.attempts)
        d.save()
        return d.status


def webhook_deliveries_due(*, now: dt.datetime | None = None, limit: int = 100) -> int:
    """Send every pending delivery that is due (the beat sweep behind the per-delivery tasks)."""
    now = now or timezone.now()
    ids = list(
        WebhookDelivery.objects.filter(status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(webhook_deliver(delivery_id=pk, now=now) == WebhookDelivery.Status.DELIVERED for pk in ids)


@transaction.atomic
def tenant_webhook_set(*, tenant: Tenant, url: str, actor) -> TenantWebhook | None:
    """Set (or, with an empty URL, remove) a tenant's notification webhook; audited."""
    before = TenantWebhook.objects.filter(tenant=tenant).values_list("url", flat=True).first()
    url = (url or "").strip()
    if not url:
        TenantWebhook.objects.filter(tenant=tenant).delete()
        hook = None
    else:
        try:
            # First, so that an internal address gets the reason rather than a generic "bad URL".
            url_check(url, unresolved_ok=True)
        except OutboundRefused as exc:
            raise ValidationError({"url": f"This URL cannot be used: {exc}."}) from exc
        try:
            URLValidator(schemes=["http", "https"])(url)
        except ValidationError as exc:
            raise ValidationError({"url": "Enter an http(s) URL."}) from exc
        hook, _ = TenantWebhook.objects.update_or_create(
            tenant=tenant, defaults={"url": url, "is_active": True}
        )
    audit_record(
        actor=actor,
        action="tenant_webhook.set",
        target=tenant,
        tenant_id=tenant.pk,
        before={"url": before},
        after={"url": url or None},
    )
    return hook


def notification_mark_read(*, notification: Notification, user) -> None:
    notification.read_by.add(user)
