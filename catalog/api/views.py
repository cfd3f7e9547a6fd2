from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from catalog import selectors, services
from catalog.api.serializers import (
    GpuTypeSerializer,
    LifecycleSerializer,
    MemoryEstimateQuerySerializer,
    MemoryEstimateSerializer,
    ModelSerializer,
    ModelVersionSerializer,
)
from catalog.models import GpuType, Model, ModelVersion
from core.access import PlatformAdminOrReadOnly
from core.api import ServiceModelViewSet


class GpuTypeViewSet(ServiceModelViewSet):
    save_service = services.gpu_type_save
    delete_service = services.gpu_type_delete
    queryset = GpuType.objects.order_by("name")
    serializer_class = GpuTypeSerializer
    permission_classes = [PlatformAdminOrReadOnly]
    filterset_fields = ["name", "interconnect"]


class ModelViewSet(ServiceModelViewSet):
    save_service = services.model_save
    delete_service = services.model_delete
    queryset = Model.objects.order_by("family", "name")
    serializer_class = ModelSerializer
    permission_classes = [PlatformAdminOrReadOnly]
    filterset_fields = ["family", "name"]


class ModelVersionViewSet(ServiceModelViewSet):
    save_service = services.model_version_save
    delete_service = services.model_version_delete
    queryset = ModelVersion.objects.select_related("model", "created_by").order_by("model__name", "label")
    serializer_class = ModelVersionSerializer
    permission_classes = [PlatformAdminOrReadOnly]
    filterset_fields = ["model", "precision", "framework", "lifecycle", "model__family"]

    @extend_schema(request=LifecycleSerializer, responses=ModelVersionSerializer)
    @action(detail=True, methods=["post"])
    def transition(self, request, pk=None):
        """Move the version along its lifecycle (draft → candidate → approved → serving → deprecated)."""
        version = self.get_object()
        body = LifecycleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            services.model_version_transition(version=version, actor=request.user, **body.validated_data)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return Response(ModelVersionSerializer(version).data)

    @extend_schema(parameters=[MemoryEstimateQuerySerializer], responses=MemoryEstimateSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="memory-estimates")
    def memory_estimates(self, request, pk=None):
        """The smallest fitting tensor-parallel size per GPU type, or why it does not fit (vLLM V1 accounting)."""
        version = self.get_object()
        query = MemoryEstimateQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        gpu = q.get("gpu")
        try:
            rows = services.model_version_memory_estimates(
                version=version,
                gpu_types=[gpu] if gpu else list(selectors.gpu_type_list()),
                precision=q.get("weight_precision"),
                kv_cache_dtype=q.get("kv_cache_dtype"),
                context_len=q.get("context_len"),
                gpu_memory_utilization=q["gpu_memory_utilization"],
                max_num_batched_tokens=q.get("max_num_batched_tokens"),
            )
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"detail": exc.messages}) from exc
        data = [row["shown"].as_dict() for row in rows]
        return Response(MemoryEstimateSerializer(data, many=True).data)
