"""Serializers of the eval-suite and eval-run endpoints."""

from __future__ import annotations

from rest_framework import serializers

from evaluations.models import EvalRun, EvalSuiteVersion


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


class EvalRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = EvalRun
        fields = ["id", "suite_version", "model_version", "deployment", "label", "status", "progress",
                  "progress_message", "error", "cases_total", "cases_done", "cases_failed", "scores", "seed",
                  "concurrency", "snapshot", "created_at", "started_at", "finished_at"]  # fmt: skip
