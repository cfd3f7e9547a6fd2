"""Prices per million tokens, effective-dated per public model."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models


class Price(models.Model):
    """A price version for one public model; the one in force is the latest ``effective_from`` ≤ now
    of its ``kind``: "online" for requests, "batch" for the lines of a batch (docs/decisions/0036),
    "cache" for answers from the semantic cache (docs/decisions/0042)."""

    class Kind(models.TextChoices):
        ONLINE = "online", "Online"
        BATCH = "batch", "Batch"
        CACHE = "cache", "Cache hit"

    public_model = models.CharField(max_length=200, db_index=True)
    kind = models.CharField(
        max_length=8,
        choices=Kind.choices,
        default=Kind.ONLINE,
        db_default=Kind.ONLINE,
        help_text="online: requests; batch: the lines of a batch, priced from the idle capacity they use; "
        "cache: answers from the semantic cache.",
    )
    input_per_million = models.DecimalField(
        max_digits=12, decimal_places=3, validators=[MinValueValidator(Decimal("0"))]
    )
    output_per_million = models.DecimalField(
        max_digits=12, decimal_places=3, validators=[MinValueValidator(Decimal("0"))]
    )
    effective_from = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=32, default="manual", help_text="manual, or how it was derived.")
    note = models.CharField(max_length=200, blank=True)
    provenance = models.JSONField(
        default=dict,
        blank=True,
        help_text="Where a derived price came from: run, label, GPU cost version, formula and inputs.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["public_model", "-effective_from"]

    def __str__(self) -> str:
        batch = "" if self.kind == self.Kind.ONLINE else f" ({self.kind})"
        return f"{self.public_model}{batch}: ${self.input_per_million}/${self.output_per_million} per M"

    @property
    def input_nanos(self) -> int:
        """Nano-dollars per input token."""
        return int(self.input_per_million * 1000)

    @property
    def output_nanos(self) -> int:
        return int(self.output_per_million * 1000)


class Reprice(models.Model):
    """An explicit re-pricing of a past period at another price version, recorded, never applied to events.

    Usage events keep the cost they were billed at; this row states what the period costs at
    ``price`` instead (per tenant in ``by_tenant``) and the difference, for a credit or a true-up.
    """

    public_model = models.CharField(max_length=200)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    price = models.ForeignKey(Price, on_delete=models.PROTECT, related_name="reprices")
    billed_nanos = models.BigIntegerField()
    repriced_nanos = models.BigIntegerField()
    by_tenant = models.JSONField(default=list)
    reason = models.CharField(max_length=500)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"re-price of {self.public_model} {self.period_start:%Y-%m-%d}..{self.period_end:%Y-%m-%d}"

    @property
    def delta_nanos(self) -> int:
        return self.repriced_nanos - self.billed_nanos
