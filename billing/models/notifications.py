"""Notifications to tenants (budget thresholds today) and their webhook deliveries."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Notification(models.Model):
    """A message to a tenant's admins, shown in the console (list and badge) and emailed.

    Budget notifications are created once per tenant, period and threshold: they hang off the
    ``BudgetAlert`` row, which is unique on exactly that.
    """

    class Kind(models.TextChoices):
        BUDGET_THRESHOLD = "budget_threshold", "Budget threshold"
        BUDGET_CAP = "budget_cap", "Budget hard cap: requests refused"

    tenant = models.ForeignKey("billing.Tenant", on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    alert = models.OneToOneField(
        "billing.BudgetAlert", null=True, blank=True, on_delete=models.CASCADE, related_name="notification"
    )
    title = models.CharField(max_length=200)
    body = models.TextField()
    payload = models.JSONField(default=dict)
    emailed_to = models.JSONField(default=list, blank=True)
    read_by = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.title


class TenantWebhook(models.Model):
    """Where a tenant wants its notifications POSTed as JSON (optional, one per tenant)."""

    tenant = models.OneToOneField("billing.Tenant", on_delete=models.CASCADE, related_name="webhook")
    url = models.URLField(max_length=500)
    is_active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.tenant} → {self.url}"


class WebhookDelivery(models.Model):
    """One notification's POST to a tenant webhook, retried with exponential backoff until delivered."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (gave up)"

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
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
