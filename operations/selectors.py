"""SLO reads for the pages."""

from __future__ import annotations

from django.db.models import QuerySet

from operations.models import Incident, Slo, SloBreach


def slos_of_route(*, route_id: int) -> QuerySet[Slo]:
    return Slo.objects.filter(route_id=route_id).select_related("route").order_by("kind", "id")


def slo_list() -> QuerySet[Slo]:
    return Slo.objects.select_related("route").order_by("route__public_name", "kind", "id")


def breaches_recent(*, route_id: int | None = None, limit: int = 20) -> QuerySet[SloBreach]:
    qs = SloBreach.objects.select_related("slo__route")
    if route_id is not None:
        qs = qs.filter(slo__route_id=route_id)
    return qs.order_by("-started_at", "-id")[:limit]


def incident_list(*, status: str = "", route: str = "") -> QuerySet[Incident]:
    qs = Incident.objects.select_related("route").order_by("-opened_at", "-id")
    if status in Incident.Status.values:
        qs = qs.filter(status=status)
    if route:
        qs = qs.filter(route__public_name=route)
    return qs


def incidents_open_count() -> int:
    return Incident.objects.filter(status=Incident.Status.OPEN).count()
