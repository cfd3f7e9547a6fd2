"""Tenant budgets and the soft-threshold alerts they raise."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from billing.models.money import NANOS_PER_USD


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
    """A soft threshold crossed, or the hard cap reached (the gateway refusing), in one period.

    Recorded once per tenant, period, kind and percent: the notification of record.
    """

    class Kind(models.TextChoices):
        THRESHOLD = "threshold", "Soft threshold crossed"
        CAP = "cap", "Hard cap reached: requests refused"

    tenant = models.ForeignKey("billing.Tenant", on_delete=models.CASCADE, related_name="budget_alerts")
    period_key = models.CharField(max_length=16)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.THRESHOLD)
    percent = models.PositiveIntegerField()
    spent_nanos = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "period_key", "kind", "percent"], name="unique_budget_alert"
            )
        ]

    def __str__(self) -> str:
        if self.kind == self.Kind.CAP:
            return f"{self.tenant} reached its hard cap in {self.period_key}: requests refused"
        return f"{self.tenant} passed {self.percent}% in {self.period_key}"

    @property
    def spent_usd(self) -> Decimal:
        return Decimal(self.spent_nanos) / NANOS_PER_USD
