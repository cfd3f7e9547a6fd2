"""Eval suites (immutable, checksummed versions), eval runs and the result of every case."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from core.runs import Run
from evaluations.constants import EvidenceLabel
from evaluations.models.append_only import APPEND_ONLY_KEEP_USERS


class EvalSuite(models.Model):
    """A named set of eval cases (business set, long context, structured output, refusals ...).

    Its content lives in immutable ``EvalSuiteVersion`` rows; uploading again adds a version.
    """

    name = models.CharField(max_length=128, unique=True)
    description = models.TextField(blank=True)
    builtin = models.BooleanField(default=False, help_text="Generated from evalkit's built-in sets")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("gates:suite_detail", args=[self.pk])


class EvalSuiteVersion(models.Model):
    """One immutable upload of a suite: the JSONL text, what it holds, and its SHA-256."""

    suite = models.ForeignKey(EvalSuite, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    content = models.TextField(help_text="JSONL, one case per line")
    case_count = models.PositiveIntegerField()
    categories = models.JSONField(default=list)
    checksum = models.CharField("SHA-256", max_length=64)
    note = models.CharField(max_length=255, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["suite__name", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["suite", "number"], name="unique_suite_version_number"),
            models.UniqueConstraint(fields=["suite", "checksum"], name="unique_suite_version_checksum"),
        ]
        triggers = APPEND_ONLY_KEEP_USERS

    def __str__(self) -> str:
        return f"{self.suite.name} v{self.number}"

    def get_absolute_url(self) -> str:
        return reverse("gates:suite_detail", args=[self.suite_id])


class EvalRun(Run):
    """A suite version sent to one endpoint (temperature 0, fixed seed), with per-category scores.

    The row is the job record the run page polls; ``scores`` holds each category's mean and
    interval once the run ends. The label says whether the engine was real or simulated. Status,
    progress, heartbeat and times are the ``Run`` columns every kind of run shares.
    """

    WHAT = "this eval"

    suite_version = models.ForeignKey(EvalSuiteVersion, on_delete=models.PROTECT, related_name="runs")
    model_version = models.ForeignKey(
        "catalog.ModelVersion", on_delete=models.PROTECT, related_name="eval_runs", null=True, blank=True
    )
    deployment = models.ForeignKey(
        "deployments.Deployment", on_delete=models.SET_NULL, null=True, blank=True, related_name="eval_runs"
    )
    gpu_type = models.ForeignKey(
        "catalog.GpuType", on_delete=models.SET_NULL, null=True, blank=True, related_name="eval_runs"
    )
    label = models.CharField(max_length=10, choices=EvidenceLabel.choices, default=EvidenceLabel.MEASURED)
    base_url = models.CharField("base URL", max_length=500)
    model_name = models.CharField(max_length=128, help_text="The `model` sent in requests")
    seed = models.IntegerField(default=0)
    concurrency = models.PositiveSmallIntegerField(default=8)
    cases_total = models.PositiveIntegerField(default=0)
    cases_done = models.PositiveIntegerField(default=0)
    cases_failed = models.PositiveIntegerField(default=0, help_text="Requests that errored")
    scores = models.JSONField(default=dict, blank=True, help_text="Per category: mean and interval")
    snapshot = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"Eval #{self.pk} {self.suite_version} on {self.snapshot.get('target') or self.model_name}"

    def get_absolute_url(self) -> str:
        return reverse("gates:evalrun_detail", args=[self.pk])


class EvalCaseResult(models.Model):
    """One case of an eval run: what was asked, what came back, its score, latency and tokens."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="case_results")
    case_id = models.CharField(max_length=128)
    category = models.CharField(max_length=64, db_index=True)
    prompt = models.TextField(blank=True, help_text="Truncated to 2,000 characters")
    expected = models.TextField(blank=True)
    output = models.TextField(blank=True)
    score = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["run", "pk"]
        constraints = [models.UniqueConstraint(fields=["run", "case_id"], name="unique_case_per_eval_run")]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.case_id}"
