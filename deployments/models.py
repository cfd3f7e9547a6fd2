"""Deployments: what should run on Ray Serve, what Ray says is running, and the routing table.

A ``Deployment`` row is the desired state an admin edits; the reconciler
(``deployments.reconciler``) compiles every desired deployment into one Ray Serve config, sends it
whole, and writes what Ray reports back onto the same row (the ``status*`` and ``ray_*`` fields).
"""

from __future__ import annotations

import math

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.urls import reverse

from catalog.constants import KvCacheDtype
from deployments.constants import (
    MAX_REPLICAS,
    TENSOR_PARALLEL_SIZES,
    AnalysisVerdict,
    DesiredState,
    EngineKind,
    EventKind,
    Pool,
    Quantization,
    RolloutOutcome,
    RolloutPhase,
    ScalingMode,
    Status,
    Task,
)

# Ray application names and route prefixes are built from the slug, so keep it URL- and Ray-safe.
slug_validator = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$",
    "Lowercase letters, digits and dashes; starts and ends with a letter or digit; at most 48 characters.",
)
public_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$",
    "Letters, digits and . _ : / -, starting with a letter or digit (what clients send as `model`).",
)


# Ray Serve's autoscaling target per replica when a deployment asks for one from its measured
# capacity (target_ongoing_requests = 0) before it has one; and the share of that capacity it aims at,
# so replicas are added before the admission limit starts queueing requests.
DEFAULT_TARGET_ONGOING = 32
TARGET_SHARE_OF_CAPACITY = 0.8
# Ray Serve's autoscaling delays and look-back window, with Ray's own defaults
# (``ray.serve.config.AutoscalingConfig``) written out: the compiled config then says what Ray does,
# and a Ray upgrade that moves a default changes nothing here unseen (ADR 0038).
DEFAULT_UPSCALE_DELAY_S = 30.0
DEFAULT_DOWNSCALE_DELAY_S = 600.0
DEFAULT_LOOK_BACK_PERIOD_S = 30.0
MAX_UPSCALE_DELAY_S = 3600.0
MAX_DOWNSCALE_DELAY_S = 86400.0
MAX_LOOK_BACK_PERIOD_S = 3600.0


class DeploymentQuerySet(models.QuerySet):
    def live(self) -> DeploymentQuerySet:
        """Not deleted (deleted rows stay for their event timeline), and not a rehearsal's (those
        exist only in an incident rehearsal's simulation: nothing deploys, lists or routes them)."""
        return self.filter(deleted_at__isnull=True, rehearsal=False)

    def desired_running(self) -> DeploymentQuerySet:
        return self.live().filter(desired_state=DesiredState.RUNNING)


class Deployment(models.Model):
    """One model version served by one Ray Serve application under ``/d/<slug>``.

    Desired state (edited by admins) and observed state (written by the reconciler only) live on
    the same row so the list page is one query. Deleting is soft: the row keeps its events and
    ``deleted_at`` takes it out of the Serve config.
    """

    name = models.CharField(max_length=128)
    slug = models.CharField(
        max_length=48, validators=[slug_validator], help_text="Ray app name and route /d/<slug>"
    )
    model_version = models.ForeignKey(
        "catalog.ModelVersion", on_delete=models.PROTECT, related_name="deployments"
    )
    engine_kind = models.CharField(max_length=12, choices=EngineKind.choices, default=EngineKind.SIMULATED)
    gpu_type = models.ForeignKey(
        "catalog.GpuType",
        on_delete=models.PROTECT,
        related_name="deployments",
        null=True,
        blank=True,
        help_text="Required for vLLM and simulated engines; vLLM on CPU hosts needs none.",
    )
    tensor_parallel_size = models.PositiveSmallIntegerField(
        "GPUs per replica (tensor parallel)",
        default=1,
        choices=[(n, str(n)) for n in TENSOR_PARALLEL_SIZES],
    )
    pool = models.CharField(max_length=16, choices=Pool.choices, default=Pool.ONLINE)
    served_model_name = models.CharField(
        max_length=128,
        blank=True,
        help_text="The `model` name the engine answers to; defaults to the catalog model's name.",
    )
    # Replicas.
    scaling_mode = models.CharField(max_length=12, choices=ScalingMode.choices, default=ScalingMode.FIXED)
    num_replicas = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_REPLICAS)]
    )
    min_replicas = models.PositiveSmallIntegerField(default=1, validators=[MaxValueValidator(MAX_REPLICAS)])
    max_replicas = models.PositiveSmallIntegerField(
        default=2, validators=[MinValueValidator(1), MaxValueValidator(MAX_REPLICAS)]
    )
    target_ongoing_requests = models.PositiveIntegerField(
        default=32,
        validators=[MinValueValidator(0)],
        help_text="Autoscaling target per replica; 0: 80 % of its measured capacity per replica "
        f"(the admission limit's basis), {DEFAULT_TARGET_ONGOING} before a capacity benchmark",
    )
    upscale_delay_s = models.FloatField(
        default=DEFAULT_UPSCALE_DELAY_S,
        validators=[MinValueValidator(0.0), MaxValueValidator(MAX_UPSCALE_DELAY_S)],
        help_text="Autoscaling: how long Ray sees more load than the target before it adds replicas.",
    )
    downscale_delay_s = models.FloatField(
        default=DEFAULT_DOWNSCALE_DELAY_S,
        validators=[MinValueValidator(0.0), MaxValueValidator(MAX_DOWNSCALE_DELAY_S)],
        help_text="Autoscaling: how long Ray sees less load before it removes replicas (an engine's "
        "cold start is slow, so this is long by default).",
    )
    look_back_period_s = models.FloatField(
        default=DEFAULT_LOOK_BACK_PERIOD_S,
        validators=[MinValueValidator(1.0), MaxValueValidator(MAX_LOOK_BACK_PERIOD_S)],
        help_text="Autoscaling: the window over which Ray averages the requests in flight.",
    )
    task = models.CharField(
        max_length=12,
        choices=Task.choices,
        default=Task.GENERATE,
        help_text="Generate text, or embed (vLLM's pooling runner); the gateway routes each endpoint to the task that serves it.",
    )
    # Engine arguments (names as in `vllm serve`).
    max_model_len = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(16)], help_text="Empty: the model's context"
    )
    max_num_seqs = models.PositiveIntegerField(default=256, validators=[MinValueValidator(1)])
    max_num_batched_tokens = models.PositiveIntegerField(default=8192, validators=[MinValueValidator(1)])
    gpu_memory_utilization = models.FloatField(
        default=0.9, validators=[MinValueValidator(0.05), MaxValueValidator(1.0)]
    )
    enable_prefix_caching = models.BooleanField(default=True)
    quantization = models.CharField(max_length=24, choices=Quantization.choices, default="", blank=True)
    kv_cache_dtype = models.CharField(max_length=12, choices=KvCacheDtype.choices, default=KvCacheDtype.AUTO)
    extra_engine_args = models.JSONField(
        default=dict,
        blank=True,
        help_text="More engine arguments passed through unchanged (a JSON object).",
    )
    import_path_override = models.CharField(
        max_length=200,
        blank=True,
        help_text="Advanced: serve with your own Ray Serve builder (module:function) instead of the engine's.",
    )
    time_scale = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0.0)],
        help_text="Simulated engines only: 1 = real time, 0 = no sleeping",
    )
    faults = models.JSONField(
        default=dict,
        blank=True,
        help_text="Simulated engines only: injected faults (engines.faults): ttft_extra_ms, "
        "decode_slowdown, error_rate. Empty = none.",
    )
    desired_state = models.CharField(max_length=8, choices=DesiredState.choices, default=DesiredState.RUNNING)
    # Admission control (gateway.admission): requests the gateways send it at once, over all replicas.
    max_inflight = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100_000)],
        help_text="Requests the gateways send it at once; beyond, they queue by traffic class and shed "
        "sheddable first. Empty: its measured capacity (the concurrency at which its SLA held in its "
        "latest measured capacity benchmark, per replica, times the replicas running), or no limit before one.",
    )
    # Per replica: the capacity benchmark's in-flight figure over the replicas it ran on.
    capacity_inflight = models.PositiveIntegerField(null=True, blank=True, editable=False)
    capacity_run_id = models.BigIntegerField(null=True, blank=True, editable=False)

    # Observed state, written by the reconciler.
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    status_message = models.TextField(blank=True)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    running_replicas = models.PositiveSmallIntegerField(default=0)
    ray_app_status = models.CharField(max_length=16, blank=True)
    ray_deployments = models.JSONField(
        default=list, blank=True, help_text="Ray's deployments and replicas of this app, as last seen"
    )

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Made by an incident rehearsal (``operations.rehearsals``): simulated in virtual time, never
    # compiled into the Serve config, observed, listed or published to the gateway.
    rehearsal = models.BooleanField(default=False, editable=False)

    objects = DeploymentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["slug"], condition=Q(deleted_at__isnull=True), name="unique_live_deployment_slug"
            ),
            models.CheckConstraint(
                condition=Q(min_replicas__lte=models.F("max_replicas")), name="deployment_min_le_max_replicas"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("deployments:detail", args=[self.pk])

    @property
    def autoscaling_target(self) -> int:
        """Ray Serve's ``target_ongoing_requests``: the operator's, or (0) 80 % of the measured
        capacity per replica, so Ray adds a replica before the gateways start queueing."""
        if self.target_ongoing_requests:
            return self.target_ongoing_requests
        return self.measured_target or DEFAULT_TARGET_ONGOING

    @property
    def measured_target(self) -> int | None:
        """80 % of the measured capacity per replica, or None before a capacity benchmark."""
        if self.capacity_inflight:
            return max(1, int(self.capacity_inflight * TARGET_SHARE_OF_CAPACITY))
        return None

    @property
    def admission_limit(self) -> int | None:
        """The in-flight limit the gateways apply: the operator's, else the measured capacity per
        replica times the replicas Ray last reported running (at least one), so the limit follows an
        autoscaled deployment up and a lost replica down."""
        if self.max_inflight:
            return self.max_inflight
        if self.capacity_inflight:
            return self.capacity_inflight * max(self.running_replicas or 0, 1)
        return None

    @property
    def display_status(self) -> str:
        """The status the console may claim now: one Ray reported before this platform started
        (``settings.PLATFORM_STARTED_AT``) is stale, so it reads UNKNOWN until the reconciler has
        heard from Ray again. Statuses the console sets itself (pending, stopped, deleted) stand."""
        if self.status in (Status.PENDING, Status.STOPPED, Status.DELETED, Status.UNKNOWN):
            return self.status
        started = getattr(settings, "PLATFORM_STARTED_AT", None)
        if self.observed_at is None or (started is not None and self.observed_at.timestamp() < started):
            return Status.UNKNOWN
        return self.status

    @property
    def app_name(self) -> str:
        """The Ray Serve application name."""
        return self.slug

    @property
    def route_prefix(self) -> str:
        return f"/d/{self.slug}"

    @property
    def openai_base_url(self) -> str:
        """Where the OpenAI API of this deployment answers through Ray Serve's HTTP proxy."""
        return settings.RAY_SERVE_URL.rstrip("/") + self.route_prefix + "/v1"

    @property
    def effective_served_model_name(self) -> str:
        return self.served_model_name or self.model_version.model.name

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size if self.engine_kind != EngineKind.VLLM_CPU else 0

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.engine_kind in (EngineKind.VLLM, EngineKind.SIMULATED) and not self.gpu_type_id:
            errors["gpu_type"] = "vLLM and simulated engines need a GPU type."
        if (
            self.min_replicas is not None
            and self.max_replicas is not None
            and self.min_replicas > self.max_replicas
        ):
            # Checked in either mode: the database refuses it too (deployment_min_le_max_replicas).
            errors["min_replicas"] = (
                f"The minimum ({self.min_replicas} replicas) is above the maximum ({self.max_replicas}): "
                "Ray Serve cannot scale between them."
            )
        for name in ("upscale_delay_s", "downscale_delay_s", "look_back_period_s"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                errors[name] = "Must be a finite number of seconds."
        if self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM refuses this too: every running sequence needs one decode token per step.
            errors["max_num_batched_tokens"] = "Must be at least max_num_seqs."
        if not isinstance(self.extra_engine_args, dict):
            errors["extra_engine_args"] = "Must be a JSON object."
        if self.import_path_override and ":" not in self.import_path_override:
            errors["import_path_override"] = "Use module:function."
        if errors:
            raise ValidationError(errors)

    @property
    def has_faults(self) -> bool:
        return bool(self.faults)

    def replicas_summary(self) -> str:
        if self.scaling_mode == ScalingMode.AUTOSCALING:
            derived = " from measured capacity" if not self.target_ongoing_requests else ""
            return (
                f"{self.min_replicas}–{self.max_replicas} (target {self.autoscaling_target} ongoing{derived})"
            )
        return str(self.num_replicas)


class DeploymentEvent(models.Model):
    """One entry of a deployment's append-only timeline: who did what, or what Ray reported.

    Rows are never updated or deleted (``save`` refuses updates; the delete is soft on the parent).
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="events")
    kind = models.CharField(max_length=12, choices=EventKind.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    message = models.TextField(blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.kind} {self.created_at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("Deployment events are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("Deployment events are append-only.")


class ReconcileRun(models.Model):
    """One pass of the reconciler, for the console ("last synced …") and for proving the lock.

    ``locked_at``..``finished_at`` is the critical section; two runs never overlap there.
    """

    class Outcome(models.TextChoices):
        RUNNING = "running", "running"
        APPLIED = "applied", "config sent"
        UNCHANGED = "unchanged", "config unchanged"
        UNREACHABLE = "unreachable", "cluster unreachable"
        REJECTED = "rejected", "Ray rejected the config"

    trigger = models.CharField(max_length=32, default="manual")
    started_at = models.DateTimeField(auto_now_add=True)
    locked_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=12, choices=Outcome.choices, default=Outcome.RUNNING)
    config_hash = models.CharField(max_length=64, blank=True)
    applications = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"reconcile {self.pk} {self.outcome}"

    @property
    def duration_ms(self) -> float | None:
        if self.finished_at and self.locked_at:
            return (self.finished_at - self.locked_at).total_seconds() * 1000
        return None


# How a route takes votes (snapshot.contract.VOTING_MODES, docs/voting.md).
VOTING_CHOICES = [
    ("off", "Off"),
    ("field", "Requests that send governor.vote"),
    ("n", "governor.vote, and n above 1 as a vote's samples"),
]


class ModelRoute(models.Model):
    """A public model name the gateway serves, split by weight over deployments (``RouteTarget``)."""

    public_name = models.CharField(max_length=128, unique=True, validators=[public_name_validator])
    description = models.CharField(max_length=256, blank=True)
    long_context_threshold_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Prompts longer than this go to the long-context pool, when the route has one.",
    )
    free_reason = models.CharField(
        max_length=500,
        blank=True,
        help_text="Set only by model_route_free_set: why this route is served at $0 on purpose. Empty: a "
        "tenant with a budget is refused while the model has no price in force (ADR 0022).",
    )
    allowed_tenants = models.ManyToManyField(
        "billing.Tenant",
        blank=True,
        related_name="+",
        help_text="Only these tenants' keys may use this model name; none selected means every tenant.",
    )
    voting = models.CharField(
        max_length=8,
        choices=VOTING_CHOICES,
        default="off",
        help_text="Whether the gateway samples this model several times and answers the majority "
        "(docs/voting.md): a vote costs up to its budget of samples.",
    )
    # Made by an incident rehearsal: its incidents are labelled as such, and the gateway never
    # serves it (it is left out of the snapshot).
    rehearsal = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["public_name"]

    def __str__(self) -> str:
        return self.public_name

    def get_absolute_url(self) -> str:
        return reverse("deployments:route_detail", args=[self.pk])


class RouteTarget(models.Model):
    """A deployment serving a route, with its traffic weight (0 drains it without removing it)."""

    route = models.ForeignKey(ModelRoute, on_delete=models.CASCADE, related_name="targets")
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="route_targets")
    weight = models.PositiveIntegerField(default=100, validators=[MaxValueValidator(1_000_000)])

    class Meta:
        ordering = ["route__public_name", "deployment__name"]
        constraints = [
            models.UniqueConstraint(fields=["route", "deployment"], name="unique_target_per_route"),
            models.CheckConstraint(condition=Q(weight__gte=0), name="route_target_weight_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.route} → {self.deployment} ({self.weight})"


class RolloutQuerySet(models.QuerySet):
    def active(self) -> RolloutQuerySet:
        """Not finished: progressing or paused (at most one per route, a constraint holds it)."""
        return self.filter(outcome=RolloutOutcome.NONE)


class Rollout(models.Model):
    """A progressive rollout of a canary deployment on a route, step by step (Argo Rollouts' model).

    ``steps`` is the plan (see ``deployments.rollouts.plan``); ``step_index`` the step being
    executed (``len(steps)`` once every step is done). The controller
    (``deployments.rollouts.services.rollout_advance``) is the only writer besides admins' actions,
    and every write takes the row lock, so two actions on one rollout never both apply.
    """

    route = models.ForeignKey(ModelRoute, on_delete=models.PROTECT, related_name="rollouts")
    stable = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="rollouts_as_stable")
    canary = models.ForeignKey(Deployment, on_delete=models.PROTECT, related_name="rollouts_as_canary")
    template = models.CharField(max_length=32, blank=True, help_text="The template the plan came from.")
    steps = models.JSONField(help_text="The plan: a list of set_weight / pause / analysis steps.")
    checks = models.JSONField(
        blank=True, help_text="The analysis checks: metric, limit, relative, min_samples."
    )
    failure_limit = models.PositiveSmallIntegerField(
        default=0, help_text="The analysis fails when more than this many checks fail."
    )
    sla_ttft_ms = models.FloatField(default=1000, validators=[MinValueValidator(1)])
    sla_tpot_ms = models.FloatField(default=50, validators=[MinValueValidator(0.1)])

    phase = models.CharField(max_length=12, choices=RolloutPhase.choices, default=RolloutPhase.PROGRESSING)
    outcome = models.CharField(max_length=12, choices=RolloutOutcome.choices, default="", blank=True)
    step_index = models.PositiveIntegerField(default=0)
    step_started_at = models.DateTimeField(null=True, blank=True)
    canary_weight = models.PositiveSmallIntegerField(default=0, help_text="Percent of the route's traffic.")
    message = models.TextField(blank=True, help_text="Why it is paused, aborted or finished.")
    abort_evidence = models.JSONField(default=dict, blank=True)

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    aborted_at = models.DateTimeField(null=True, blank=True)

    objects = RolloutQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["route"], condition=Q(outcome=""), name="one_active_rollout_per_route"
            ),
            models.CheckConstraint(
                condition=~Q(stable=models.F("canary")), name="rollout_canary_differs_from_stable"
            ),
            models.CheckConstraint(condition=Q(canary_weight__lte=100), name="rollout_weight_percent"),
        ]

    def __str__(self) -> str:
        return f"{self.route} → {self.canary} (rollout {self.pk})"

    def get_absolute_url(self) -> str:
        return reverse("deployments:rollout_detail", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.outcome == RolloutOutcome.NONE

    @property
    def stable_weight(self) -> int:
        return 100 - self.canary_weight

    @property
    def current_step(self) -> dict | None:
        return self.steps[self.step_index] if self.step_index < len(self.steps) else None


class AnalysisRun(models.Model):
    """One analysis of a rollout step: both sides measured over the same window, with the numbers.

    ``results`` is one entry per check: metric, stable and canary values and sample counts, the
    limit it was held to and its status (passed / failed / inconclusive).
    """

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="analysis_runs")
    step_index = models.PositiveIntegerField()
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    verdict = models.CharField(
        max_length=14, choices=AnalysisVerdict.choices, default=AnalysisVerdict.RUNNING
    )
    results = models.JSONField(default=list, blank=True)
    failed_checks = models.PositiveSmallIntegerField(default=0)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-window_start", "-id"]

    def __str__(self) -> str:
        return f"analysis {self.pk} of rollout {self.rollout_id} step {self.step_index}: {self.verdict}"


class RouteCache(models.Model):
    """A route's semantic cache (docs/semantic-cache.md, ADR 0042): off unless an admin turns it on.

    ``embedding_route`` names the route whose deployments embed the prompts (``/v1/embeddings``);
    ``generation`` is bumped to drop every entry at once (the gateway keys entries by it)."""

    route = models.OneToOneField(ModelRoute, on_delete=models.CASCADE, related_name="cache_settings")
    enabled = models.BooleanField(default=False)
    ttl_s = models.PositiveIntegerField(
        default=86_400,
        validators=[MinValueValidator(1)],
        help_text="How long an entry is kept, in seconds.",
    )
    target_error_rate = models.FloatField(
        default=0.02,
        help_text="The share of requests that may get a cached answer the model would not have given "
        "(above 0, at most 0.5).",
    )
    verify_share = models.FloatField(
        default=0.05,
        help_text="The share of would-be hits still sent to the model and compared (the error estimate).",
    )
    embedding_route = models.ForeignKey(
        ModelRoute,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The route whose deployments embed the prompts (they serve /v1/embeddings).",
    )
    generation = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"cache of {self.route_id}: {'on' if self.enabled else 'off'}"
