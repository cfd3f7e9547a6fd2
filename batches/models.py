"""Files, batches and their lines: the OpenAI Batch API's objects, kept in Postgres.

A batch's progress lives on its lines (one row each), so a runner killed anywhere loses nothing:
each line is pending, held by a runner until its lease ends, or finished with its answer or error.
"""

from __future__ import annotations

import secrets

from django.db import models

from batches import constants as c


def file_id() -> str:
    return "file-" + secrets.token_hex(12)


def batch_id() -> str:
    return "batch_" + secrets.token_hex(12)


class BatchFile(models.Model):
    """An uploaded JSONL input file (purpose ``batch``) or a batch's output or error file
    (``batch_output``). The bytes are kept in the row: they are small next to what they cost to run,
    and every worker reads them without a shared disk."""

    id = models.CharField(primary_key=True, max_length=40, default=file_id, editable=False)
    tenant = models.ForeignKey("billing.Tenant", on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey("billing.ApiKey", null=True, on_delete=models.SET_NULL, related_name="+")
    purpose = models.CharField(max_length=16, choices=[(p, p) for p in c.PURPOSES])
    filename = models.CharField(max_length=255)
    bytes = models.BigIntegerField()
    content = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.id} ({self.filename})"


class Batch(models.Model):
    """One batch: a JSONL file of requests run as sheddable traffic through the gateway."""

    id = models.CharField(primary_key=True, max_length=40, default=batch_id, editable=False)
    tenant = models.ForeignKey("billing.Tenant", on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey("billing.ApiKey", null=True, on_delete=models.SET_NULL, related_name="+")
    endpoint = models.CharField(max_length=40)
    model = models.CharField(max_length=200, help_text="The public model every line asks for.")
    input_file = models.ForeignKey(BatchFile, on_delete=models.PROTECT, related_name="+")
    output_file = models.ForeignKey(BatchFile, null=True, on_delete=models.SET_NULL, related_name="+")
    error_file = models.ForeignKey(BatchFile, null=True, on_delete=models.SET_NULL, related_name="+")
    completion_window = models.CharField(max_length=8, default="24h")
    status = models.CharField(max_length=16, choices=[(s, s) for s in c.STATUSES], default=c.VALIDATING)
    metadata = models.JSONField(null=True, blank=True)
    errors = models.JSONField(null=True, blank=True, help_text="Why the whole batch failed, if it did.")
    total = models.IntegerField(default=0)
    completed = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    in_progress_at = models.DateTimeField(null=True)
    finalizing_at = models.DateTimeField(null=True)
    completed_at = models.DateTimeField(null=True)
    failed_at = models.DateTimeField(null=True)
    expires_at = models.DateTimeField()
    expired_at = models.DateTimeField(null=True)
    cancelling_at = models.DateTimeField(null=True)
    cancelled_at = models.DateTimeField(null=True)
    heartbeat_at = models.DateTimeField(null=True, help_text="When a runner last worked on it.")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "created_at"], name="batch_tenant_created")]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in c.ACTIVE

    @property
    def percent_done(self) -> int:
        return int(100 * (self.completed + self.failed) / self.total) if self.total else 0


class BatchLine(models.Model):
    """One request of a batch, numbered from 1 as in the input file.

    A line that could not be read is created ``failed`` with its error; the others are ``pending``
    until a runner takes one (``running`` until ``lease_until``) and records its answer."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="lines")
    line_no = models.IntegerField()
    custom_id = models.CharField(max_length=512, blank=True)
    body = models.JSONField(null=True)
    status = models.CharField(
        max_length=12, choices=[(s, s) for s in c.LINE_STATUSES], default=c.LINE_PENDING
    )
    attempts = models.IntegerField(default=0)
    lease_token = models.CharField(max_length=32, blank=True)
    lease_until = models.DateTimeField(null=True)
    next_attempt_at = models.DateTimeField(null=True)
    response = models.JSONField(null=True, help_text="status_code, request_id and body of the answer.")
    error = models.JSONField(null=True, help_text="code, message and line of a failure.")
    finished_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["batch", "line_no"]
        constraints = [models.UniqueConstraint(fields=["batch", "line_no"], name="batch_line_unique")]
        indexes = [models.Index(fields=["batch", "status", "line_no"], name="batch_line_status")]

    def __str__(self) -> str:
        return f"{self.batch_id} line {self.line_no} ({self.status})"
