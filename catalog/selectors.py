"""Catalog reads for views, the API and other apps."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from catalog.models import GpuType, Model, ModelVersion


def gpu_type_list() -> QuerySet[GpuType]:
    return GpuType.objects.order_by("name")


def model_list(*, family: str | None = None, search: str | None = None) -> QuerySet[Model]:
    qs = Model.objects.annotate(version_count=Count("versions")).order_by("family", "name")
    if family:
        qs = qs.filter(family=family)
    if search:
        qs = qs.filter(name__icontains=search)
    return qs


def model_version_list(
    *,
    search: str | None = None,
    family: str | None = None,
    precision: str | None = None,
    framework: str | None = None,
    lifecycle: str | None = None,
) -> QuerySet[ModelVersion]:
    qs = ModelVersion.objects.select_related("model", "baseline", "baseline__model", "created_by")
    if search:
        qs = qs.filter(model__name__icontains=search) | qs.filter(label__icontains=search)
    if family:
        qs = qs.filter(model__family=family)
    if precision:
        qs = qs.filter(precision=precision)
    if framework:
        qs = qs.filter(framework=framework)
    if lifecycle:
        qs = qs.filter(lifecycle=lifecycle)
    return qs.order_by("model__name", "label")


def model_families() -> list[str]:
    return list(Model.objects.order_by("family").values_list("family", flat=True).distinct())


def model_version_get(*, pk: int) -> ModelVersion:
    """One version with its model (other apps read lifecycle and names through this)."""
    return ModelVersion.objects.select_related("model").get(pk=pk)
