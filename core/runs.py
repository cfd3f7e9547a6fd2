"""What every kind of run shares: the job record a worker claims, reports on and leaves final.

Benchmark, eval, gate and planner runs are rows that the console polls while a worker does long
work. Their status, progress, error, heartbeat and timestamps are the same columns with the same
meaning, declared once here and moved only by ``core.lifecycle`` (ADR 0027). A kind of run
that words a state differently says so in its class attributes (a gate run ends ``done`` or
``error``), and one that lacks a column removes that field with ``= None`` (a capacity plan has no
heartbeat): the lifecycle writes only the columns a model has, so no table changed shape.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Run(models.Model):
    """Abstract: the job record of one long piece of work (status, progress, heartbeat, times)."""

    # How this kind of run words each state, and how the reaper names it when its worker died.
    QUEUED: str = RunStatus.QUEUED
    RUNNING: str = RunStatus.RUNNING
    SUCCEEDED: str = RunStatus.SUCCEEDED
    FAILED: str = RunStatus.FAILED
    CANCELLED: str | None = RunStatus.CANCELLED  # None: this kind of run cannot be cancelled
    WHAT = "this run"
    # This much silence from a running run's heartbeat means no worker has it (a live run beats at
    # least every few seconds).
    STALE_AFTER_S = 120.0

    status = models.CharField(
        max_length=10, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True
    )
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    progress_message = models.CharField(max_length=255, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # Written every few seconds while a worker executes the run: silence means the worker died.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    task_id = models.CharField(max_length=64, blank=True)

    class Meta:
        abstract = True

    @property
    def is_active(self) -> bool:
        return self.status in (self.QUEUED, self.RUNNING)

    @property
    def duration_s(self) -> float | None:
        started, finished = getattr(self, "started_at", None), getattr(self, "finished_at", None)
        if started and finished:
            return (finished - started).total_seconds()
        return None
