"""Rollout pages: list, create, detail with live status and charts, admins' actions, faults.

Platform admins and auditors read; only admins act; tenant members and outsiders get 403.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from core.access import PlatformAdminRequiredMixin, ReadsEverythingRequiredMixin
from deployments.models import Deployment, ModelRoute, Rollout, RouteTarget
from deployments.rollouts import selectors, services
from deployments.rollouts.forms import FaultsForm, RolloutActionForm, RolloutCreateForm, RolloutFilterForm
from deployments.services import deployment_faults_set

PAGE_SIZE = 25
POLL_SECONDS = 2


class RolloutListView(ReadsEverythingRequiredMixin, View):
    def get(self, request):
        form = RolloutFilterForm(request.GET or None)
        phase = form.cleaned_data.get("phase") if form.is_valid() else None
        page = Paginator(selectors.rollout_list(phase=phase or None), PAGE_SIZE).get_page(
            request.GET.get("page")
        )
        params = request.GET.copy()
        params.pop("page", None)
        return render(
            request, "deployments/rollout_list.html", {"form": form, "page": page, "qs": params.urlencode()}
        )


class RolloutCreateView(PlatformAdminRequiredMixin, View):
    def _render(self, request, form, status=200):
        return render(request, "deployments/rollout_form.html", {"form": form}, status=status)

    def get(self, request):
        initial = {}
        route_id = request.GET.get("route")
        if route_id and route_id.isdigit():
            route = ModelRoute.objects.filter(pk=int(route_id)).first()
            if route:
                initial["route"] = route.pk
                stable = RouteTarget.objects.filter(route=route, weight__gt=0).order_by("-weight").first()
                if stable:
                    initial["stable"] = stable.deployment_id
        return self._render(request, RolloutCreateForm(initial=initial))

    def post(self, request):
        form = RolloutCreateForm(request.POST)
        if not form.is_valid():
            return self._render(request, form, status=400)
        try:
            rollout = services.rollout_create(
                route=form.cleaned_data["route"],
                stable=form.cleaned_data["stable"],
                canary=form.cleaned_data["canary"],
                sla_ttft_ms=form.cleaned_data["sla_ttft_ms"],
                sla_tpot_ms=form.cleaned_data["sla_tpot_ms"],
                actor=request.user,
                **form.plan(),
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                target = field if field in form.fields else None
                for e in errors:
                    form.add_error(target, e if target else f"{field}: {e}" if field != "__all__" else e)
            return self._render(request, form, status=400)
        messages.success(request, f"Started {rollout}.")
        return redirect(rollout.get_absolute_url())


class RolloutDetailView(ReadsEverythingRequiredMixin, View):
    """The plan, the live status (polled partial), the charts (polled JSON) and the analysis runs."""

    def get(self, request, pk: int):
        try:
            rollout = selectors.rollout_get(pk=pk)
        except Rollout.DoesNotExist:
            raise Http404 from None
        context = {
            "rollout": rollout,
            "plan": selectors.rollout_plan_rows(rollout=rollout),
            "checks": selectors.rollout_check_rows(rollout=rollout),
            "runs": selectors.rollout_analysis_runs(rollout=rollout),
            "poll_seconds": POLL_SECONDS,
        }
        if request.htmx and request.GET.get("part") == "live":
            return render(request, "deployments/partials/rollout_live.html", context)
        return render(request, "deployments/rollout_detail.html", context)


class RolloutChartDataView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int):
        rollout = get_object_or_404(Rollout, pk=pk)
        return JsonResponse(selectors.rollout_chart_data(rollout=rollout))


ACTIONS = {
    "pause": services.rollout_pause,
    "resume": services.rollout_resume,
    "promote": services.rollout_promote,
    "abort": services.rollout_abort,
    "rollback": services.rollout_rollback,
}


class RolloutActionView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int, action: str):
        rollout = get_object_or_404(Rollout, pk=pk)
        if action not in ACTIONS:
            raise Http404
        form = RolloutActionForm(request.POST)
        reason = form.cleaned_data["reason"] if form.is_valid() else ""
        try:
            ACTIONS[action](rollout=rollout, actor=request.user, reason=reason)
            messages.success(request, f"Rollout {action}: done.")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        return redirect(rollout.get_absolute_url())


class DeploymentFaultsView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        deployment = get_object_or_404(Deployment, pk=pk)
        form = FaultsForm(request.POST)
        if not form.is_valid():
            messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
            return redirect(deployment.get_absolute_url())
        faults = {} if "clear" in request.POST else form.faults()
        try:
            deployment_faults_set(
                deployment=deployment, faults=faults, actor=request.user, reason=form.cleaned_data["reason"]
            )
            messages.success(request, "Faults injected." if faults else "Faults cleared.")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        return redirect(deployment.get_absolute_url())
