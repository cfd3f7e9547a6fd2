"""Reads of router policies, and the ``routers`` section the gateway serves."""

from __future__ import annotations

from django.db.models import QuerySet

from evaluations.constants import RouterStatus
from evaluations.models import EvalRun, RouterPolicy


def router_policy_list(*, route_id: int | None = None, status: str | None = None) -> QuerySet[RouterPolicy]:
    qs = RouterPolicy.objects.select_related("route", "cheap_version__model", "strong_version__model")
    if route_id is not None:
        qs = qs.filter(route_id=route_id)
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("route__public_name", "-number")


def router_policy_get(*, pk: int) -> RouterPolicy:
    return router_policy_list().select_related("cheap_eval_run", "strong_eval_run", "created_by").get(pk=pk)


def router_training_runs() -> QuerySet[EvalRun]:
    """Eval runs a router can be trained from: finished, of a catalog version."""
    return (
        EvalRun.objects.filter(status="succeeded", model_version__isnull=False)
        .select_related("suite_version__suite", "model_version__model")
        .order_by("-created_at", "-pk")
    )


def routers_table() -> dict:
    """``{public_name: {...}}``: every active policy as the snapshot contract's ``routers`` says."""
    return {
        p.route.public_name: {
            "policy_id": p.pk,
            "number": p.number,
            "cheap_version_id": p.cheap_version_id,
            "strong_version_id": p.strong_version_id,
            "threshold": p.threshold,
            "model": p.model,
        }
        for p in RouterPolicy.objects.filter(
            status=RouterStatus.ACTIVE, route__rehearsal=False
        ).select_related("route")
    }
