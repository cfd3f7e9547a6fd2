"""Usage rollups: hourly and daily aggregates of usage events, and the high-water mark that feeds them.

Pages and exports read these, never raw events: a tenant's 90-day cost page touches a few hundred
rows instead of millions of events. Latency percentiles are kept as serialized DDSketches, which
merge exactly across rows (a p95 of a week is computed from the merged sketch, never by averaging
daily p95s).
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models

from billing.models.money import NANOS_PER_USD


class UsageRollup(models.Model):
    """Requests, tokens, cost, errors and latency sketches of one bucket × tenant × model × version × key ×
    deployment × price version × traffic class.

    The price version is a dimension so that the FOCUS export can split a row into one charge per SKU
    (input tokens, output tokens) at the unit prices actually billed (ADR 0022).
    ``version_id``, ``api_key_id``, ``deployment_id`` and ``price_id`` are 0 when the event had none, so that the
    dimension tuple is a plain unique key (NULLs would make every such row distinct).
    """

    class Granularity(models.TextChoices):
        HOUR = "hour", "Hourly"
        DAY = "day", "Daily"

    granularity = models.CharField(max_length=4, choices=Granularity.choices)
    bucket_start = models.DateTimeField()
    tenant = models.ForeignKey(
        "billing.Tenant", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    public_model = models.CharField(max_length=200)
    version_id = models.BigIntegerField(default=0)
    api_key_id = models.BigIntegerField(default=0)
    deployment_id = models.BigIntegerField(default=0)
    price_id = models.BigIntegerField(
        default=0, help_text="The price version the events were billed at (0: none); FOCUS rows need it."
    )
    traffic_class = models.CharField(
        max_length=16, default="standard", db_default="standard",
        help_text="The events' traffic class (interactive, standard, sheddable): the cost page splits by it.",
    )  # fmt: skip
    requests = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0)
    ttft_sketch = models.BinaryField(null=True, help_text="DDSketch (protobuf) of TTFT in ms.")
    tpot_sketch = models.BinaryField(null=True, help_text="DDSketch (protobuf) of TPOT in ms.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "billing_usage_rollup"
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "granularity",
                    "bucket_start",
                    "tenant",
                    "public_model",
                    "version_id",
                    "api_key_id",
                    "deployment_id",
                    "price_id",
                    "traffic_class",
                ],
                name="unique_usage_rollup_bucket",
            )
        ]
        indexes = [
            models.Index(fields=["tenant", "granularity", "bucket_start"], name="rollup_tenant_bucket"),
            models.Index(fields=["granularity", "bucket_start"], name="rollup_bucket"),
        ]

    def __str__(self) -> str:
        return f"{self.granularity} {self.bucket_start:%Y-%m-%d %H:%M} {self.tenant_id} {self.public_model}"

    @property
    def cost_usd(self) -> Decimal:
        return Decimal(self.cost_nanos) / NANOS_PER_USD


class RollupCursor(models.Model):
    """The high-water mark of the rollup: every event with ``id <= last_event_id`` is in the rollups.

    Its row is locked for the whole of a batch, so two rollup workers never interleave, and it moves
    in the same transaction as the rollup rows it accounts for: a crash loses the batch and the
    cursor move together, and the next run redoes the batch exactly once.
    """

    name = models.CharField(max_length=32, primary_key=True)
    last_event_id = models.BigIntegerField(default=0)
    events_total = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "billing_rollup_cursor"

    def __str__(self) -> str:
        return f"{self.name} at event {self.last_event_id}"
