"""Service-level objectives per route, their live state, and the breaches they had."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from core.runs import Run


class SloKind(models.TextChoices):
    TTFT = "ttft", "Time to first token"
    TPOT = "tpot", "Time per output token"
    ERRORS = "errors", "Requests without a server error"
    ATTAINMENT = "attainment", "Requests within both latency bounds"


class SloState(models.TextChoices):
    NO_DATA = "no_data", "No data"
    OK = "ok", "OK"
    FIRING = "firing", "Burning budget"


class Slo(models.Model):
    """``target`` of a route's valid requests are good over ``period_days``: good is a first token
    within ``threshold_ms`` (TTFT), output tokens within ``threshold_ms`` each (TPOT), no 5xx
    (errors), or all of these at once (attainment, with ``tpot_threshold_ms``).

    Alerts follow the SRE workbook's multiwindow burn rates (``operations.burn``); ``window_scale``
    shrinks every window by the same factor (1 = the workbook's 1 h / 5 min, 6 h / 30 min,
    3 d / 6 h), for routes with little traffic or for rehearsals."""

    route = models.ForeignKey("deployments.ModelRoute", on_delete=models.CASCADE, related_name="slos")
    kind = models.CharField(max_length=12, choices=SloKind.choices)
    threshold_ms = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(600_000)]
    )
    tpot_threshold_ms = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(60_000)]
    )
    target = models.DecimalField(
        max_digits=7, decimal_places=5, validators=[MinValueValidator(0.5), MaxValueValidator(0.99999)]
    )
    period_days = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(90)]
    )
    window_scale = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.0001), MaxValueValidator(1.0)]
    )
    min_requests = models.PositiveIntegerField(default=10, validators=[MaxValueValidator(1_000_000)])
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Live state, written by the evaluator (operational, not a governed change).
    state = models.CharField(max_length=10, choices=SloState.choices, default=SloState.NO_DATA)
    evaluated_at = models.DateTimeField(null=True, blank=True)
    last = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["route_id", "kind", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["route", "kind", "threshold_ms", "target"], name="operations_slo_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.route}: {self.objective}"

    @property
    def objective(self) -> str:
        pct = f"{float(self.target) * 100:g} %"
        if self.kind == SloKind.TTFT:
            return f"{pct} of requests: first token ≤ {self.threshold_ms:g} ms"
        if self.kind == SloKind.TPOT:
            return f"{pct} of streamed requests: ≤ {self.threshold_ms:g} ms per output token"
        if self.kind == SloKind.ERRORS:
            return f"{pct} of requests without a server error"
        tpot = f", ≤ {self.tpot_threshold_ms:g} ms per token" if self.tpot_threshold_ms else ""
        return f"{pct} of requests succeed with first token ≤ {self.threshold_ms:g} ms{tpot}"


class SloBreach(models.Model):
    """A stretch of time during which an SLO's alert condition held."""

    slo = models.ForeignKey(Slo, on_delete=models.CASCADE, related_name="breaches")
    severity = models.CharField(max_length=10)  # "page" or "ticket"
    condition = models.CharField(max_length=20)  # "fast", "slow", "ticket"
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    peak_burn = models.FloatField(default=0.0)
    evidence = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["slo"], condition=models.Q(ended_at__isnull=True), name="operations_one_open_breach"
            )
        ]

    def __str__(self) -> str:
        return f"{self.slo} {self.severity} from {self.started_at:%Y-%m-%d %H:%M}"


class Incident(models.Model):
    """A route in trouble: opened by its first SLO breach, joined by the breaches that follow while
    it is open (one open incident per route), resolved when none of its SLOs is breaching."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        RESOLVED = "resolved", "Resolved"

    route = models.ForeignKey("deployments.ModelRoute", on_delete=models.CASCADE, related_name="incidents")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    severity = models.CharField(max_length=10)  # "page" or "ticket" (the worst breach)
    title = models.CharField(max_length=300)
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    rehearsal = models.BooleanField(default=False)
    diagnosis = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["route"],
                condition=models.Q(status="open"),
                name="operations_one_open_incident_per_route",
            )
        ]

    def __str__(self) -> str:
        return self.title


class IncidentEntry(models.Model):
    """One line of an incident's timeline."""

    class Kind(models.TextChoices):
        BREACH = "breach", "SLO breach"
        RECOVERY = "recovery", "SLO recovered"
        DIAGNOSIS = "diagnosis", "Diagnosis"
        ACTION = "action", "Action"
        NOTE = "note", "Note"
        RESOLVED = "resolved", "Resolved"

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="entries")
    at = models.DateTimeField()
    kind = models.CharField(max_length=12, choices=Kind.choices)
    text = models.CharField(max_length=1000)
    data = models.JSONField(default=dict, blank=True)
    # The event that wrote it, so a reaction that runs twice writes it once.
    source = models.CharField(max_length=120, blank=True)

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["incident", "source"], condition=~models.Q(source=""), name="operations_entry_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.at:%H:%M:%S} {self.kind}: {self.text[:60]}"


class EngineSample(models.Model):
    """What a deployment's engine said on its ``/metrics`` at one moment (operations.engine_metrics)."""

    deployment = models.ForeignKey("deployments.Deployment", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(db_index=True)
    values = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["deployment", "at"], name="operations_sample_dep_at")]

    def __str__(self) -> str:
        return f"{self.deployment_id} at {self.at:%H:%M:%S}"


class PlaybookMode(models.TextChoices):
    SUGGEST = "suggest", "Suggest only"
    APPROVE = "approve", "Apply after an on-call's approval"
    AUTO = "auto", "Apply automatically within limits"


class PlaybookPolicy(models.Model):
    """How far a route's playbook may go on its own: the mode, the time box of each action, how
    long the SLOs must hold before an action is undone, and the limits actions stay within."""

    route = models.OneToOneField(
        "deployments.ModelRoute", on_delete=models.CASCADE, related_name="playbook_policy"
    )
    mode = models.CharField(max_length=10, choices=PlaybookMode.choices, default=PlaybookMode.SUGGEST)
    actions = models.JSONField(default=list, blank=True, help_text="Allowed action kinds; empty allows all.")
    time_box_minutes = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(24 * 60)]
    )
    hold_minutes = models.PositiveIntegerField(
        default=10, validators=[MinValueValidator(1), MaxValueValidator(24 * 60)]
    )
    min_rpm = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1)])
    min_input_tokens = models.PositiveIntegerField(default=1024, validators=[MinValueValidator(1)])
    min_output_tokens = models.PositiveIntegerField(default=256, validators=[MinValueValidator(1)])
    max_extra_replicas = models.PositiveIntegerField(default=1, validators=[MaxValueValidator(16)])
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"playbook of {self.route}"


class Mitigation(models.Model):
    """One playbook action for an incident: proposed, then applied (by an approval or automatically)
    through the audited services, and reverted when the SLOs held again or its time box ended."""

    class State(models.TextChoices):
        PROPOSED = "proposed", "Proposed"
        APPLIED = "applied", "Applied"
        REVERTED = "reverted", "Reverted"
        REJECTED = "rejected", "Rejected"
        FAILED = "failed", "Failed"

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="mitigations")
    kind = models.CharField(max_length=24)
    params = models.JSONField(default=dict)
    undo = models.JSONField(default=dict, blank=True)
    summary = models.CharField(max_length=300)
    why = models.CharField(max_length=300, blank=True)
    mode = models.CharField(max_length=10, choices=PlaybookMode.choices)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PROPOSED)
    proposed_at = models.DateTimeField()
    applied_at = models.DateTimeField(null=True, blank=True)
    applied_by = models.CharField(max_length=150, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    extended_by = models.CharField(max_length=150, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.CharField(max_length=150, blank=True)
    outcome = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["proposed_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["incident", "kind", "params"], name="operations_mitigation_once")
        ]

    def __str__(self) -> str:
        return self.summary


class RehearsalRun(Run):
    """An incident rehearsal an admin started from the console: one of the eight causes produced on
    purpose on a route of simulated deployments made for it (``deployments`` marks them, so nothing
    deploys or serves them), in virtual time, with the platform's SLOs, incidents, diagnosis and
    playbook acting for real. ``result`` is what ``operations.rehearsals.rehearsal_run`` returned."""

    WHAT = "this rehearsal"

    class Mode(models.TextChoices):
        AUTO = "auto", "Apply the playbook's actions automatically"
        SUGGEST = "suggest", "Only suggest actions"

    scenario = models.CharField(max_length=40)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.AUTO)
    # Virtual seconds: steady traffic until the fault, the fault, and the rest of the rehearsal.
    fault_at_s = models.PositiveIntegerField(default=300)
    fault_for_s = models.PositiveIntegerField(default=240)
    virtual_s = models.PositiveIntegerField(default=900)
    route = models.ForeignKey(
        "deployments.ModelRoute", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    incident = models.ForeignKey(Incident, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"rehearsal #{self.pk} {self.scenario}"
