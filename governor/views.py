"""The console's home page and health check."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import connection
from django.http import JsonResponse
from django.shortcuts import render
from django.views import View

from catalog.selectors import catalog_counts
from core.access import PlatformUserRequiredMixin, reads_everything, tenant_ids


class HomeView(PlatformUserRequiredMixin, View):
    """Landing page: what is in the catalog and where to go next, by role; for admins and auditors
    also the platform overview (spend, idle GPU cost, top tenants and models, budgets at risk)."""

    def get(self, request):
        from billing.selectors.tenancy import tenants_visible_to

        context = {
            **catalog_counts(),
            "tenants": tenants_visible_to(user=request.user, reads_everything=reads_everything(request.user)),
            "my_tenant_ids": tenant_ids(request.user),
        }
        if reads_everything(request.user):
            context["overview"] = platform_overview(days=OVERVIEW_DAYS)
        return render(request, "home.html", context)


OVERVIEW_DAYS = 30


def platform_overview(*, days: int) -> dict:
    """Composes billing's and deployments' cost selectors over the last ``days`` UTC days."""
    from billing.selectors.costs import budgets_at_risk, cost_breakdown, cost_series
    from evaluations.selectors.gpu_costs import gpu_cost_summary

    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    until, since = today + dt.timedelta(days=1), today + dt.timedelta(days=1 - days)
    series = cost_series(tenant_id=None, since=since, until=until, bucket="day")
    gpu = gpu_cost_summary(since=since, until=until)
    return {
        "days": days,
        "since": since,
        "spend_usd": sum((s["cost_usd"] for s in series), start=Decimal(0)),
        "tokens": sum(s["prompt_tokens"] + s["completion_tokens"] for s in series),
        "gpu": gpu["total"],
        "top_tenants": cost_breakdown(tenant_id=None, since=since, until=until, by="tenant")[:5],
        "top_models": cost_breakdown(tenant_id=None, since=since, until=until, by="model")[:5],
        "at_risk": budgets_at_risk(),
    }


def healthz(request):
    """Liveness plus a database round trip; used by the launcher and load balancers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
