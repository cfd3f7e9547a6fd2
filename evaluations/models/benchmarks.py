"""Benchmark runs: what was measured (or predicted), against what, under which SLA, and the report."""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.core.validators import MaxValueValidator
from django.db import models
from django.urls import reverse

from evaluations.constants import (
    ACTIVE_STATUSES,
    Api,
    EvidenceLabel,
    GateKind,
    GateMode,
    GateRunStatus,
    RunKind,
    RunMode,
    RunStatus,
    TargetKind,
    Verdict,
)

# Rows that are evidence: the database itself refuses to change or delete them (not only the ORM).
_APPEND_ONLY = [
    pgtrigger.Protect(name="append_only", operation=pgtrigger.Update | pgtrigger.Delete),
]
# The same, except for the creator FK that Django sets to NULL when that user is deleted.
_APPEND_ONLY_KEEP_USERS = [
    pgtrigger.Protect(name="append_only_delete", operation=pgtrigger.Delete),
    pgtrigger.Protect(
        name="append_only_update",
        operation=pgtrigger.Update,
        condition=pgtrigger.AnyChange(exclude=["created_by"]),
    ),
]


class BenchmarkRun(models.Model):
    """One benchmark: a workload sent to a target (or simulated), its progress, and its report.

    The row is the job record the console polls (status, progress, message) and the report
    (``results``, ``series``). What was under test is copied into ``snapshot`` when the run is
    created (model version, precision, framework, GPU type and count, parallelism, $/GPU-hour), so
    a report still says what it measured after the deployment or the catalog changed.
    """

    name = models.CharField(max_length=128, blank=True)
    kind = models.CharField(max_length=10, choices=RunKind.choices, default=RunKind.MEASURED)
    mode = models.CharField(max_length=8, choices=RunMode.choices, default=RunMode.SINGLE)
    status = models.CharField(
        max_length=10, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True
    )
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    progress_message = models.CharField(max_length=255, blank=True)
    error = models.TextField(blank=True)

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

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # Written every second while a run executes: a running row whose heartbeat stopped lost its worker.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    task_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.name or f"Benchmark #{self.pk}"

    def get_absolute_url(self) -> str:
        return reverse("evaluations:run_detail", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

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

    @property
    def duration_s(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


# --- eval suites and runs ---------------------------------------------------------------------------


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
        triggers = _APPEND_ONLY_KEEP_USERS

    def __str__(self) -> str:
        return f"{self.suite.name} v{self.number}"

    def get_absolute_url(self) -> str:
        return reverse("gates:suite_detail", args=[self.suite_id])


class EvalRun(models.Model):
    """A suite version sent to one endpoint (temperature 0, fixed seed), with per-category scores.

    The row is the job record the run page polls; ``scores`` holds each category's mean and
    interval once the run ends. The label says whether the engine was real or simulated.
    """

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
    status = models.CharField(
        max_length=10, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True
    )
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    progress_message = models.CharField(max_length=255, blank=True)
    error = models.TextField(blank=True)
    base_url = models.CharField("base URL", max_length=500)
    model_name = models.CharField(max_length=128, help_text="The `model` sent in requests")
    seed = models.IntegerField(default=0)
    concurrency = models.PositiveSmallIntegerField(default=8)
    cases_total = models.PositiveIntegerField(default=0)
    cases_done = models.PositiveIntegerField(default=0)
    cases_failed = models.PositiveIntegerField(default=0, help_text="Requests that errored")
    scores = models.JSONField(default=dict, blank=True, help_text="Per category: mean and interval")
    snapshot = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    task_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"Eval #{self.pk} {self.suite_version} on {self.snapshot.get('target') or self.model_name}"

    def get_absolute_url(self) -> str:
        return reverse("gates:evalrun_detail", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES


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


# --- gate policies, gate runs and decisions ----------------------------------------------------------


class GatePolicy(models.Model):
    """One immutable version of a model's gate policy: which gates a version needs, and their limits.

    Saving a policy adds a row with the next ``number``; the newest number is the policy in force.
    Each gate's settings are a JSON object validated by ``evaluations.gates.policy`` (``required``
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
        triggers = _APPEND_ONLY_KEEP_USERS

    def __str__(self) -> str:
        return f"{self.model.name} gate policy v{self.number}"

    def get_absolute_url(self) -> str:
        return reverse("gates:policy_detail", args=[self.model_id])

    def gate(self, kind: str) -> dict:
        return getattr(self, kind) or {}

    @property
    def required_kinds(self) -> list[str]:
        return [k for k in GateKind.values if self.gate(k).get("required")]


class GateRun(models.Model):
    """A request to run a version's gates: the job row the page polls while the gates execute."""

    model_version = models.ForeignKey(
        "catalog.ModelVersion", on_delete=models.PROTECT, related_name="gate_runs"
    )
    policy = models.ForeignKey(GatePolicy, on_delete=models.PROTECT, related_name="runs")
    mode = models.CharField(max_length=10, choices=GateMode.choices, default=GateMode.PREDICTED)
    kinds = models.JSONField(default=list)
    status = models.CharField(
        max_length=8, choices=GateRunStatus.choices, default=GateRunStatus.QUEUED, db_index=True
    )
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    progress_message = models.CharField(max_length=255, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # Written every few seconds while the gates execute: silence means the worker died.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    task_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"Gate run #{self.pk} of {self.model_version}"

    def get_absolute_url(self) -> str:
        return reverse("gates:version_gates", args=[self.model_version_id])

    @property
    def is_active(self) -> bool:
        return self.status in (GateRunStatus.QUEUED, GateRunStatus.RUNNING)


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
        triggers = _APPEND_ONLY

    def __str__(self) -> str:
        return f"{self.get_kind_display()} gate of {self.model_version}: {self.verdict}"

    def get_absolute_url(self) -> str:
        return reverse("gates:decision_detail", args=[self.pk])


class CapacityPlan(models.Model):
    """A saved capacity plan: the traffic and SLA asked for, the candidates compared, and the answer.

    ``rows`` holds one result per candidate (model version × GPU type × tensor parallel): per-GPU
    goodput (measured where a matching run exists, else predicted by the simulator, labelled),
    GPUs and replicas needed, and the monthly cost. Shared by its ``token`` URL.
    """

    token = models.UUIDField(unique=True, editable=False)
    name = models.CharField(max_length=128)
    inputs = models.JSONField(help_text="peak QPS, length distributions, SLA, redundancy")
    candidates = models.JSONField(help_text="[{model_version_id, gpu_type_id, tensor_parallel}]")
    rows = models.JSONField(default=list)
    status = models.CharField(max_length=10, default="queued", help_text="queued, running, done or failed")
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_active(self) -> bool:
        return self.status in ("queued", "running")


class SimulatorCalibration(models.Model):
    """Simulator efficiencies fitted on measured load levels of one GPU type, and the error they
    showed on levels left out of the fit. Predicted runs and planner rows on that GPU type use the
    newest one and carry its interval; an imported calibration never changes.

    ``interval_pct`` is ``{"ttft": [lo, hi] | None, "tpot": [lo, hi] | None}``: the smallest and
    largest ``(measured − predicted) / predicted`` of the medians on held-out levels, in percent, so
    a predicted median ``p`` comes with ``[p · (1 + lo/100), p · (1 + hi/100)]``. Empty when the fit
    was judged in-sample only (no level was held out): such a calibration gives no interval.
    """

    gpu_type = models.ForeignKey(
        "catalog.GpuType", on_delete=models.PROTECT, related_name="simulator_calibrations"
    )
    efficiency = models.JSONField(help_text="engines.perf.Efficiency fields")
    interval_pct = models.JSONField(default=dict, blank=True)
    evaluation = models.CharField(max_length=10, help_text="held-out or in-sample")
    fit_levels = models.JSONField(default=list, blank=True)
    held_out = models.JSONField(default=list, blank=True, help_text="Per level: measured vs predicted")
    ttft_err_pct = models.FloatField(null=True, blank=True, help_text="Worst held-out median error")
    tpot_err_pct = models.FloatField(null=True, blank=True, help_text="Worst held-out median error")
    device = models.JSONField(
        default=dict, blank=True, help_text="engines.device record of what was measured; empty: not recorded"
    )
    calibrated_range = models.JSONField(
        default=dict,
        blank=True,
        help_text="{input_len|output_len|concurrency|rate: [low, high]} of the points",
    )
    source = models.CharField(max_length=300, blank=True)
    measured_at = models.CharField(max_length=40, blank=True)
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        triggers = _APPEND_ONLY_KEEP_USERS

    def __str__(self) -> str:
        return f"simulator calibration #{self.pk} ({self.gpu_type.name}, {self.evaluation})"
