"""Router policy API shapes."""

from __future__ import annotations

from rest_framework import serializers

from deployments.selectors import route_list
from evaluations.models import RouterPolicy
from evaluations.selectors.routing import router_training_runs


class RouterPolicySerializer(serializers.ModelSerializer):
    route = serializers.CharField(source="route.public_name", read_only=True)

    class Meta:
        model = RouterPolicy
        fields = [
            "id", "route", "number", "status", "label", "cheap_version", "strong_version", "cheap_eval_run",
            "strong_eval_run", "quality_target", "cheap_usd_per_mtok", "strong_usd_per_mtok", "seed",
            "threshold", "model", "summary", "curve", "gate_verdict", "gate_checks", "gate_decided_at",
            "override_reason", "created_at", "activated_at",
        ]  # fmt: skip
        read_only_fields = fields


class RouterTrainSerializer(serializers.Serializer):
    route = serializers.SlugRelatedField(slug_field="public_name", queryset=route_list())
    cheap_eval_run = serializers.PrimaryKeyRelatedField(queryset=router_training_runs())
    strong_eval_run = serializers.PrimaryKeyRelatedField(queryset=router_training_runs())
    quality_target = serializers.FloatField(
        help_text="Share of the strong version's quality to keep, in (0, 1]"
    )
    cheap_usd_per_mtok = serializers.FloatField(min_value=0)
    strong_usd_per_mtok = serializers.FloatField(min_value=0)
    seed = serializers.IntegerField(required=False, default=0)


class RouterActivateSerializer(serializers.Serializer):
    override_reason = serializers.CharField(required=False, allow_blank=True, default="")
