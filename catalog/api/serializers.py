from rest_framework import serializers

from catalog.constants import KvCacheDtype, Precision
from catalog.models import GpuType, Model, ModelVersion
from core.text import REASON_MAX_CHARS


class _CleanedModelSerializer(serializers.ModelSerializer):
    """Runs the model's ``clean()`` so the API rejects what the forms reject."""

    def validate(self, attrs):
        from django.core.exceptions import ValidationError as DjangoValidationError

        instance = self.instance or self.Meta.model()
        for key, value in attrs.items():
            setattr(instance, key, value)
        try:
            instance.clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return attrs


class GpuTypeSerializer(_CleanedModelSerializer):
    hourly_cost_usd = serializers.SerializerMethodField()

    class Meta:
        model = GpuType
        fields = "__all__"

    def get_hourly_cost_usd(self, obj) -> str:
        from catalog.services import gpu_hourly_cost

        return str(gpu_hourly_cost(obj))


class ModelSerializer(_CleanedModelSerializer):
    class Meta:
        model = Model
        fields = "__all__"


class ModelVersionSerializer(_CleanedModelSerializer):
    model_name = serializers.CharField(source="model.name", read_only=True)
    created_by = serializers.StringRelatedField(read_only=True)

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "model",
            "model_name",
            "label",
            "weights_uri",
            "precision",
            "kv_cache_dtype",
            "framework",
            "lifecycle",
            "baseline",
            "quality_profile",
            "gate_override_reason",
            "gate_override_at",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "lifecycle",
            "gate_override_reason",
            "gate_override_at",
            "created_by",
            "created_at",
            "updated_at",
        ]


class LifecycleSerializer(serializers.Serializer):
    to = serializers.ChoiceField(choices=[c for c, _ in ModelVersion._meta.get_field("lifecycle").choices])
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=REASON_MAX_CHARS)
    override = serializers.BooleanField(required=False, default=False)


class MemoryEstimateQuerySerializer(serializers.Serializer):
    """Query parameters of the memory-estimates endpoint; unknown names are refused, never guessed."""

    # Not ``precision``: that name filters the version list (``filterset_fields``).
    weight_precision = serializers.ChoiceField(
        choices=Precision.choices,
        required=False,
        help_text="Estimate at this precision instead of the version's.",
    )
    kv_cache_dtype = serializers.ChoiceField(choices=KvCacheDtype.choices, required=False)
    gpu = serializers.CharField(required=False, help_text="A GPU type's name; default every GPU type.")
    context_len = serializers.IntegerField(required=False, min_value=1, max_value=10_000_000)
    gpu_memory_utilization = serializers.FloatField(
        required=False, min_value=0.05, max_value=1.0, default=0.9
    )
    max_num_batched_tokens = serializers.IntegerField(required=False, min_value=1, max_value=1_000_000)

    def validate_gpu(self, value: str) -> GpuType:
        gpu = GpuType.objects.filter(name=value).first()
        if gpu is None:
            raise serializers.ValidationError(
                f"Unknown GPU type {value!r}: the estimate knows only the catalog's GPU types."
            )
        return gpu


class MemoryEstimateSerializer(serializers.Serializer):
    gpu = serializers.CharField()
    tensor_parallel = serializers.IntegerField()
    gpu_memory_utilization = serializers.FloatField()
    context_len = serializers.IntegerField()
    accounting = serializers.CharField()
    memory_per_gpu_bytes = serializers.FloatField()
    memory_source = serializers.CharField()
    usable_bytes = serializers.FloatField()
    weight_bytes = serializers.FloatField()
    weight_embedding_bytes = serializers.FloatField()
    weight_layer_bytes = serializers.FloatField()
    weight_lm_head_bytes = serializers.FloatField()
    non_torch_bytes = serializers.FloatField()
    activation_peak_bytes = serializers.FloatField()
    cuda_graph_bytes = serializers.FloatField()
    max_num_batched_tokens = serializers.IntegerField()
    kv_pool_bytes = serializers.FloatField()
    kv_bytes_per_token = serializers.FloatField()
    kv_blocks = serializers.IntegerField()
    kv_capacity_tokens = serializers.IntegerField()
    max_concurrent_seqs = serializers.IntegerField()
    fits = serializers.BooleanField()
    reason = serializers.CharField()
