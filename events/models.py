"""The outbox: events (governed changes and operational signals) and one delivery per reaction."""

from __future__ import annotations

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone


class Event(models.Model):
    """Something happened that reactions may follow: a governed change (its audit action, with the
    audit event's ``seq``) or an operational signal outside the chain (``audit_event`` is NULL)."""

    kind = models.CharField(max_length=100, db_index=True)
    subject = models.CharField(max_length=200, blank=True, help_text="what it is about: 'app_label.model:pk'")
    payload = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    # The audit event's seq, not a foreign key: the spine sits below audit and keeps no constraint on
    # the append-only trail.
    audit_event = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} {self.subject}".strip()


class Delivery(models.Model):
    """One reaction's duty to one event, moved by the dispatcher: pending until the reaction returns
    (at least once: a dispatcher that dies before marking it leaves it pending for the sweep)."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        DONE = "done", "done"
        FAILED = "failed", "failed (gave up)"

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    reaction = models.CharField(max_length=200, help_text="dotted path of the reaction")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "deliveries"
        constraints = [models.UniqueConstraint(fields=["event", "reaction"], name="events_delivery_once")]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="events_delivery_due")]

    def __str__(self) -> str:
        return f"{self.reaction} ← {self.event} ({self.status})"
