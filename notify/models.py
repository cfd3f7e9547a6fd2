"""Notifications, where they go (webhook endpoints and their deliveries), and the on-call rota that
platform notifications page.

A notification has one audience: a tenant (its admins read it in the console, get it by email and on
the tenant's webhook) or the platform's on-call (the rota's current member is paged, with
acknowledgement and escalation; platform admins and auditors read it in the console; platform
webhooks get it). The tenant is a foreign key by name, so this app imports none of billing's code.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q


class Audience(models.TextChoices):
    TENANT = "tenant", "Tenant admins"
    ONCALL = "oncall", "Platform on-call"


class Severity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


class Notification(models.Model):
    """A message to an audience. ``dedup_key`` makes a sender's retry (reactions run at least once)
    return the notification it already made instead of a second one."""

    audience = models.CharField(max_length=10, choices=Audience.choices)
    tenant = models.ForeignKey(
        "billing.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=100)
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.WARNING)
    title = models.CharField(max_length=300)
    body = models.TextField()
    payload = models.JSONField(default=dict, blank=True)
    dedup_key = models.CharField(max_length=200, null=True, blank=True, unique=True)
    emailed_to = models.JSONField(default=list, blank=True)
    read_by = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(audience="tenant") & Q(tenant__isnull=False))
                | (Q(audience="oncall") & Q(tenant__isnull=True)),
                name="notify_notification_audience_tenant",
            )
        ]

    def __str__(self) -> str:
        return self.title


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and the base64 of 32 random bytes."""
    import base64

    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


class Endpoint(models.Model):
    """A webhook: a tenant's (one per tenant, set by its admins) or the platform's (any number, set by
    platform admins, for on-call notifications). Every POST is signed with ``secret``."""

    class Format(models.TextChoices):
        GOVERNOR = "governor", "Governor JSON"
        ALERTMANAGER = "alertmanager", "Alertmanager webhook (version 4)"

    tenant = models.ForeignKey(
        "billing.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    name = models.CharField(max_length=100, blank=True)
    url = models.URLField(max_length=500)
    format = models.CharField(max_length=20, choices=Format.choices, default=Format.GOVERNOR)
    secret = models.CharField(max_length=100, default=new_webhook_secret)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(tenant__isnull=False), name="notify_one_endpoint_per_tenant"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant or 'platform'} → {self.url}"


class Delivery(models.Model):
    """One notification's POST to one endpoint, retried with exponential backoff until delivered."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (gave up)"

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(Endpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # "firing" or "resolved": what this POST says of the notification (Alertmanager's status).
    status_sent = models.CharField(max_length=10, default="firing")
    url = models.URLField(max_length=500)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(db_index=True)
    last_error = models.CharField(max_length=500, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"delivery of {self.notification_id} to {self.url}: {self.status}"


class Rota(models.Model):
    """The platform's on-call rota: members take shifts of ``shift_hours`` in order from
    ``handover_at``; a page not acknowledged within ``escalate_after_minutes`` goes to the next member,
    and after the last one to every member and platform admin."""

    name = models.CharField(max_length=100, unique=True)
    shift_hours = models.PositiveIntegerField(default=168)
    handover_at = models.DateTimeField()
    escalate_after_minutes = models.PositiveIntegerField(default=15)
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class RotaMember(models.Model):
    rota = models.ForeignKey(Rota, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField()

    class Meta:
        ordering = ["rota", "position"]
        constraints = [
            models.UniqueConstraint(fields=["rota", "user"], name="notify_rota_member_once"),
            models.UniqueConstraint(fields=["rota", "position"], name="notify_rota_position_once"),
        ]

    def __str__(self) -> str:
        return f"{self.rota} #{self.position}: {self.user}"


class Page(models.Model):
    """An on-call notification's page: who holds it now, until someone acknowledges it."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        ACKNOWLEDGED = "acknowledged", "Acknowledged"
        RESOLVED = "resolved", "Resolved"

    notification = models.OneToOneField(Notification, on_delete=models.CASCADE, related_name="page")
    rota = models.ForeignKey(Rota, null=True, blank=True, on_delete=models.SET_NULL, related_name="pages")
    status = models.CharField(max_length=15, choices=Status.choices, default=Status.OPEN)
    # 0: the member on shift; 1, 2 …: the next ones; len(members): everyone (no further escalation).
    level = models.PositiveIntegerField(default=0)
    paged_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    paged_at = models.DateTimeField()
    next_escalation_at = models.DateTimeField(null=True, blank=True, db_index=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    # [{"at": iso, "level": n, "to": [usernames], "why": "..."}], oldest first.
    history = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-paged_at", "-id"]

    def __str__(self) -> str:
        return f"page of {self.notification_id}: {self.status}"
