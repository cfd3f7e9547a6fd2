"""REST API of rollouts: admins and auditors read, admins create and act (drf-spectacular schema)."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action, api_view, permission_classes
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response

from core.access import ReadsEverythingOrAdmin
from core.jsonschemas import openapi_30
from deployments.api.views import _drf_error
from deployments.models import AnalysisRun, Deployment, ModelRoute, Rollout
from deployments.rollouts import selectors, services
from deployments.rollouts.plan import TEMPLATES
from deployments.rollouts.schemas import CHECKS as CHECKS_SCHEMA
from deployments.rollouts.schemas import STEPS as STEPS_SCHEMA
from deployments.services import deployment_faults_set


class AnalysisRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = AnalysisRun
        fields = [
            "id",
            "step_index",
            "window_start",
            "window_end",
            "verdict",
            "failed_checks",
            "results",
            "finished_at",
            "error",
        ]


class RolloutSerializer(serializers.ModelSerializer):
    route_name = serializers.CharField(source="route.public_name", read_only=True)
    analysis_runs = AnalysisRunSerializer(many=True, read_only=True)

    class Meta:
        model = Rollout
        fields = [
            "id",
            "route",
            "route_name",
            "stable",
            "canary",
            "template",
            "steps",
            "checks",
            "failure_limit",
            "sla_ttft_ms",
            "sla_tpot_ms",
            "phase",
            "outcome",
            "step_index",
            "canary_weight",
            "message",
            "abort_evidence",
            "created_at",
            "finished_at",
            "analysis_runs",
        ]
        read_only_fields = fields


@extend_schema_field(openapi_30(STEPS_SCHEMA))
class StepsField(serializers.JSONField):
    """A plan's steps; the OpenAPI document shows ``rollouts.schemas.STEPS``, the service enforces it."""


@extend_schema_field(openapi_30(CHECKS_SCHEMA))
class ChecksField(serializers.JSONField):
    """A plan's checks; the OpenAPI document shows ``rollouts.schemas.CHECKS``."""


class RolloutCreateSerializer(serializers.Serializer):
    route = serializers.PrimaryKeyRelatedField(queryset=ModelRoute.objects.filter(rehearsal=False))
    stable = serializers.PrimaryKeyRelatedField(queryset=Deployment.objects.live())
    canary = serializers.PrimaryKeyRelatedField(queryset=Deployment.objects.live())
    template = serializers.ChoiceField(choices=sorted(TEMPLATES), required=False, allow_blank=True)
    steps = StepsField(
        required=False, help_text="set_weight / pause / analysis steps; overrides the template's"
    )
    checks = ChecksField(required=False, help_text="analysis checks; overrides the template's")
    failure_limit = serializers.IntegerField(required=False, min_value=0)
    sla_ttft_ms = serializers.FloatField(required=False, default=1000)
    sla_tpot_ms = serializers.FloatField(required=False, default=50)

    def validate(self, data):
        name = data.get("template") or ""
        if not name and "steps" not in data:
            raise serializers.ValidationError({"steps": "Give steps, or a template."})
        t = TEMPLATES.get(name, {"steps": None, "checks": [], "failure_limit": 0})
        data.setdefault("steps", t["steps"])
        data.setdefault("checks", t["checks"])
        data.setdefault("failure_limit", t["failure_limit"])
        return data


class ActionSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class FaultsSerializer(serializers.Serializer):
    ttft_extra_ms = serializers.FloatField(required=False, min_value=0)
    decode_slowdown = serializers.FloatField(required=False, min_value=1)
    error_rate = serializers.FloatField(required=False, min_value=0, max_value=1)
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)


class RolloutViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Progressive rollouts of a canary deployment on a route. Create starts one; actions act."""

    serializer_class = RolloutSerializer
    permission_classes = [ReadsEverythingOrAdmin]
    filterset_fields = ["route", "phase", "outcome"]

    def get_queryset(self):
        return selectors.rollout_list().prefetch_related("analysis_runs")

    @extend_schema(request=RolloutCreateSerializer, responses={201: RolloutSerializer})
    def create(self, request):
        body = RolloutCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        try:
            rollout = services.rollout_create(actor=request.user, **data)
        except DjangoValidationError as exc:
            raise _drf_error(exc) from exc
        return Response(RolloutSerializer(rollout).data, status=status.HTTP_201_CREATED)

    def _act(self, request, fn):
        body = ActionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            rollout = fn(rollout=self.get_object(), actor=request.user, reason=body.validated_data["reason"])
        except DjangoValidationError as exc:
            # The rollout is not in a state that allows this (e.g. already finished).
            return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_409_CONFLICT)
        rollout.refresh_from_db()
        return Response(RolloutSerializer(rollout).data)

    @extend_schema(request=ActionSerializer, responses={200: RolloutSerializer, 409: None})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._act(request, services.rollout_pause)

    @extend_schema(request=ActionSerializer, responses={200: RolloutSerializer, 409: None})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._act(request, services.rollout_resume)

    @extend_schema(request=ActionSerializer, responses={200: RolloutSerializer, 409: None})
    @action(detail=True, methods=["post"])
    def promote(self, request, pk=None):
        """Skip the remaining steps: the canary takes 100 %."""
        return self._act(request, services.rollout_promote)

    @extend_schema(request=ActionSerializer, responses={200: RolloutSerializer, 409: None})
    @action(detail=True, methods=["post"])
    def abort(self, request, pk=None):
        """Canary weight to 0, stable restored."""
        return self._act(request, services.rollout_abort)

    @extend_schema(request=ActionSerializer, responses={200: RolloutSerializer, 409: None})
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):
        """After a promotion: route back to the previous stable."""
        return self._act(request, services.rollout_rollback)


@extend_schema(request=FaultsSerializer, responses={200: None})
@api_view(["POST"])
@permission_classes([ReadsEverythingOrAdmin])
def deployment_faults_view(request, pk: int):
    """Inject faults into a simulated deployment (an empty body clears them)."""
    deployment = get_object_or_404(Deployment.objects.live(), pk=pk)
    body = FaultsSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    data = dict(body.validated_data)
    reason = data.pop("reason", "")
    try:
        d = deployment_faults_set(deployment=deployment, faults=data, actor=request.user, reason=reason)
    except DjangoValidationError as exc:
        raise _drf_error(exc) from exc
    return Response({"deployment": d.pk, "faults": d.faults})
