"""Serializers of the benchmark API: a create body validated here and by the service, and read shapes."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.selectors import gpu_type_list, model_version_list
from core.jsonschemas import openapi_30
from core.runs import RunStatus
from deployments.selectors import deployment_list
from evaluations.constants import DEFAULT_SLA, DEFAULT_WORKLOAD, Api, RunKind, RunMode, TargetKind
from evaluations.models import BenchmarkRun
from evaluations.schemas import SLA, STAGE, WORKLOAD


@extend_schema_field(openapi_30(WORKLOAD))
class WorkloadField(serializers.JSONField):
    """A benchmark workload (``evaluations.schemas.WORKLOAD``)."""


@extend_schema_field(openapi_30(SLA))
class SlaField(serializers.JSONField):
    """Per-request SLA limits in ms (``evaluations.schemas.SLA``)."""


@extend_schema_field(openapi_30(STAGE))
class StageField(serializers.JSONField):
    """How each stage runs (``evaluations.schemas.STAGE``)."""


class BenchmarkRunFilterSerializer(serializers.Serializer):
    """Query parameters of the run list: an unknown value is a 400 naming the parameter."""

    status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
    kind = serializers.ChoiceField(choices=RunKind.choices, required=False)
    mode = serializers.ChoiceField(choices=RunMode.choices, required=False)


class BenchmarkRunCreateSerializer(serializers.Serializer):
    """What starts a run. ``workload`` is ``engines.workload.Workload.to_dict()``; SLA limits are in ms."""

    name = serializers.CharField(required=False, allow_blank=True, max_length=128)
    kind = serializers.ChoiceField(choices=RunKind.choices, default=RunKind.MEASURED)
    mode = serializers.ChoiceField(choices=RunMode.choices, default=RunMode.SINGLE)
    target_kind = serializers.ChoiceField(choices=TargetKind.choices, default=TargetKind.DEPLOYMENT)
    deployment = serializers.PrimaryKeyRelatedField(
        queryset=deployment_list(), required=False, allow_null=True
    )
    base_url = serializers.CharField(required=False, allow_blank=True, default="")
    model_name = serializers.CharField(required=False, allow_blank=True, default="")
    api = serializers.ChoiceField(choices=Api.choices, default=Api.COMPLETIONS)
    model_version = serializers.PrimaryKeyRelatedField(
        queryset=model_version_list(), required=False, allow_null=True
    )
    gpu_type = serializers.PrimaryKeyRelatedField(queryset=gpu_type_list(), required=False, allow_null=True)
    gpus = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    tensor_parallel = serializers.IntegerField(default=1, min_value=1)
    replicas = serializers.IntegerField(default=1, min_value=1)
    workload = WorkloadField(default=lambda: dict(DEFAULT_WORKLOAD))
    sampling = serializers.JSONField(required=False)
    sla = SlaField(default=lambda: dict(DEFAULT_SLA))
    ladder = serializers.ListField(child=serializers.FloatField(min_value=0.0), required=False, default=list)
    sweep = serializers.JSONField(required=False, default=dict)
    stage = StageField(required=False, default=dict)

    def validate(self, attrs):
        for name in ("workload", "sla", "sweep", "stage"):
            if not isinstance(attrs.get(name, {}), dict):
                raise serializers.ValidationError({name: "Must be a JSON object."})
        if "sampling" in attrs and not isinstance(attrs["sampling"], dict):
            raise serializers.ValidationError({"sampling": "Must be a JSON object."})
        return attrs


class BenchmarkRunStatusSerializer(serializers.ModelSerializer):
    """What a client polls while a run is going."""

    class Meta:
        model = BenchmarkRun
        fields = ["id", "status", "progress", "progress_message", "error", "started_at", "finished_at"]


class BenchmarkRunListSerializer(serializers.ModelSerializer):
    """A run without its report, with headline figures."""

    url = serializers.SerializerMethodField()

    class Meta:
        model = BenchmarkRun
        fields = [
            "id",
            "url",
            "name",
            "kind",
            "mode",
            "status",
            "progress",
            "progress_message",
            "target_kind",
            "deployment",
            "base_url",
            "model_name",
            "capacity_rps",
            "token_goodput",
            "attainment",
            "usd_per_mtok",
            "client_bound",
            "created_at",
            "started_at",
            "finished_at",
        ]

    def get_url(self, obj) -> str:
        return obj.get_absolute_url()


class BenchmarkRunDetailSerializer(BenchmarkRunListSerializer):
    """A run with what was tested and its full report (stages, curve, capacity, cost, series)."""

    class Meta(BenchmarkRunListSerializer.Meta):
        fields = [
            *BenchmarkRunListSerializer.Meta.fields,
            "api",
            "model_version",
            "gpu_type",
            "snapshot",
            "workload",
            "sampling",
            "sla",
            "ladder",
            "sweep",
            "stage",
            "error",
            "results",
            "series",
        ]
