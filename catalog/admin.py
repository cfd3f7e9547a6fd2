"""Read-only admin (see core.admin_views): changes go through this app's services."""

from django.contrib import admin

from catalog.models import GpuCostVersion, GpuType, Model, ModelVersion
from core.admin_views import ReadOnlyAdmin


@admin.register(GpuType)
class GpuTypeAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "memory_gib",
        "memory_mib",
        "hbm_bandwidth_gbps",
        "bf16_tflops",
        "fp8_tflops",
        "rental_usd_per_hour",
    )
    search_fields = ("name",)


@admin.register(Model)
class ModelAdmin(ReadOnlyAdmin):
    list_display = ("name", "family", "parameter_count", "layers", "hidden_size", "kv_heads", "max_context")
    list_filter = ("family",)
    search_fields = ("name",)


@admin.register(ModelVersion)
class ModelVersionAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "precision", "kv_cache_dtype", "framework", "lifecycle", "created_at")
    list_filter = ("precision", "framework", "lifecycle")
    search_fields = ("model__name", "label")
    raw_id_fields = ("baseline", "created_by")


@admin.register(GpuCostVersion)
class GpuCostVersionAdmin(ReadOnlyAdmin):
    """Versions are immutable: added through ``catalog.services.gpu_cost_version_create`` only."""

    list_display = ("gpu_type", "pool", "basis", "effective_from", "usd_per_gpu_hour", "target_utilization")
    list_filter = ("gpu_type", "pool", "basis")
