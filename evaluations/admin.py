"""Read-only admin (see governor.admin_views): changes go through this app's services."""

from django.contrib import admin

from evaluations.models import BenchmarkRun, CapacityPlan
from governor.admin_views import ReadOnlyAdmin


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "name",
        "kind",
        "mode",
        "status",
        "progress",
        "target_kind",
        "capacity_rps",
        "usd_per_mtok",
        "created_at",
    )
    list_filter = ("kind", "mode", "status", "target_kind")
    search_fields = ("name", "model_name")
    raw_id_fields = ("deployment", "model_version", "gpu_type", "created_by")
    readonly_fields = ("results", "series", "snapshot")


@admin.register(CapacityPlan)
class CapacityPlanAdmin(ReadOnlyAdmin):
    list_display = ("name", "token", "created_by", "created_at")
