"""Benchmark API: start runs (admins), follow and fetch them (admins and auditors)."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import ReadsEverythingOrAdmin
from evaluations.api.serializers.benchmarks import (
    BenchmarkRunCreateSerializer,
    BenchmarkRunDetailSerializer,
    BenchmarkRunFilterSerializer,
    BenchmarkRunListSerializer,
    BenchmarkRunStatusSerializer,
)
from evaluations.models import BenchmarkRun
from evaluations.selectors import benchmarks as selectors
from evaluations.services.benchmarks import benchmark_run_cancel, benchmark_run_create


def _run(pk: int) -> BenchmarkRun:
    try:
        return selectors.benchmark_run_get(pk=pk)
    except BenchmarkRun.DoesNotExist as exc:
        raise Http404 from exc


class RunListCreateView(generics.ListAPIView):
    """``GET``: runs, newest first (filters: status, kind, mode). ``POST``: start a run (platform admins)."""

    permission_classes = [ReadsEverythingOrAdmin]
    serializer_class = BenchmarkRunListSerializer

    def get_queryset(self):
        filters = BenchmarkRunFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        p = filters.validated_data
        return selectors.benchmark_run_list(status=p.get("status"), kind=p.get("kind"), mode=p.get("mode"))

    @extend_schema(parameters=[BenchmarkRunFilterSerializer])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=BenchmarkRunCreateSerializer, responses={201: BenchmarkRunStatusSerializer})
    def post(self, request):
        body = BenchmarkRunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # A refused run is the service's ValidationError: the API's exception handler answers 400.
        run = benchmark_run_create(actor=request.user, **body.validated_data)
        data = BenchmarkRunStatusSerializer(run).data
        return Response(
            data, status=status.HTTP_201_CREATED, headers={"Location": f"{request.path}{run.pk}/"}
        )


class RunDetailView(APIView):
    """One run with its full report."""

    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(responses=BenchmarkRunDetailSerializer)
    def get(self, request, pk: int):
        return Response(BenchmarkRunDetailSerializer(_run(pk)).data)


class RunStatusView(APIView):
    """Status and progress only: cheap to poll while a run is going."""

    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(responses=BenchmarkRunStatusSerializer)
    def get(self, request, pk: int):
        return Response(BenchmarkRunStatusSerializer(_run(pk)).data)


class RunCancelView(APIView):
    """Cancel a queued or running run (platform admins). 409 when it already ended."""

    permission_classes = [ReadsEverythingOrAdmin]

    @extend_schema(
        request=None, responses={200: BenchmarkRunStatusSerializer, 409: BenchmarkRunStatusSerializer}
    )
    def post(self, request, pk: int):
        run = _run(pk)
        changed = benchmark_run_cancel(run=run, actor=request.user)
        return Response(BenchmarkRunStatusSerializer(run).data, status=200 if changed else 409)
