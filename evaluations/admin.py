"""Read-only admin (see core.admin_views): changes go through this app's services."""

from django.contrib import admin

from core.admin_views import ReadOnlyAdmin
from evaluations.models import (
    BenchmarkRun,
    CapacityPlan,
    EvalCaseResult,
    EvalRun,
    EvalSuite,
    EvalSuiteVersion,
    GateDecision,
    GatePolicy,
    GateRun,
    RouterPolicy,
    SimulatorCalibration,
)


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


@admin.register(EvalSuite)
class EvalSuiteAdmin(ReadOnlyAdmin):
    list_display = ("name", "description", "created_at")
    search_fields = ("name",)


@admin.register(EvalSuiteVersion)
class EvalSuiteVersionAdmin(ReadOnlyAdmin):
    list_display = ("suite", "number", "case_count", "checksum", "created_at")
    list_filter = ("suite",)


@admin.register(EvalRun)
class EvalRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "suite_version", "deployment", "status", "progress", "label", "created_at")
    list_filter = ("status", "label")


@admin.register(EvalCaseResult)
class EvalCaseResultAdmin(ReadOnlyAdmin):
    list_display = ("run", "case_id", "category", "score", "latency_ms")
    list_filter = ("category",)


@admin.register(GatePolicy)
class GatePolicyAdmin(ReadOnlyAdmin):
    list_display = ("model", "number", "gpu_type", "created_at")
    list_filter = ("model",)


@admin.register(GateRun)
class GateRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "model_version", "mode", "status", "created_at")
    list_filter = ("status", "mode")


@admin.register(GateDecision)
class GateDecisionAdmin(ReadOnlyAdmin):
    list_display = ("id", "model_version", "kind", "verdict", "label", "created_at")
    list_filter = ("kind", "verdict", "label")


@admin.register(CapacityPlan)
class CapacityPlanAdmin(ReadOnlyAdmin):
    list_display = ("name", "token", "created_by", "created_at")


@admin.register(SimulatorCalibration)
class SimulatorCalibrationAdmin(ReadOnlyAdmin):
    list_display = ("id", "gpu_type", "evaluation", "ttft_err_pct", "tpot_err_pct", "source", "created_at")
    list_filter = ("evaluation", "gpu_type")


@admin.register(RouterPolicy)
class RouterPolicyAdmin(ReadOnlyAdmin):
    list_display = (
        "route",
        "number",
        "status",
        "cheap_version",
        "strong_version",
        "quality_target",
        "threshold",
    )
    list_filter = ("status",)
