"""Reads of the capacity planner: saved plans."""

from __future__ import annotations

from django.db.models import QuerySet

from evaluations.models import CapacityPlan


def capacity_plan_get(*, token) -> CapacityPlan | None:
    return CapacityPlan.objects.filter(token=token).select_related("created_by").first()


def capacity_plan_list() -> QuerySet[CapacityPlan]:
    return CapacityPlan.objects.select_related("created_by").order_by("-created_at")
