"""Eval-suite and gate API: admins upload suites and start gates; admins and auditors read."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.selectors import model_version_queryset
from evaluations import evalruns, gates, selectors
from evaluations.api.gate_serializers import (
    EvalRunSerializer,
    GateDecisionSerializer,
    GateRunSerializer,
    GateRunStartSerializer,
    GateStatusSerializer,
    SuiteUploadSerializer,
    SuiteVersionSerializer,
)
from evaluations.models import EvalRun, EvalSuiteVersion
from governor.access import ReadsEverythingOrAdmin


def _drf(exc: DjangoValidationError) -> serializers.ValidationError:
    return serializers.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)


class SuiteListCreateView(generics.ListAPIView):
    """``GET``: every suite version. ``POST``: upload a suite (JSONL ``content`` or a ``file``); a bad
    line answers 400 naming it, and nothing is saved."""

    permission_classes = [ReadsEverythingOrAdmin]
    serializer_class = SuiteVersionSerializer
    parser_classes = [JSONParser, MultiPartParser, FormParser]

    def get_queryset(self):
        return (
            EvalSuiteVersion.objects.select_related("suite")
            .defer("content")
            .order_by("suite__name", "-number")
        )

    @extend_schema(request=SuiteUploadSerializer, responses={201: SuiteVersionSerializer})
    def post(self, request):
        body = SuiteUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        content = data["file"].read() if data.get("file") else data["content"]
        try:
            version = evalruns.eval_suite_upload(
                name=data["name"], content=content, actor=request.user,
                description=data["description"], note=data["note"],
            )  # fmt: skip
        except DjangoValidationError as exc:
            raise _drf(exc) from exc
        return Response(SuiteVersionSerializer(version).data, status=status.HTTP_201_CREATED)


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
        try:
            run = gates.gate_run_start(
                version=version, actor=request.user, mode=body.validated_data["mode"],
                kinds=body.validated_data.get("kinds") or None,
            )  # fmt: skip
        except DjangoValidationError as exc:
            raise _drf(exc) from exc
        return Response(GateRunSerializer(run).data, status=status.HTTP_201_CREATED)


class EvalRunDetailView(APIView):
    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(responses=EvalRunSerializer)
    def get(self, request, pk: int):
        return Response(EvalRunSerializer(get_object_or_404(EvalRun, pk=pk)).data)
