"""Catalog models: what hardware exists, which models we know, and which versions of them we serve."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse

from catalog.constants import Framework, KvCacheDtype, Lifecycle, Precision
from engines.quality import QualityProfile
from engines.specs import GpuSpec, ModelSpec

POSITIVE = [MinValueValidator(Decimal("0.000001"))]
NON_NEGATIVE = [MinValueValidator(Decimal("0"))]


class GpuType(models.Model):
    """An accelerator model with its datasheet figures and what an hour of it costs.

    The hourly cost is the rental price, or, when the TCO inputs are filled in, the owned-GPU
    figure from ``catalog.services.gpu_hourly_cost`` (depreciation + power + datacenter/ops).
    """

    name = models.CharField(max_length=64, unique=True)
    memory_gib = models.DecimalField("memory (GiB)", max_digits=7, decimal_places=1, validators=POSITIVE)
    # What the driver reports (nvidia-smi's "MiB" total), which the estimate prefers to the datasheet
    # figure above (ADR 0021); CUDA's own total (vLLM's ``total_gpu_memory``) when a log shows it.
    memory_mib = models.PositiveIntegerField(
        "memory (MiB, nvidia-smi total)", null=True, blank=True, validators=[MinValueValidator(1)]
    )
    cuda_total_mib = models.PositiveIntegerField(
        "CUDA-visible total (MiB)",
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="torch.cuda.mem_get_info()[1] / vLLM's total_gpu_memory; a few hundred MiB below nvidia-smi.",
    )
    memory_source = models.CharField(
        max_length=300, blank=True, help_text="Where the MiB figures come from (driver, command, link)."
    )
    hbm_bandwidth_gbps = models.DecimalField(
        "HBM bandwidth (GB/s)", max_digits=8, decimal_places=1, validators=POSITIVE
    )
    bf16_tflops = models.DecimalField(
        "dense BF16 TFLOP/s", max_digits=8, decimal_places=1, validators=POSITIVE
    )
    fp8_tflops = models.DecimalField(
        "dense FP8 TFLOP/s", max_digits=8, decimal_places=1, null=True, blank=True, validators=POSITIVE
    )
    interconnect = models.CharField(max_length=64, blank=True)
    rental_usd_per_hour = models.DecimalField(
        "rental $/hour", max_digits=8, decimal_places=3, validators=NON_NEGATIVE
    )
    # Optional total-cost-of-ownership inputs for owned GPUs (all per GPU).
    purchase_price_usd = models.DecimalField(
        "purchase price ($)", max_digits=12, decimal_places=2, null=True, blank=True, validators=NON_NEGATIVE
    )
    depreciation_years = models.DecimalField(
        max_digits=4, decimal_places=1, null=True, blank=True, validators=POSITIVE
    )
    power_kw = models.DecimalField(
        "power (kW)", max_digits=6, decimal_places=3, null=True, blank=True, validators=NON_NEGATIVE
    )
    pue = models.DecimalField(
        "PUE",
        max_digits=4,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("1"))],
    )
    electricity_usd_per_kwh = models.DecimalField(
        "$/kWh", max_digits=6, decimal_places=4, null=True, blank=True, validators=NON_NEGATIVE
    )
    datacenter_ops_usd_per_month = models.DecimalField(
        "datacenter + ops $/month",
        max_digits=10,
        decimal_places=2,
        null=True,
        blank=True,
        validators=NON_NEGATIVE,
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("catalog:gpu_detail", args=[self.pk])

    @property
    def effective_memory_gib(self) -> float:
        """The driver's figure when recorded, else the datasheet one."""
        return self.memory_mib / 1024 if self.memory_mib else float(self.memory_gib)

    @property
    def effective_memory_source(self) -> str:
        if self.memory_mib:
            return self.memory_source or "nvidia-smi total (source not recorded)"
        return "datasheet figure (no driver-reported MiB recorded)"

    def clean(self) -> None:
        if self.memory_mib and self.cuda_total_mib and self.cuda_total_mib > self.memory_mib:
            raise ValidationError({"cuda_total_mib": "CUDA cannot see more memory than the driver reports."})

    def to_spec(self) -> GpuSpec:
        return GpuSpec(
            name=self.name,
            memory_gib=self.effective_memory_gib,
            memory_source=self.effective_memory_source,
            cuda_total_gib=self.cuda_total_mib / 1024 if self.cuda_total_mib else None,
            hbm_bandwidth_gbps=float(self.hbm_bandwidth_gbps),
            bf16_tflops=float(self.bf16_tflops),
            fp8_tflops=float(self.fp8_tflops) if self.fp8_tflops is not None else None,
            interconnect=self.interconnect,
        )


class Model(models.Model):
    """A model architecture as published (config.json facts), independent of how it is quantized."""

    name = models.CharField(max_length=128, unique=True)
    family = models.CharField(max_length=64)
    parameter_count = models.BigIntegerField(validators=[MinValueValidator(1)], help_text="total parameters")
    layers = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    hidden_size = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    attention_heads = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    kv_heads = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    head_dim = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    vocab_size = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    max_context = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    # The gateway holds budget for this many prompt tokens per image before it knows which encoder
    # resolution the engine picks; unknown (blank) holds snapshot.contract.DEFAULT_TOKENS_PER_IMAGE.
    max_tokens_per_image = models.PositiveIntegerField(
        "max tokens per image",
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(1_000_000)],
        help_text="The most prompt tokens one image can count (the vision encoder's maximum); "
        "blank when unknown: the gateway then holds 16,384 per image.",
    )
    # config.json facts the memory estimate needs to split weights by part and size the activation peak.
    intermediate_size = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="config.json intermediate_size"
    )
    tie_word_embeddings = models.BooleanField(default=False, help_text="config.json tie_word_embeddings")
    attention_bias = models.BooleanField(default=False, help_text="q/k/v projections have biases (Qwen2)")
    licence = models.CharField(max_length=128, blank=True)

    class Meta:
        ordering = ["family", "name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("catalog:model_detail", args=[self.pk])

    def clean(self) -> None:
        errors = {}
        if self.hidden_size and self.attention_heads and self.hidden_size % self.attention_heads:
            errors["attention_heads"] = "Attention heads must divide the hidden size."
        if self.attention_heads and self.kv_heads and self.attention_heads % self.kv_heads:
            errors["kv_heads"] = "KV heads must divide the attention heads."
        if self.kv_heads and self.attention_heads and self.kv_heads > self.attention_heads:
            errors["kv_heads"] = "KV heads cannot exceed attention heads."
        if errors:
            raise ValidationError(errors)

    def to_spec(self, *, precision: str = "bf16", kv_cache_dtype: str = "auto") -> ModelSpec:
        return ModelSpec(
            name=self.name,
            params=float(self.parameter_count),
            layers=self.layers,
            hidden_size=self.hidden_size,
            attention_heads=self.attention_heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
            max_context=self.max_context,
            precision=precision,
            kv_cache_dtype=kv_cache_dtype,
            intermediate_size=self.intermediate_size,
            tie_word_embeddings=self.tie_word_embeddings,
            attention_bias=self.attention_bias,
        )


class ModelVersion(models.Model):
    """One servable build of a model: weights at a precision, for a framework, with a lifecycle."""

    model = models.ForeignKey(Model, on_delete=models.PROTECT, related_name="versions")
    label = models.CharField("version label", max_length=64)
    weights_uri = models.CharField("weights source URI", max_length=512)
    precision = models.CharField(max_length=8, choices=Precision.choices, default=Precision.BF16)
    kv_cache_dtype = models.CharField(max_length=12, choices=KvCacheDtype.choices, default=KvCacheDtype.AUTO)
    framework = models.CharField(max_length=16, choices=Framework.choices, default=Framework.VLLM)
    lifecycle = models.CharField(max_length=12, choices=Lifecycle.choices, default=Lifecycle.DRAFT)
    baseline = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="derived_versions"
    )
    quality_profile = models.JSONField(
        default=dict,
        blank=True,
        help_text="Simulated engines only: how often this version answers eval cases right, "
        'e.g. {"categories": {"arithmetic": 0.95}, "by_context": {"16384": 0.7}, "default": 0.9}. '
        "Scores it produces are labelled simulated.",
    )
    # Set only when a platform admin approved the version without its gates passing; the reason
    # is also in the audit trail, and the version page shows it in red.
    gate_override_reason = models.TextField(blank=True)
    gate_override_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    gate_override_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model__name", "label"]
        constraints = [
            models.UniqueConstraint(fields=["model", "label"], name="unique_version_label_per_model")
        ]

    def __str__(self) -> str:
        return f"{self.model.name}:{self.label}"

    def get_absolute_url(self) -> str:
        return reverse("catalog:version_detail", args=[self.pk])

    def clean(self) -> None:
        if self.quality_profile:
            try:
                QualityProfile.from_dict(self.quality_profile)
            except ValueError as exc:
                raise ValidationError({"quality_profile": str(exc)}) from exc
        if self.baseline_id and self.pk and self.baseline_id == self.pk:
            raise ValidationError({"baseline": "A version cannot be its own baseline."})
        if self.baseline_id and self.model_id and self.baseline.model_id != self.model_id:
            raise ValidationError({"baseline": "The baseline must be a version of the same model."})

    def to_spec(self) -> ModelSpec:
        return self.model.to_spec(precision=self.precision, kv_cache_dtype=self.kv_cache_dtype)

    @property
    def gates_overridden(self) -> bool:
        return bool(self.gate_override_at)


class GpuCostVersion(models.Model):
    """What one GPU-hour of a GPU type costs in a pool, from ``effective_from`` on. Immutable.

    A change is a new version (the one in force is the latest ``effective_from`` ≤ now), so a price
    derived from a version keeps pointing at the figures it was computed from. ``pool`` empty means
    every pool without its own version. ``usd_per_gpu_hour`` and ``formula`` are computed by
    ``catalog.services.gpu_cost_version_create`` from the inputs and stored with them.
    """

    class Basis(models.TextChoices):
        RENT = "rent", "Rented ($/GPU-hour)"
        TCO = "tco", "Owned (total cost of ownership)"

    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT, related_name="cost_versions")
    pool = models.CharField(
        max_length=64, blank=True, help_text="Empty = every pool without its own version."
    )
    basis = models.CharField(max_length=4, choices=Basis.choices)
    effective_from = models.DateTimeField(db_index=True)
    rent_usd_per_hour = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    purchase_price_usd = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    depreciation_years = models.DecimalField(max_digits=4, decimal_places=1, null=True, blank=True)
    power_kw = models.DecimalField(max_digits=6, decimal_places=3, null=True, blank=True)
    pue = models.DecimalField(max_digits=4, decimal_places=2, null=True, blank=True)
    electricity_usd_per_kwh = models.DecimalField(max_digits=6, decimal_places=4, null=True, blank=True)
    datacenter_usd_per_month = models.DecimalField(max_digits=10, decimal_places=2, null=True, blank=True)
    operations_usd_per_month = models.DecimalField(max_digits=10, decimal_places=2, null=True, blank=True)
    target_utilization = models.DecimalField(max_digits=4, decimal_places=3, default=Decimal("1"))
    usd_per_gpu_hour = models.DecimalField(max_digits=12, decimal_places=4)
    formula = models.CharField(max_length=300)
    terms = models.JSONField(default=dict, help_text="Each term of the formula in $/GPU-hour.")
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["gpu_type__name", "pool", "-effective_from"]

    def __str__(self) -> str:
        return f"{self.gpu_type} {self.pool or 'all pools'} ${self.usd_per_gpu_hour}/GPU-h from {self.effective_from:%Y-%m-%d}"
