"""Read-only admin (see core.admin_views): changes go through this app's services."""

from django.contrib import admin

from core.admin_views import ReadOnlyAdmin, ReadOnlyInline
from deployments.models import (
    AnalysisRun,
    Deployment,
    DeploymentEvent,
    ModelRoute,
    ReconcileRun,
    Rollout,
    RouteCache,
    RouteTarget,
)


@admin.register(Deployment)
class DeploymentAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "slug",
        "model_version",
        "engine_kind",
        "gpu_type",
        "desired_state",
        "status",
        "deleted_at",
    ]
    list_filter = ["engine_kind", "desired_state", "status", "pool"]
    search_fields = ["name", "slug"]
    readonly_fields = [
        "status",
        "status_message",
        "status_changed_at",
        "last_error",
        "last_error_at",
        "observed_at",
        "running_replicas",
        "ray_app_status",
        "ray_deployments",
    ]


@admin.register(DeploymentEvent)
class DeploymentEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "deployment", "kind", "actor"]
    list_filter = ["kind"]


@admin.register(ReconcileRun)
class ReconcileRunAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "trigger", "outcome", "applications", "config_hash"]
    list_filter = ["outcome", "trigger"]


class RouteTargetInline(ReadOnlyInline):
    model = RouteTarget
    extra = 0


@admin.register(ModelRoute)
class ModelRouteAdmin(ReadOnlyAdmin):
    list_display = ["public_name", "long_context_threshold_tokens"]
    inlines = [RouteTargetInline]


@admin.register(RouteTarget)
class RouteTargetAdmin(ReadOnlyAdmin):
    list_display = ("route", "deployment", "weight")
    list_filter = ("route",)
    raw_id_fields = ("deployment",)


class _ReadOnly(admin.ModelAdmin):
    """Rollouts change only through their services (locked, audited): the admin only reads them."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Rollout)
class RolloutAdmin(_ReadOnly):
    list_display = ["id", "route", "stable", "canary", "phase", "outcome", "canary_weight", "created_at"]
    list_filter = ["phase", "outcome"]


@admin.register(AnalysisRun)
class AnalysisRunAdmin(_ReadOnly):
    list_display = ["id", "rollout", "step_index", "window_start", "window_end", "verdict", "failed_checks"]
    list_filter = ["verdict"]


@admin.register(RouteCache)
class RouteCacheAdmin(ReadOnlyAdmin):
    list_display = (
        "route",
        "enabled",
        "ttl_s",
        "target_error_rate",
        "verify_share",
        "embedding_route",
        "generation",
    )
    list_filter = ("enabled",)
