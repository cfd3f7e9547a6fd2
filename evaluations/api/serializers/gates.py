"""Serializers of the eval-suite and gate endpoints."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from evaluations.constants import GateKind, GateMode
from evaluations.models import EvalRun, EvalSuiteVersion, GateDecision, GateRun
from evaluations.schemas import GATE_POLICY
from governor.jsonschemas import openapi_30


class SuiteUploadSerializer(serializers.Serializer):
    """A suite as JSONL text (``content``) or as an uploaded ``file``."""

    name = serializers.CharField(max_length=128)
    content = serializers.CharField(required=False, allow_blank=False, trim_whitespace=False)
    file = serializers.FileField(required=False)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=255)

    def validate(self, attrs):
        if bool(attrs.get("content")) == bool(attrs.get("file")):
            raise serializers.ValidationError(
                "Send the suite as exactly one of 'content' (JSONL text) or 'file'."
            )
        return attrs


class SuiteVersionSerializer(serializers.ModelSerializer):
    suite = serializers.CharField(source="suite.name")

    class Meta:
        model = EvalSuiteVersion
        fields = ["id", "suite", "number", "case_count", "categories", "checksum", "note", "created_at"]


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


class EvalRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = EvalRun
        fields = ["id", "suite_version", "model_version", "deployment", "label", "status", "progress",
                  "progress_message", "error", "cases_total", "cases_done", "cases_failed", "scores", "seed",
                  "concurrency", "snapshot", "created_at", "started_at", "finished_at"]  # fmt: skip


@extend_schema_field(openapi_30(GATE_POLICY))
class GatePolicyField(serializers.JSONField):
    """The policy's three gates; the OpenAPI document shows ``evaluations.schemas.GATE_POLICY``."""


class GateStatusSerializer(serializers.Serializer):
    passed = serializers.BooleanField()
    override = serializers.BooleanField()
    policy_id = serializers.IntegerField(allow_null=True)
    policy_number = serializers.IntegerField(allow_null=True)
    policy = GatePolicyField(allow_null=True, help_text="The current policy's limits (none: no policy yet)")
    gpu_type = serializers.CharField(allow_null=True)
    gates = serializers.ListField(child=serializers.DictField())
    blocking = serializers.ListField(child=serializers.CharField())
