from __future__ import annotations

from rest_framework import serializers

from deployments.constants import MAX_REPLICAS
from deployments.models import (
    MAX_DOWNSCALE_DELAY_S,
    MAX_LOOK_BACK_PERIOD_S,
    MAX_UPSCALE_DELAY_S,
    Deployment,
    DeploymentEvent,
    ModelRoute,
    ReconcileRun,
    RouteTarget,
)
from deployments.services import CREATE_FIELDS

OBSERVED_FIELDS = [
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


class DeploymentSerializer(serializers.ModelSerializer):
    """Desired fields are writable on create; observed ones (what Ray reports) are read-only."""

    openai_base_url = serializers.CharField(read_only=True)
    route_prefix = serializers.CharField(read_only=True)
    model_version_name = serializers.CharField(source="model_version.__str__", read_only=True)
    gpu_type_name = serializers.CharField(source="gpu_type.name", read_only=True, default=None)
    preflight_warnings = serializers.SerializerMethodField()

    class Meta:
        model = Deployment
        fields = [
            "id",
            *CREATE_FIELDS,
            "model_version_name",
            "gpu_type_name",
            "openai_base_url",
            "route_prefix",
            *OBSERVED_FIELDS,
            "max_inflight",
            "capacity_inflight",
            "capacity_run_id",
            "preflight_warnings",
            "created_by",
            "created_at",
            "updated_at",
            "deleted_at",
        ]
        # The admission limit changes through the ``admission`` action; the capacity's, by a benchmark.
        read_only_fields = [*OBSERVED_FIELDS, "max_inflight", "capacity_inflight", "capacity_run_id",
                            "created_by", "created_at", "updated_at", "deleted_at"]  # fmt: skip

    def get_preflight_warnings(self, obj) -> list[str]:
        return list(getattr(obj, "_preflight_warnings", []))


class AdmissionSerializer(serializers.Serializer):
    max_inflight = serializers.IntegerField(
        min_value=1, max_value=100_000, allow_null=True,
        help_text="Requests the gateways send it at once; null: its measured capacity's (or none before one).",
    )  # fmt: skip
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class ScaleSerializer(serializers.Serializer):
    """Fixed replicas, or Ray Serve autoscaling; fields left out keep their value."""

    scaling_mode = serializers.ChoiceField(
        choices=["fixed", "autoscaling"], required=False,
        help_text="Left out: the deployment's current mode (an autoscaled deployment stays autoscaled)",
    )  # fmt: skip
    num_replicas = serializers.IntegerField(min_value=1, max_value=MAX_REPLICAS, required=False)
    min_replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False)
    max_replicas = serializers.IntegerField(min_value=1, max_value=MAX_REPLICAS, required=False)
    target_ongoing_requests = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False,
        help_text="Per replica; 0: 80 % of its measured capacity per replica",
    )  # fmt: skip
    upscale_delay_s = serializers.FloatField(
        min_value=0, max_value=MAX_UPSCALE_DELAY_S, required=False,
        help_text="Seconds above the target before Ray adds a replica",
    )  # fmt: skip
    downscale_delay_s = serializers.FloatField(
        min_value=0, max_value=MAX_DOWNSCALE_DELAY_S, required=False,
        help_text="Seconds below the target before Ray removes a replica",
    )  # fmt: skip
    look_back_period_s = serializers.FloatField(
        min_value=1, max_value=MAX_LOOK_BACK_PERIOD_S, required=False,
        help_text="Seconds over which Ray averages the requests in flight",
    )  # fmt: skip
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class DeploymentEventSerializer(serializers.ModelSerializer):
    actor = serializers.StringRelatedField()

    class Meta:
        model = DeploymentEvent
        fields = ["id", "deployment", "kind", "actor", "message", "before", "after", "created_at"]


class ReconcileRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReconcileRun
        fields = [
            "id",
            "trigger",
            "started_at",
            "locked_at",
            "finished_at",
            "outcome",
            "config_hash",
            "applications",
            "error",
        ]


class RouteTargetSerializer(serializers.ModelSerializer):
    deployment_slug = serializers.CharField(source="deployment.slug", read_only=True)

    class Meta:
        model = RouteTarget
        fields = ["id", "route", "deployment", "deployment_slug", "weight"]


class ModelRouteSerializer(serializers.ModelSerializer):
    targets = RouteTargetSerializer(many=True, read_only=True)

    class Meta:
        model = ModelRoute
        fields = [
            "id",
            "public_name",
            "description",
            "long_context_threshold_tokens",
            "allowed_tenants",
            "voting",
            "free_reason",
            "targets",
            "created_at",
            "updated_at",
        ]
        # Only POST .../free/ changes it, with a reason, audited (ADR 0022).
        read_only_fields = ["free_reason", "created_at", "updated_at"]


class RouteFreeSerializer(serializers.Serializer):
    free = serializers.BooleanField()
    reason = serializers.CharField(max_length=500)
