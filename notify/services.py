"""Sending notifications: to a tenant's admins or to the platform's on-call, in the console, by email
and to signed webhooks retried with backoff; paging the rota, acknowledgement and escalation.

Senders call ``notify_tenant`` or ``notify_oncall`` with a ``dedup_key`` when they may run more than
once for one cause (an event-spine reaction runs at least once): the second call returns the first
notification and sends nothing again.
"""

from __future__ import annotations

import datetime as dt
import logging
import smtplib

import orjson
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from audit.services import audit_record
from core.outbound import OutboundRefused, outbound_request, url_check
from events.services import emit
from notify import payloads, signing
from notify.models import Audience, Delivery, Endpoint, Notification, Page, Rota, RotaMember, Severity
from notify.selectors import oncall_member, rota_active

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_MAX_ATTEMPTS = 6
WEBHOOK_BACKOFF_S = 30.0  # 30 s, 1 min, 2 min, 4 min, 8 min, then give up
RECEIVER = "governor"


def backoff_after(attempts: int) -> dt.timedelta:
    return dt.timedelta(seconds=WEBHOOK_BACKOFF_S * 2 ** max(0, attempts - 1))


def _tenant_admin_emails(tenant_id: int) -> list[str]:
    # Through the users' reverse relation (billing.Membership.user, related_name "memberships"), so
    # this app imports nothing of billing's.
    users = get_user_model().objects.filter(
        is_active=True, memberships__tenant_id=tenant_id, memberships__role="admin"
    )
    return sorted({e for e in users.values_list("email", flat=True) if e})


def _email(note: Notification, recipients: list[str]) -> None:
    if not recipients:
        return
    try:
        send_mail(note.title, note.body, None, recipients)
    except (smtplib.SMTPException, OSError):
        # The console notification and webhooks stand; the mail server's failure is logged, not fatal.
        log.exception("could not email notification %s", note.pk)
        return
    emailed = sorted(set(note.emailed_to) | set(recipients))
    Notification.objects.filter(pk=note.pk).update(emailed_to=emailed)
    note.emailed_to = emailed


def _queue_deliveries(note: Notification, endpoints, *, status: str = "firing") -> list[Delivery]:
    now = timezone.now()
    made = []
    for endpoint in endpoints:
        d = Delivery.objects.create(
            notification=note, endpoint=endpoint, url=endpoint.url, status_sent=status, next_attempt_at=now
        )
        emit("notify.delivery_queued", subject=d, payload={"delivery": d.pk})
        made.append(d)
    return made


def _existing(dedup_key: str | None) -> Notification | None:
    if not dedup_key:
        return None
    return Notification.objects.filter(dedup_key=dedup_key).first()


def _create(**fields) -> tuple[Notification, bool]:
    """The notification, or the one an earlier call with the same ``dedup_key`` made."""
    found = _existing(fields.get("dedup_key"))
    if found is not None:
        return found, False
    try:
        with transaction.atomic():
            return Notification.objects.create(**fields), True
    except IntegrityError:
        found = _existing(fields.get("dedup_key"))
        if found is None:
            raise
        return found, False


def notify_tenant(
    *,
    tenant_id: int,
    kind: str,
    title: str,
    body: str,
    payload: dict | None = None,
    severity: str = Severity.WARNING,
    dedup_key: str | None = None,
) -> Notification:
    """A notification to a tenant's admins: the console, an email to each, the tenant's webhook."""
    with transaction.atomic():
        note, created = _create(
            audience=Audience.TENANT,
            tenant_id=tenant_id,
            kind=kind,
            severity=severity,
            title=title[:300],
            body=body,
            payload=payload or {},
            dedup_key=dedup_key,
        )
        if not created:
            return note
        _queue_deliveries(note, Endpoint.objects.filter(tenant_id=tenant_id, is_active=True))
    _email(note, _tenant_admin_emails(tenant_id))
    return note


def _platform_admins():
    return get_user_model().objects.filter(is_active=True, is_superuser=True)


def notify_oncall(
    *,
    kind: str,
    title: str,
    body: str,
    payload: dict | None = None,
    severity: str = Severity.CRITICAL,
    dedup_key: str | None = None,
    now: dt.datetime | None = None,
) -> Notification:
    """A notification to the platform: the on-call member is paged (email, console), platform
    webhooks get it, and it escalates until someone acknowledges it."""
    now = now or timezone.now()
    with transaction.atomic():
        note, created = _create(
            audience=Audience.ONCALL,
            kind=kind,
            severity=severity,
            title=title[:300],
            body=body,
            payload=payload or {},
            dedup_key=dedup_key,
        )
        if not created:
            return note
        _queue_deliveries(note, Endpoint.objects.filter(tenant__isnull=True, is_active=True))
        rota = rota_active()
        page = Page(notification=note, rota=rota, paged_at=now)
        targets = _page_targets(rota, level=0, now=now)
        page.paged_user = targets[0] if _members(rota) else None
        page.next_escalation_at = _next_escalation(rota, page.level, now)
        page.history = [_history_entry(now, page.level, targets, "paged")]
        page.save()
    _email(note, [u.email for u in targets if u.email])
    return note


def _members(rota: Rota | None) -> list:
    if rota is None:
        return []
    return [m.user for m in RotaMember.objects.filter(rota=rota, user__is_active=True).select_related("user")]


def _everyone_level(rota: Rota | None) -> int:
    return len(_members(rota))


def _page_targets(rota: Rota | None, *, level: int, now: dt.datetime) -> list:
    """Who is paged at ``level``: the member on shift, then the next ones in order, then everyone
    (every member and every platform admin). Without a rota, or an empty one, everyone at once."""
    members = _members(rota)
    if not members or level >= len(members):
        everyone = {u.pk: u for u in members}
        everyone.update({u.pk: u for u in _platform_admins()})
        return sorted(everyone.values(), key=lambda u: u.username)
    on_shift = oncall_member(rota, now=now, members=members)
    start = members.index(on_shift) if on_shift in members else 0
    return [members[(start + level) % len(members)]]


def _next_escalation(rota: Rota | None, level: int, now: dt.datetime) -> dt.datetime | None:
    if rota is None or level >= _everyone_level(rota):
        return None  # everyone has it: nothing further to escalate to
    return now + dt.timedelta(minutes=rota.escalate_after_minutes)


def _history_entry(now, level, targets, why) -> dict:
    return {"at": payloads.rfc3339(now), "level": level, "to": [u.username for u in targets], "why": why}


def pages_escalate(*, now: dt.datetime | None = None) -> int:
    """Pass every open page whose time is up to the next level; returns how many moved."""
    now = now or timezone.now()
    moved = 0
    ids = list(
        Page.objects.filter(status=Page.Status.OPEN, next_escalation_at__lte=now).values_list("pk", flat=True)
    )
    for pk in ids:
        with transaction.atomic():
            page = (
                Page.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("notification", "rota")
                .filter(pk=pk, status=Page.Status.OPEN, next_escalation_at__lte=now)
                .first()
            )
            if page is None:
                continue
            page.level += 1
            targets = _page_targets(page.rota, level=page.level, now=now)
            everyone = page.level >= _everyone_level(page.rota)
            page.paged_user = None if everyone else targets[0]
            page.next_escalation_at = _next_escalation(page.rota, page.level, now)
            page.history = [*page.history, _history_entry(now, page.level, targets, "not acknowledged")]
            page.save()
            emit("notify.page_escalated", subject=page, payload={"page": page.pk, "level": page.level})
        _email(page.notification, [u.email for u in targets if u.email])
        moved += 1
    return moved


def page_acknowledge(*, page: Page, user) -> Page:
    """Someone has it: escalation stops. Audited."""
    with transaction.atomic():
        locked = Page.objects.select_for_update().get(pk=page.pk)
        if locked.status != Page.Status.OPEN:
            return locked
        now = timezone.now()
        locked.status = Page.Status.ACKNOWLEDGED
        locked.acknowledged_by, locked.acknowledged_at, locked.next_escalation_at = user, now, None
        locked.history = [*locked.history, _history_entry(now, locked.level, [user], "acknowledged")]
        locked.save()
        audit_record(
            actor=user,
            action="page.acknowledge",
            target=locked,
            object_repr=locked.notification.title[:200],
            after={"status": locked.status, "level": locked.level},
        )
    return locked


def notification_resolve(*, dedup_key: str, now: dt.datetime | None = None) -> Notification | None:
    """The cause is over: the notification is marked resolved, its page closed, and every endpoint
    that was sent the firing notification is sent a resolved one."""
    now = now or timezone.now()
    with transaction.atomic():
        note = Notification.objects.select_for_update().filter(dedup_key=dedup_key).first()
        if note is None or note.resolved_at is not None:
            return note
        note.resolved_at = now
        note.save(update_fields=["resolved_at"])
        Page.objects.filter(notification=note).exclude(status=Page.Status.RESOLVED).update(
            status=Page.Status.RESOLVED, next_escalation_at=None
        )
        sent_to = Endpoint.objects.filter(
            pk__in=Delivery.objects.filter(notification=note, status_sent="firing").values("endpoint_id"),
            is_active=True,
        )
        _queue_deliveries(note, sent_to, status="resolved")
    return note


def notifications_resolve_kind(*, kind: str, now: dt.datetime | None = None) -> int:
    """Resolve every open notification of ``kind`` (a signal whose cause is over); returns how many."""
    keys = list(
        Notification.objects.filter(kind=kind, resolved_at__isnull=True)
        .exclude(dedup_key=None)
        .values_list("dedup_key", flat=True)
    )
    for key in keys:
        notification_resolve(dedup_key=key, now=now)
    return len(keys)


# --- webhook delivery -----------------------------------------------------------------------------


def enqueue_delivery(delivery_id: int) -> None:
    """The first attempt of a delivery (``notify.reactions.delivery_enqueue``); a broker that is down
    raises, so the event spine retries it, and the retry beat sends it in any case."""
    from notify.tasks import delivery_send as task  # the task module imports services

    task.delay(delivery_id)


def _console_url(note: Notification) -> str:
    base = settings.CONSOLE_PUBLIC_URL.rstrip("/")
    return f"{base}{reverse('notify:notification_list')}#n{note.pk}"


def delivery_body(delivery: Delivery) -> bytes:
    note = delivery.notification
    slug = note.tenant.slug if note.tenant_id else None
    fmt = delivery.endpoint.format if delivery.endpoint else Endpoint.Format.GOVERNOR
    url = _console_url(note)
    if fmt == Endpoint.Format.ALERTMANAGER:
        data = payloads.alertmanager_payload(
            note, status=delivery.status_sent, tenant_slug=slug, console_url=url, receiver=RECEIVER
        )
    else:
        data = payloads.governor_payload(note, status=delivery.status_sent, tenant_slug=slug, console_url=url)
    return orjson.dumps(data)


def delivery_send(*, delivery_id: int, now: dt.datetime | None = None) -> str:
    """Try one delivery if it is pending and due; returns its status afterwards."""
    now = now or timezone.now()
    with transaction.atomic():
        d = (
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("notification__tenant", "endpoint")
            .filter(pk=delivery_id, status=Delivery.Status.PENDING, next_attempt_at__lte=now)
            .first()
        )
        if d is None:
            row = Delivery.objects.filter(pk=delivery_id).values_list("status", flat=True).first()
            return row or "missing"
        if d.endpoint is None or not d.endpoint.is_active:
            d.status, d.last_error = Delivery.Status.FAILED, "the webhook was removed or disabled"
            d.save()
            return d.status
        body = delivery_body(d)
        d.attempts += 1
        refused = False
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "governor-webhooks/2",
            # Receivers deduplicate retries on the delivery id (also in webhook-id).
            "X-Governor-Delivery": str(d.pk),
            "X-Governor-Event": d.notification.payload.get("event", d.notification.kind),
            **signing.sign_headers(d.endpoint.secret, f"msg_{d.pk}", body),
        }
        try:
            # Checked again at send time (DNS answers change since the URL was saved), and the
            # connection goes to the checked address: a tenant admin cannot reach internal services.
            resp = outbound_request(d.url, body=body, timeout=WEBHOOK_TIMEOUT_S, headers=headers)
            error = "" if 200 <= resp.status < 300 else f"HTTP {resp.status}"
        except OutboundRefused as exc:
            error, refused = f"refused: {exc}"[:500], True
        except (OSError, TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        if not error:
            d.status, d.delivered_at, d.last_error = Delivery.Status.DELIVERED, timezone.now(), ""
        elif refused or d.attempts >= WEBHOOK_MAX_ATTEMPTS:
            d.status, d.last_error = Delivery.Status.FAILED, error
        else:
            d.last_error = error
            d.next_attempt_at = now + backoff_after(d.attempts)
        d.save()
        return d.status


def deliveries_due(*, now: dt.datetime | None = None, limit: int = 100) -> int:
    """Send every pending delivery that is due (the beat sweep behind the per-delivery tasks)."""
    now = now or timezone.now()
    ids = list(
        Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(delivery_send(delivery_id=pk, now=now) == Delivery.Status.DELIVERED for pk in ids)


# --- endpoints ------------------------------------------------------------------------------------


def _url_clean(url: str) -> str:
    url = (url or "").strip()
    try:
        # First, so that an internal address gets the reason rather than a generic "bad URL".
        url_check(url, unresolved_ok=True)
    except OutboundRefused as exc:
        raise ValidationError({"url": f"This URL cannot be used: {exc}."}) from exc
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError as exc:
        raise ValidationError({"url": "Enter an http(s) URL."}) from exc
    return url


@transaction.atomic
def tenant_endpoint_set(
    *, tenant, url: str, actor, format: str = Endpoint.Format.GOVERNOR
) -> Endpoint | None:
    """Set (or, with an empty URL, remove) a tenant's webhook; audited. Its secret is kept when only
    the URL changes (receivers keep verifying) and made when the webhook is new."""
    before = Endpoint.objects.filter(tenant=tenant).values("url", "format").first() or {
        "url": None,
        "format": None,
    }
    url = (url or "").strip()
    if format not in Endpoint.Format.values:
        raise ValidationError({"format": f"Unknown format {format!r}."})
    if not url:
        Endpoint.objects.filter(tenant=tenant).delete()
        hook = None
    else:
        url = _url_clean(url)
        hook, _ = Endpoint.objects.update_or_create(
            tenant=tenant, defaults={"url": url, "is_active": True, "format": format}
        )
    after = {"url": url or None, "format": format if url else None}
    if before == after:
        return hook  # nothing changed: nothing to record
    audit_record(
        actor=actor,
        action="tenant_webhook.set",
        target=tenant,
        tenant_id=tenant.pk,
        before=before,
        after=after,
    )
    return hook


@transaction.atomic
def platform_endpoint_add(*, name: str, url: str, format: str, actor) -> Endpoint:
    if format not in Endpoint.Format.values:
        raise ValidationError({"format": f"Unknown format {format!r}."})
    name = (name or "").strip()[:100]
    endpoint = Endpoint.objects.create(tenant=None, name=name, url=_url_clean(url), format=format)
    audit_record(actor=actor, action="platform_webhook.create", target=endpoint, after={"url": endpoint.url,
                 "format": format, "name": name})  # fmt: skip
    return endpoint


@transaction.atomic
def platform_endpoint_remove(*, endpoint: Endpoint, actor) -> None:
    audit_record(actor=actor, action="platform_webhook.delete", target=endpoint, before={"url": endpoint.url})
    endpoint.delete()


@transaction.atomic
def endpoint_secret_rotate(*, endpoint: Endpoint, actor) -> Endpoint:
    """A new signing secret; the old one stops verifying at once. Audited (the secret is not)."""
    endpoint.secret = Endpoint._meta.get_field("secret").default()
    endpoint.save(update_fields=["secret", "updated_at"])
    audit_record(actor=actor, action="webhook.rotate_secret", target=endpoint, tenant_id=endpoint.tenant_id)
    return endpoint


# --- the rota -------------------------------------------------------------------------------------


@transaction.atomic
def rota_set(
    *,
    name: str,
    usernames: list[str],
    shift_hours: int,
    escalate_after_minutes: int,
    handover_at: dt.datetime,
    actor,
) -> Rota:
    """Create or replace the rota ``name``: its members in order and its timings. Audited."""
    if not 1 <= shift_hours <= 24 * 28:
        raise ValidationError({"shift_hours": "A shift is between 1 hour and 4 weeks."})
    if not 1 <= escalate_after_minutes <= 24 * 60:
        raise ValidationError({"escalate_after_minutes": "Escalate after 1 minute to 24 hours."})
    users = {u.username: u for u in get_user_model().objects.filter(username__in=usernames, is_active=True)}
    unknown = [n for n in usernames if n not in users]
    if unknown:
        raise ValidationError({"members": f"No active user named {', '.join(unknown)}."})
    if len(set(usernames)) != len(usernames):
        raise ValidationError({"members": "A member is listed twice."})
    not_staff = [n for n in usernames if not users[n].is_superuser]
    if not_staff:
        raise ValidationError(
            {"members": f"Only platform admins take on-call shifts: {', '.join(not_staff)}."}
        )
    rota, _ = Rota.objects.get_or_create(name=name.strip()[:100], defaults={"handover_at": handover_at})
    before = {
        "members": [m.user.username for m in rota.members.select_related("user")],
        "shift_hours": rota.shift_hours,
        "escalate_after_minutes": rota.escalate_after_minutes,
    }
    rota.shift_hours, rota.escalate_after_minutes, rota.handover_at = (
        shift_hours,
        escalate_after_minutes,
        handover_at,
    )
    rota.save()
    rota.members.all().delete()
    RotaMember.objects.bulk_create(
        [RotaMember(rota=rota, user=users[n], position=i) for i, n in enumerate(usernames)]
    )
    after = {
        "members": usernames,
        "shift_hours": shift_hours,
        "escalate_after_minutes": escalate_after_minutes,
    }
    audit_record(actor=actor, action="rota.set", target=rota, before=before, after=after)
    return rota


def notification_mark_read(*, notification: Notification, user) -> None:
    notification.read_by.add(user)
