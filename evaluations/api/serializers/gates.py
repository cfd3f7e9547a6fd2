"""Serializers of the gate endpoints: decisions, gate runs, a version's gate status."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.jsonschemas import openapi_30
from evaluations.constants import GateKind, GateMode
from evaluations.models import GateDecision, GateRun
from evaluations.schemas import GATE_POLICY


class GateDecisionSerializer(serializers.ModelSerializer):
    model = serializers.CharField(source="model_version.model.name")
    version = serializers.CharField(source="model_version.label")
    gpu_type = serializers.CharField(source="gpu_type.name")
    policy_number = serializers.IntegerField(source="policy.number")

    class Meta:
        model = GateDecision
        fields = [
            "id", "created_at", "model", "version", "model_version", "kind", "verdict", "label", "gpu_type",
            "policy_number", "baseline_version", "summary", "thresholds", "measured", "checks", "eval_run",
            "baseline_eval_run", "benchmark_run", "baseline_benchmark_run", "gate_run",
        ]  # fmt: skip


class GateRunStartSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=GateMode.choices, default=GateMode.PREDICTED)
    kinds = serializers.ListField(child=serializers.ChoiceField(choices=GateKind.choices), required=False)


class GateRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = GateRun
        fields = ["id", "model_version", "policy", "mode", "kinds", "status", "progress", "progress_message",
                  "error", "created_at", "started_at", "finished_at"]  # fmt: skip


@extend_schema_field(openapi_30(GATE_POLICY))
class GatePolicyField(serializers.JSONField):
    """The policy's three gates; the OpenAPI document shows ``evaluations.schemas.GATE_POLICY``."""


class GateStatusSerializer(serializers.Serializer):
    passed = serializers.BooleanField(help_text="Every gate the current policy requires passed")
    gates_overridden = serializers.BooleanField(
        help_text="A platform admin approved the version despite its gates, with a recorded reason"
    )
    policy_id = serializers.IntegerField(allow_null=True)
    policy_number = serializers.IntegerField(allow_null=True)
    policy = GatePolicyField(allow_null=True, help_text="The current policy's limits (none: no policy yet)")
    gpu_type = serializers.CharField(allow_null=True)
    gates = serializers.ListField(child=serializers.DictField())
    blocking = serializers.ListField(child=serializers.CharField())
