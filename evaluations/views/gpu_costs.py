"""The GPU cost page (mounted at ``/cost/gpus/``): GPU-hours and their cost per deployment and pool,
the part tenants were billed, and the idle remainder."""

from __future__ import annotations

import datetime as dt

from django.shortcuts import render
from django.utils import timezone
from django.views import View

from core.access import ReadsEverythingRequiredMixin
from evaluations.forms.cost import CostRangeForm
from evaluations.selectors.gpu_costs import gpu_cost_summary


def _utc(d: dt.date) -> dt.datetime:
    return dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC)


class GpuCostView(ReadsEverythingRequiredMixin, View):
    def get(self, request):
        form = CostRangeForm(request.GET or None)
        if request.GET and not form.is_valid():
            return render(request, "evaluations/gpu_costs.html", {"form": form}, status=400)
        data = form.cleaned_data if form.is_bound else {}
        today = timezone.now().astimezone(dt.UTC).date()
        until = data.get("until") or today + dt.timedelta(days=1)
        since = data.get("since") or until - dt.timedelta(days=30)
        summary = gpu_cost_summary(since=_utc(since), until=_utc(until))
        chart = {
            "labels": [day.date().isoformat() for day, _ in summary["by_day"]],
            "billed_usd": [float(t["billed_usd"]) for _, t in summary["by_day"]],
            "idle_usd": [float(t["idle_usd"]) for _, t in summary["by_day"]],
            "cost_usd": [float(t["cost_usd"]) for _, t in summary["by_day"]],
        }
        return render(
            request,
            "evaluations/gpu_costs.html",
            {"form": form, "summary": summary, "since": since, "until": until, "chart": chart},
        )
