"""The audit event: one governed change, who made it, and what it changed."""

from __future__ import annotations

from django.db import models


class AuditEvent(models.Model):
    """An append-only record of one governed change (service write, or a raw write a trigger caught)."""

    seq = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=150, db_index=True, help_text="username, or 'controller', 'system:…'")
    actor_id = models.BigIntegerField(null=True, blank=True)
    role = models.CharField(max_length=32, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64, db_index=True)
    object_id = models.CharField(max_length=64, db_index=True, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    tenant_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    client_address = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["seq"]
        indexes = [models.Index(fields=["object_type", "object_id", "seq"])]

    def __str__(self) -> str:
        return f"#{self.seq} {self.actor} {self.action} {self.object_type}:{self.object_id}"
