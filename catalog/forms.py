"""Forms of the catalog pages, including the list filters."""

from __future__ import annotations

from django import forms

from catalog.constants import Framework, KvCacheDtype, Lifecycle, Precision
from catalog.models import GpuType, Model, ModelVersion
from core.forms import BootstrapMixin
from core.text import REASON_MAX_CHARS


class GpuTypeForm(BootstrapMixin, forms.ModelForm):
    class Meta:
        model = GpuType
        fields = [
            "name",
            "memory_gib",
            "memory_mib",
            "cuda_total_mib",
            "memory_source",
            "hbm_bandwidth_gbps",
            "bf16_tflops",
            "fp8_tflops",
            "interconnect",
            "rental_usd_per_hour",
            "purchase_price_usd",
            "depreciation_years",
            "power_kw",
            "pue",
            "electricity_usd_per_kwh",
            "datacenter_ops_usd_per_month",
        ]


class ModelForm(BootstrapMixin, forms.ModelForm):
    class Meta:
        model = Model
        fields = [
            "name",
            "family",
            "parameter_count",
            "layers",
            "hidden_size",
            "attention_heads",
            "kv_heads",
            "head_dim",
            "vocab_size",
            "max_context",
            "max_tokens_per_image",
            "intermediate_size",
            "tie_word_embeddings",
            "attention_bias",
            "licence",
        ]


class ModelVersionForm(BootstrapMixin, forms.ModelForm):
    class Meta:
        model = ModelVersion
        fields = [
            "model",
            "label",
            "weights_uri",
            "precision",
            "kv_cache_dtype",
            "framework",
            "baseline",
            "quality_profile",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["baseline"].queryset = ModelVersion.objects.select_related("model")
        self.fields["baseline"].required = False

    def clean_quality_profile(self) -> dict:
        return self.cleaned_data.get("quality_profile") or {}


class LifecycleForm(BootstrapMixin, forms.Form):
    to = forms.ChoiceField(choices=Lifecycle.choices, label="Move to")
    reason = forms.CharField(
        required=False, max_length=REASON_MAX_CHARS, widget=forms.Textarea(attrs={"rows": 2})
    )
    override = forms.BooleanField(required=False, label="Override the eval gates")


class VersionFilterForm(BootstrapMixin, forms.Form):
    """Query parameters of the version list page."""

    q = forms.CharField(required=False, label="Search")
    family = forms.ChoiceField(required=False)
    precision = forms.ChoiceField(required=False, choices=[("", "any precision"), *Precision.choices])
    framework = forms.ChoiceField(required=False, choices=[("", "any framework"), *Framework.choices])
    lifecycle = forms.ChoiceField(required=False, choices=[("", "any lifecycle"), *Lifecycle.choices])

    def __init__(self, *args, families: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["family"].choices = [("", "any family")] + [(f, f) for f in families]


class EstimateForm(BootstrapMixin, forms.Form):
    """Inputs of the memory estimate table on the version page."""

    context_len = forms.IntegerField(
        required=False, min_value=1, max_value=10_000_000, label="Context (tokens)"
    )
    gpu_memory_utilization = forms.FloatField(
        required=False, min_value=0.05, max_value=1.0, initial=0.9, label="gpu_memory_utilization"
    )


class GpuCostVersionForm(BootstrapMixin, forms.Form):
    """A new GPU hourly cost version: rent, or the owned-GPU (TCO) inputs; both over a target utilization."""

    pool = forms.CharField(max_length=64, required=False, help_text="Empty = every pool without its own.")
    basis = forms.ChoiceField(choices=[("rent", "Rented"), ("tco", "Owned (TCO)")])
    rent_usd_per_hour = forms.DecimalField(
        required=False, max_digits=10, decimal_places=4, label="Rent $/GPU-hour"
    )
    purchase_price_usd = forms.DecimalField(
        required=False, max_digits=12, decimal_places=2, label="Purchase price $"
    )
    depreciation_years = forms.DecimalField(required=False, max_digits=4, decimal_places=1)
    power_kw = forms.DecimalField(required=False, max_digits=6, decimal_places=3, label="Power kW")
    pue = forms.DecimalField(required=False, max_digits=4, decimal_places=2, label="PUE")
    electricity_usd_per_kwh = forms.DecimalField(
        required=False, max_digits=6, decimal_places=4, label="$/kWh"
    )
    datacenter_usd_per_month = forms.DecimalField(
        required=False, max_digits=10, decimal_places=2, label="Datacenter $/month"
    )
    operations_usd_per_month = forms.DecimalField(
        required=False, max_digits=10, decimal_places=2, label="Operations $/month"
    )
    target_utilization = forms.DecimalField(
        max_digits=4, decimal_places=3, initial="1", help_text="In (0, 1]."
    )
    effective_from = forms.DateTimeField(required=False, help_text="Empty = now (UTC).")
    note = forms.CharField(max_length=200, required=False)


class KvCalculatorForm(BootstrapMixin, forms.Form):
    """What-if inputs of the KV/memory calculator."""

    version = forms.ModelChoiceField(
        queryset=ModelVersion.objects.none(),
        label="Model version",
        error_messages={
            "invalid_choice": "Unknown model version %(value)s: the estimate knows only the catalog's."
        },
    )
    gpu_type = forms.ModelChoiceField(
        queryset=GpuType.objects.none(),
        label="GPU type",
        error_messages={
            "invalid_choice": "Unknown GPU type %(value)s: the estimate knows only the catalog's."
        },
    )
    tensor_parallel = forms.TypedChoiceField(choices=[(n, n) for n in (1, 2, 4, 8)], coerce=int, initial=1)
    context_len = forms.IntegerField(
        min_value=1, max_value=10_000_000, initial=8192, label="Context length (tokens)"
    )
    concurrency = forms.IntegerField(min_value=1, max_value=100_000, initial=32, label="Concurrent sequences")
    kv_cache_dtype = forms.ChoiceField(
        choices=KvCacheDtype.choices,
        initial="auto",
        label="KV dtype",
        error_messages={"invalid_choice": "Unknown KV-cache dtype %(value)s: the estimate knows none such."},
    )
    max_num_batched_tokens = forms.IntegerField(
        required=False, min_value=1, max_value=1_000_000, initial=8192, label="max_num_batched_tokens"
    )
    gpu_memory_utilization = forms.FloatField(
        required=False, min_value=0.05, max_value=1.0, initial=0.9, label="gpu_memory_utilization"
    )

    def __init__(self, *args, versions, gpus, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].queryset = versions
        self.fields["gpu_type"].queryset = gpus
