"""Usage events: what the gateway metered for each request it accepted."""

from __future__ import annotations

from decimal import Decimal

from django.db import models

from billing.models.money import NANOS_PER_USD


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
        "billing.ApiKey",
        null=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="usage_events",
    )
    public_model = models.CharField(max_length=200)
    deployment_id = models.BigIntegerField(null=True)
    deployment_slug = models.CharField(max_length=100, blank=True)
    pool = models.CharField(
        max_length=16,
        blank=True,
        default="",
        db_default="",
        help_text="The pool of the deployment that answered (long-context: isolated as a long prompt); "
        "empty when none answered or the gateway did not say.",
    )
    version_id = models.BigIntegerField(null=True)
    price = models.ForeignKey(
        "billing.Price", null=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
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
    traffic_class = models.CharField(
        max_length=16, default="standard", db_default="standard", help_text="The class it was served in."
    )
    vote_samples = models.PositiveIntegerField(
        default=0, db_default=0, help_text="A vote's samples generated (docs/voting.md); 0: not a vote."
    )
    vote_samples_saved = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="A vote's samples left unspent of its budget when it stopped early.",
    )
    cache_hit = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Answered by the semantic cache (docs/semantic-cache.md), billed at the cache price.",
    )
    saved_nanos = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="A cache hit: what the model would have cost at the online price, less what it was billed.",
    )

    class Meta:
        db_table = "billing_usage_event"
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["tenant", "started_at"], name="usage_tenant_started"),
            models.Index(fields=["public_model", "started_at"], name="usage_model_started"),
            # The cost page's money saved reads only the semantic cache's hits of a range: a partial
            # index keeps that read proportional to the hits, not to the tenant's traffic.
            models.Index(
                fields=["tenant", "started_at"], condition=models.Q(cache_hit=True), name="usage_cache_hits"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.public_model} {self.status} {self.event_id}"

    @property
    def cost_usd(self) -> Decimal:
        return Decimal(self.cost_nanos) / NANOS_PER_USD

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
