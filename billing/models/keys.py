"""API keys for the gateway and the limits that apply to a tenant's traffic."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from snapshot.contract import DEFAULT_CLASS, TRAFFIC_CLASSES

CLASS_CHOICES = [(c, c.capitalize()) for c in TRAFFIC_CLASSES]


class ApiKey(models.Model):
    """A tenant's key for the gateway. Only the SHA-256 of the secret is stored; the prefix is shown."""

    tenant = models.ForeignKey("billing.Tenant", on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="First characters of the key, shown to identify it.")
    key_hash = models.CharField(max_length=64, unique=True)
    allowed_models = models.JSONField(
        default=list, blank=True, help_text="Public model names this key may use; empty means all."
    )
    rpm_limit = models.PositiveIntegerField(default=0, help_text="Requests per minute; 0 = no key limit.")
    tpm_limit = models.PositiveIntegerField(default=0, help_text="Tokens per minute; 0 = no key limit.")
    traffic_class = models.CharField(
        max_length=16,
        choices=CLASS_CHOICES,
        blank=True,
        help_text="The highest class this key's requests may ask for, and their default; empty: the tenant's. "
        "Never above the tenant's.",
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None


class TenantLimits(models.Model):
    """Per-tenant rate limits and admission caps enforced by the gateway (0 = unlimited)."""

    tenant = models.OneToOneField("billing.Tenant", on_delete=models.CASCADE, related_name="limits")
    rpm_limit = models.PositiveIntegerField(default=0)
    tpm_limit = models.PositiveIntegerField(default=0)
    max_input_tokens = models.PositiveIntegerField(
        default=0, help_text="Largest prompt admitted; 0 = no cap."
    )
    max_output_tokens = models.PositiveIntegerField(
        default=0, help_text="Largest max_tokens admitted; 0 = the gateway default."
    )
    traffic_class = models.CharField(
        max_length=16,
        choices=CLASS_CHOICES,
        default=DEFAULT_CLASS,
        help_text="The highest traffic class this tenant's keys may use. Under saturation the gateway "
        "sheds sheddable requests first, then standard, never interactive while it admits a lower class.",
    )
    vote_samples_per_month = models.PositiveIntegerField(
        default=0,
        help_text="Samples this tenant's voting requests may spend in a calendar month (UTC); 0 = no limit. "
        "A vote that would need more gets what is left (docs/voting.md).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"limits of {self.tenant}"
