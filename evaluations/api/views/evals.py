"""Eval-suite API: admins upload suites; admins and auditors read suite versions and eval runs."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import ReadsEverythingOrAdmin
from evaluations.api.serializers.evals import EvalRunSerializer, SuiteUploadSerializer, SuiteVersionSerializer
from evaluations.models import EvalRun, EvalSuiteVersion
from evaluations.services import evals as services


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
        # A bad line is the service's ValidationError, answered as a 400 by the API's exception handler.
        version = services.eval_suite_upload(
            name=data["name"], content=content, actor=request.user,
            description=data["description"], note=data["note"],
        )  # fmt: skip
        return Response(SuiteVersionSerializer(version).data, status=status.HTTP_201_CREATED)


class EvalRunDetailView(APIView):
    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(responses=EvalRunSerializer)
    def get(self, request, pk: int):
        return Response(EvalRunSerializer(get_object_or_404(EvalRun, pk=pk)).data)
