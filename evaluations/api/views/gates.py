"""Gate API: admins start a version's gates; admins and auditors read decisions and gate status."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.selectors import model_version_queryset
from core.access import ReadsEverythingOrAdmin
from evaluations.api.serializers.gates import (
    GateDecisionSerializer,
    GateRunSerializer,
    GateRunStartSerializer,
    GateStatusSerializer,
)
from evaluations.selectors import gates as selectors
from evaluations.services import gates as services


class DecisionListView(generics.ListAPIView):
    """Gate decisions, newest first, with the Gates page's filters."""

    permission_classes = [ReadsEverythingOrAdmin]
    serializer_class = GateDecisionSerializer

    def get_queryset(self):
        p = self.request.query_params

        def as_int(name):
            value = p.get(name)
            if value in (None, ""):
                return None
            if not value.isdigit():
                raise serializers.ValidationError({name: "Must be an id."})
            return int(value)

        return selectors.gate_decision_list(
            model_id=as_int("model"), version_id=as_int("version"), kind=p.get("kind") or None,
            verdict=p.get("verdict") or None, label=p.get("label") or None,
        )  # fmt: skip

    @extend_schema(
        parameters=[
            OpenApiParameter("model", int), OpenApiParameter("version", int),
            OpenApiParameter("kind", str, description="quality, performance or stability"),
            OpenApiParameter("verdict", str, description="passed, failed or error"),
            OpenApiParameter("label", str, description="measured, simulated or predicted"),
        ]
    )  # fmt: skip
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class VersionGatesView(APIView):
    """Whether a version's required gates passed (what the promotion rule and rollouts read)."""

    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(responses=GateStatusSerializer)
    def get(self, request, pk: int):
        version = get_object_or_404(model_version_queryset(), pk=pk)
        return Response(GateStatusSerializer(selectors.version_gate_status(version=version)).data)


class GateRunStartView(APIView):
    """Start a version's gates (platform admins): 201 with the queued gate run."""

    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(request=GateRunStartSerializer, responses={201: GateRunSerializer})
    def post(self, request, pk: int):
        version = get_object_or_404(model_version_queryset(), pk=pk)
        body = GateRunStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # A refusal (no policy, gates already running) is the service's ValidationError: the API's
        # exception handler answers it as a 400.
        run = services.gate_run_start(
            version=version, actor=request.user, mode=body.validated_data["mode"],
            kinds=body.validated_data.get("kinds") or None,
        )  # fmt: skip
        return Response(GateRunSerializer(run).data, status=status.HTTP_201_CREATED)
