"""Gateway-facing billing models: API keys, tenant limits, prices, budgets, alerts and usage events.

Money in usage is stored as integer nano-dollars (``cost_nanos``): a price of $X per million tokens
is X*1000 nano-dollars per token, so the gateway's Redis counters, the spool and Postgres agree to
the last unit without floating point.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

NANOS_PER_USD = 1_000_000_000


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
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"limits of {self.tenant}"


class Price(models.Model):
    """A price version for one public model; the one in force is the latest ``effective_from`` ≤ now."""

    public_model = models.CharField(max_length=200, db_index=True)
    input_per_million = models.DecimalField(
        max_digits=12, decimal_places=3, validators=[MinValueValidator(Decimal("0"))]
    )
    output_per_million = models.DecimalField(
        max_digits=12, decimal_places=3, validators=[MinValueValidator(Decimal("0"))]
    )
    effective_from = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=32, default="manual", help_text="manual, or how it was derived.")
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["public_model", "-effective_from"]

    def __str__(self) -> str:
        return f"{self.public_model}: ${self.input_per_million}/${self.output_per_million} per M"

    @property
    def input_nanos(self) -> int:
        """Nano-dollars per input token."""
        return int(self.input_per_million * 1000)

    @property
    def output_nanos(self) -> int:
        return int(self.output_per_million * 1000)


class Budget(models.Model):
    """A tenant's spending budget per period: soft thresholds notify, the hard cap rejects."""

    class Period(models.TextChoices):
        MONTHLY = "monthly", "Monthly"
        WEEKLY = "weekly", "Weekly"
        DAILY = "daily", "Daily"

    tenant = models.OneToOneField("billing.Tenant", on_delete=models.CASCADE, related_name="budget")
    amount_usd = models.DecimalField(
        max_digits=18, decimal_places=6, validators=[MinValueValidator(Decimal("0"))]
    )
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.MONTHLY)
    soft_threshold_percents = models.JSONField(default=list, blank=True, help_text="e.g. [50, 80, 100]")
    hard_cap_percent = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=100,
        help_text="Reject once spend would pass this % of the amount; empty = no cap.",
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.tenant}: ${self.amount_usd} {self.period}"

    @property
    def amount_nanos(self) -> int:
        return int(self.amount_usd * NANOS_PER_USD)

    @property
    def hard_cap_nanos(self) -> int | None:
        if self.hard_cap_percent is None:
            return None
        return self.amount_nanos * self.hard_cap_percent // 100


class BudgetAlert(models.Model):
    """A soft threshold crossed in one period (recorded once; the notification of record)."""

    tenant = models.ForeignKey("billing.Tenant", on_delete=models.CASCADE, related_name="budget_alerts")
    period_key = models.CharField(max_length=16)
    percent = models.PositiveIntegerField()
    spent_nanos = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "period_key", "percent"], name="unique_budget_alert")
        ]

    def __str__(self) -> str:
        return f"{self.tenant} passed {self.percent}% in {self.period_key}"

    @property
    def spent_usd(self) -> Decimal:
        return Decimal(self.spent_nanos) / NANOS_PER_USD


class UsageEvent(models.Model):
    """One request the gateway accepted, as it metered it. Written only by the gateway's spool shipper.

    Foreign keys carry no database constraint: the shipper must be able to insert an event for a
    key or tenant deleted meanwhile, and must never fail a batch over it.
    """

    class Status(models.TextChoices):
        OK = "ok", "OK"
        ERROR = "error", "Error"
        CLIENT_DISCONNECTED = "client_disconnected", "Client disconnected"

    event_id = models.UUIDField(unique=True)
    tenant = models.ForeignKey(
        "billing.Tenant", on_delete=models.DO_NOTHING, db_constraint=False, related_name="usage_events"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="usage_events"
    )
    public_model = models.CharField(max_length=200)
    deployment_id = models.BigIntegerField(null=True)
    deployment_slug = models.CharField(max_length=100, blank=True)
    version_id = models.BigIntegerField(null=True)
    price = models.ForeignKey(
        Price, null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    prompt_tokens = models.IntegerField(default=0)
    completion_tokens = models.IntegerField(default=0)
    cached_tokens = models.IntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0)
    ttft_ms = models.FloatField(null=True)
    tpot_ms = models.FloatField(null=True)
    e2e_ms = models.FloatField(null=True)
    status = models.CharField(max_length=24, choices=Status.choices)
    error_type = models.CharField(max_length=64, blank=True)
    http_status = models.IntegerField()
    stream = models.BooleanField(default=False)
    usage_estimated = models.BooleanField(
        default=False, help_text="The engine sent no usage; tokens estimated."
    )
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    received_at = models.DateTimeField(help_text="When the shipper stored it in Postgres.")
    gateway = models.CharField(max_length=100, blank=True)

    class Meta:
        db_table = "billing_usage_event"
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["tenant", "started_at"], name="usage_tenant_started"),
            models.Index(fields=["public_model", "started_at"], name="usage_model_started"),
        ]

    def __str__(self) -> str:
        return f"{self.public_model} {self.status} {self.event_id}"

    @property
    def cost_usd(self) -> Decimal:
        return Decimal(self.cost_nanos) / NANOS_PER_USD

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


__all__ = ["ApiKey", "TenantLimits", "Price", "Budget", "BudgetAlert", "UsageEvent", "NANOS_PER_USD"]
