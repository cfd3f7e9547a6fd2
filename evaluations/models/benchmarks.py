"""Benchmark runs: what was measured (or predicted), against what, under which SLA, and the report."""

from __future__ import annotations

from django.db import models
from django.urls import reverse

from core.runs import Run
from evaluations.constants import Api, RunKind, RunMode, TargetKind


class BenchmarkRun(Run):
    """One benchmark: a workload sent to a target (or simulated), its progress, and its report.

    The row is the job record the console polls (status, progress, message) and the report
    (``results``, ``series``). What was under test is copied into ``snapshot`` when the run is
    created (model version, precision, framework, GPU type and count, parallelism, $/GPU-hour), so
    a report still says what it measured after the deployment or the catalog changed. Status,
    progress, heartbeat and times are the ``Run`` columns every kind of run shares.
    """

    WHAT = "this benchmark"

    name = models.CharField(max_length=128, blank=True)
    kind = models.CharField(max_length=10, choices=RunKind.choices, default=RunKind.MEASURED)
    mode = models.CharField(max_length=8, choices=RunMode.choices, default=RunMode.SINGLE)
    # Target. A measured run needs a deployment, the gateway or a URL; a predicted run a spec
    # (from a deployment or from the version + GPU type fields below).
    target_kind = models.CharField(max_length=10, choices=TargetKind.choices, default=TargetKind.DEPLOYMENT)
    deployment = models.ForeignKey(
        "deployments.Deployment",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="benchmark_runs",
    )
    base_url = models.CharField(
        "base URL", max_length=500, blank=True, help_text="OpenAI base URL ending in /v1"
    )
    model_name = models.CharField(max_length=128, blank=True, help_text="The `model` sent in requests")
    api = models.CharField(max_length=12, choices=Api.choices, default=Api.COMPLETIONS)
    model_version = models.ForeignKey(
        "catalog.ModelVersion",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="benchmark_runs",
    )
    gpu_type = models.ForeignKey(
        "catalog.GpuType", on_delete=models.SET_NULL, null=True, blank=True, related_name="benchmark_runs"
    )
    snapshot = models.JSONField(default=dict, blank=True, help_text="What was under test, at creation time")

    # What was sent.
    workload = models.JSONField(default=dict, help_text="engines.workload.Workload.to_dict()")
    sampling = models.JSONField(default=dict, blank=True)
    sla = models.JSONField(default=dict)
    ladder = models.JSONField(default=list, blank=True, help_text="Rates (or concurrencies) of a ladder run")
    sweep = models.JSONField(default=dict, blank=True, help_text="Sweep bounds and target attainment")
    stage = models.JSONField(
        default=dict, blank=True, help_text="Duration / request count / warm-up per stage"
    )

    # Report.
    results = models.JSONField(default=dict, blank=True)
    series = models.JSONField(default=list, blank=True, help_text="Engine /metrics samples over time")
    # Headline figures, copied out of ``results`` so list pages sort and show them without the JSON.
    capacity_rps = models.FloatField("capacity goodput (req/s)", null=True, blank=True)
    token_goodput = models.FloatField("token goodput (tok/s)", null=True, blank=True)
    attainment = models.FloatField(null=True, blank=True)
    usd_per_mtok = models.FloatField("$ / M output tokens", null=True, blank=True)
    client_bound = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.name or f"Benchmark #{self.pk}"

    def get_absolute_url(self) -> str:
        return reverse("evaluations:run_detail", args=[self.pk])

    @property
    def is_predicted(self) -> bool:
        return self.kind == RunKind.PREDICTED

    @property
    def target_label(self) -> str:
        if self.kind == RunKind.PREDICTED:
            s = self.snapshot
            return f"{s.get('model', '?')} on {s.get('gpus', '?')} × {s.get('gpu_type') or 'GPU'} (spec)"
        if self.target_kind == TargetKind.DEPLOYMENT:
            return self.snapshot.get("deployment") or (
                str(self.deployment) if self.deployment_id else "deployment"
            )
        if self.target_kind == TargetKind.GATEWAY:
            return f"gateway ({self.model_name})"
        return self.base_url
