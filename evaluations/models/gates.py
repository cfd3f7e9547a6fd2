"""Gate policies (immutable versions), gate runs and gate decisions (immutable evidence)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from core.runs import Run
from evaluations.constants import EvidenceLabel, GateKind, GateMode, GateRunStatus, Verdict
from evaluations.models.append_only import APPEND_ONLY, APPEND_ONLY_KEEP_USERS
from evaluations.models.benchmarks import BenchmarkRun
from evaluations.models.evals import EvalRun


class GatePolicy(models.Model):
    """One immutable version of a model's gate policy: which gates a version needs, and their limits.

    Saving a policy adds a row with the next ``number``; the newest number is the policy in force.
    Each gate's settings are a JSON object validated by ``evaluations.services.gates`` (``required``
    plus the thresholds), judged on ``gpu_type``.
    """

    model = models.ForeignKey("catalog.Model", on_delete=models.PROTECT, related_name="gate_policies")
    number = models.PositiveIntegerField()
    gpu_type = models.ForeignKey("catalog.GpuType", on_delete=models.PROTECT, related_name="gate_policies")
    quality = models.JSONField(default=dict)
    performance = models.JSONField(default=dict)
    stability = models.JSONField(default=dict)
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model__name", "-number"]
        constraints = [models.UniqueConstraint(fields=["model", "number"], name="unique_policy_number")]
        triggers = APPEND_ONLY_KEEP_USERS

    def __str__(self) -> str:
        return f"{self.model.name} gate policy v{self.number}"

    def get_absolute_url(self) -> str:
        return reverse("gates:policy_detail", args=[self.model_id])

    def gate(self, kind: str) -> dict:
        return getattr(self, kind) or {}

    @property
    def required_kinds(self) -> list[str]:
        return [k for k in GateKind.values if self.gate(k).get("required")]


class GateRun(Run):
    """A request to run a version's gates: the job row the page polls while the gates execute.

    It ends ``done`` (every gate it ran has a decision, whatever the verdicts) or ``error``, and
    cannot be cancelled: a gate half-run is run again, never resumed.
    """

    SUCCEEDED = GateRunStatus.DONE
    FAILED = GateRunStatus.ERROR
    CANCELLED = None
    WHAT = "these gates"

    model_version = models.ForeignKey(
        "catalog.ModelVersion", on_delete=models.PROTECT, related_name="gate_runs"
    )
    policy = models.ForeignKey(GatePolicy, on_delete=models.PROTECT, related_name="runs")
    mode = models.CharField(max_length=10, choices=GateMode.choices, default=GateMode.PREDICTED)
    kinds = models.JSONField(default=list)
    # A gate run's own words for its states (its column is narrower than the other runs').
    status = models.CharField(
        max_length=8, choices=GateRunStatus.choices, default=GateRunStatus.QUEUED, db_index=True
    )

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"Gate run #{self.pk} of {self.model_version}"

    def get_absolute_url(self) -> str:
        return reverse("gates:version_gates", args=[self.model_version_id])


class GateDecision(models.Model):
    """The verdict of one gate for one version: limits, measured values, evidence. Never changes.

    PostgreSQL triggers refuse UPDATE and DELETE, so a decision an auditor exports is the one the
    promotion rule read.
    """

    gate_run = models.ForeignKey(GateRun, on_delete=models.PROTECT, related_name="decisions", null=True)
    model_version = models.ForeignKey(
        "catalog.ModelVersion", on_delete=models.PROTECT, related_name="gate_decisions"
    )
    baseline_version = models.ForeignKey(
        "catalog.ModelVersion", on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    policy = models.ForeignKey(GatePolicy, on_delete=models.PROTECT, related_name="decisions")
    gpu_type = models.ForeignKey("catalog.GpuType", on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=12, choices=GateKind.choices, db_index=True)
    verdict = models.CharField(max_length=8, choices=Verdict.choices, db_index=True)
    label = models.CharField(max_length=10, choices=EvidenceLabel.choices)
    thresholds = models.JSONField(default=dict)
    measured = models.JSONField(default=dict)
    checks = models.JSONField(default=list, help_text="[{name, limit, value, passed, detail}]")
    summary = models.TextField(blank=True)
    eval_run = models.ForeignKey(EvalRun, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    baseline_eval_run = models.ForeignKey(
        EvalRun, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    benchmark_run = models.ForeignKey(
        BenchmarkRun, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    baseline_benchmark_run = models.ForeignKey(
        BenchmarkRun, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        triggers = APPEND_ONLY

    def __str__(self) -> str:
        return f"{self.get_kind_display()} gate of {self.model_version}: {self.verdict}"

    def get_absolute_url(self) -> str:
        return reverse("gates:decision_detail", args=[self.pk])
