"""Catalog reads for views, the API and other apps."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from catalog.constants import (
    GATED_LIFECYCLE,
    LIFECYCLE_TRANSITIONS,
    PRODUCTION_LIFECYCLES,
    UNDEPLOYABLE_LIFECYCLES,
    Lifecycle,
)
from catalog.models import GpuCostVersion, GpuType, Model, ModelVersion
from catalog.promotion import Promotion


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
    return ModelVersion.objects.select_related("model", "baseline", "gate_override_by").get(pk=pk)


def model_versions_of(*, model_id: int) -> QuerySet[ModelVersion]:
    return ModelVersion.objects.filter(model_id=model_id).select_related("model").order_by("label")


def model_serving_version(*, model_id: int) -> ModelVersion | None:
    """The version of a model serving now (the newest one, if several are serving)."""
    return (
        ModelVersion.objects.filter(model_id=model_id, lifecycle=Lifecycle.SERVING)
        .select_related("model")
        .order_by("-updated_at", "-pk")
        .first()
    )


def version_can_deploy(*, version: ModelVersion) -> tuple[bool, str]:
    """Whether a deployment or route may use this version at all, and why not."""
    if version.lifecycle in UNDEPLOYABLE_LIFECYCLES:
        label = Lifecycle(version.lifecycle).label
        return False, f"{version} is {label.lower()}: {label.lower()} versions cannot be deployed or routed."
    return True, ""


def version_can_serve_production(*, version: ModelVersion) -> tuple[bool, str]:
    """Whether a production route may send traffic to this version (approved or serving only)."""
    ok, why = version_can_deploy(version=version)
    if not ok:
        return ok, why
    if version.lifecycle not in PRODUCTION_LIFECYCLES:
        label = Lifecycle(version.lifecycle).label
        return False, (
            f"{version} is {label.lower()}: production routes take only approved or serving versions "
            "(its eval gates must pass first)."
        )
    return True, ""


def version_moves(*, version: ModelVersion, promotion: Promotion | None = None) -> list[dict]:
    """The lifecycle moves the UI offers, each with whether it is possible now and why not.

    ``[{"to", "label", "possible", "blocked", "needs_override"}]``; the move to Approved is blocked
    (but may be overridden by an admin) while the promotion rule does not allow it.
    """
    moves = []
    for to in sorted(LIFECYCLE_TRANSITIONS.get(version.lifecycle, set()), key=Lifecycle.values.index):
        move = {
            "to": to,
            "label": Lifecycle(to).label,
            "possible": True,
            "blocked": "",
            "needs_override": False,
        }
        if to == GATED_LIFECYCLE and promotion is not None and not promotion.may_approve:
            move.update(
                possible=False,
                needs_override=True,
                blocked="; ".join(promotion.blocking or ["required gates have not passed"]),
            )
        moves.append(move)
    return moves


def model_version_find(*, pk: int | None) -> ModelVersion | None:
    return ModelVersion.objects.select_related("model").filter(pk=pk).first() if pk else None


def model_version_by_label(*, model_name: str, label: str) -> ModelVersion:
    return ModelVersion.objects.select_related("model").get(model__name=model_name, label=label)


def gpu_type_get(*, pk: int | None = None, name: str | None = None) -> GpuType:
    """One GPU type by id or name (raises ``GpuType.DoesNotExist``)."""
    return GpuType.objects.get(pk=pk) if pk is not None else GpuType.objects.get(name=name)


def gpu_type_find(*, pk: int | None) -> GpuType | None:
    return GpuType.objects.filter(pk=pk).first() if pk else None


def catalog_counts() -> dict[str, int]:
    """How many model versions and GPU types the catalog holds (the home page's summary)."""
    return {"version_count": ModelVersion.objects.count(), "gpu_count": GpuType.objects.count()}


def model_all() -> QuerySet[Model]:
    """Every model by name (choices in forms; the catalog's model list annotates counts instead)."""
    return Model.objects.order_by("name")


def model_get(*, pk: int | None = None, name: str | None = None) -> Model:
    """One model by id or name (raises ``Model.DoesNotExist``)."""
    return Model.objects.get(pk=pk) if pk is not None else Model.objects.get(name=name)


def model_version_queryset() -> QuerySet[ModelVersion]:
    """Versions with what their pages show joined in (for lookups by id in views)."""
    return ModelVersion.objects.select_related("model", "baseline", "gate_override_by")


def model_version_exists(*, model_name: str, label: str) -> bool:
    return ModelVersion.objects.filter(model__name=model_name, label=label).exists()


def gpu_cost_in_force(*, gpu_type_id: int, pool: str = "", at=None) -> GpuCostVersion | None:
    """The GPU cost version in force for a GPU type in a pool (the pool's own, else the all-pools one)."""
    from django.utils import timezone

    at = at or timezone.now()
    qs = GpuCostVersion.objects.filter(gpu_type_id=gpu_type_id, effective_from__lte=at).order_by(
        "-effective_from", "-pk"
    )
    if pool:
        own = qs.filter(pool=pool).first()
        if own is not None:
            return own
    return qs.filter(pool="").first()


def gpu_cost_versions(*, gpu_type_id: int | None = None) -> QuerySet[GpuCostVersion]:
    qs = GpuCostVersion.objects.select_related("gpu_type", "created_by")
    if gpu_type_id is not None:
        qs = qs.filter(gpu_type_id=gpu_type_id)
    return qs.order_by("pool", "-effective_from", "-pk")


def gpu_cost_version_find(*, pk: int | None) -> GpuCostVersion | None:
    return GpuCostVersion.objects.select_related("gpu_type").filter(pk=pk).first() if pk else None
