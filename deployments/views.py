"""Deployment pages: list and detail with live status (htmx polling), admin actions, routes.

Platform admins and auditors read; only admins act; tenant members and outsiders get 403.
"""

from __future__ import annotations

import datetime as dt
import json

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django_htmx.http import HttpResponseClientRedirect

from core.access import PlatformAdminRequiredMixin, ReadsEverythingRequiredMixin
from deployments import selectors, services
from deployments.compiler import compile_application
from deployments.forms import (
    AdmissionForm,
    DeploymentFilterForm,
    DeploymentForm,
    ModelRouteForm,
    RouteFreeForm,
    RouteIsolationForm,
    RouteTargetForm,
    ScaleForm,
)
from deployments.models import Deployment, ModelRoute, RouteTarget
from deployments.reconciler import serve_config_preview
from deployments.rollouts.selectors import rollout_list
from deployments.selectors.isolation import route_isolation_ttft
from deployments.selectors.replicas import replica_chart, replica_history
from deployments.semcache.forms import route_cache_form
from deployments.semcache.selectors import route_cache_report

PAGE_SIZE = 25
POLL_SECONDS = 2


class DeploymentListView(ReadsEverythingRequiredMixin, View):
    """Every live deployment with its observed status; the table re-polls itself."""

    def get(self, request):
        form = DeploymentFilterForm(request.GET or None)
        status = form.cleaned_data.get("status") if form.is_valid() else None
        page = Paginator(selectors.deployment_list(status=status or None), PAGE_SIZE).get_page(
            request.GET.get("page")
        )
        params = request.GET.copy()
        params.pop("page", None)
        context = {
            "form": form,
            "page": page,
            "qs": params.urlencode(),
            "last_reconcile": selectors.last_reconcile(),
            "poll_seconds": POLL_SECONDS,
        }
        template = (
            "deployments/partials/deployment_table.html"
            if request.htmx
            else "deployments/deployment_list.html"
        )
        return render(request, template, context)


REPLICA_CHART_HOURS = 24


def _detail_context(request, deployment: Deployment, **forms) -> dict:
    """What the detail page shows; ``forms`` replaces a form with a bound one that has errors."""
    now = timezone.now()
    since = max(deployment.created_at, now - dt.timedelta(hours=REPLICA_CHART_HOURS))
    history = replica_history(deployment=deployment, since=since, until=now)
    return {
        "deployment": deployment,
        "events": selectors.deployment_events(deployment=deployment, limit=50),
        "last_reconcile": selectors.last_reconcile(),
        "poll_seconds": POLL_SECONDS,
        "preflight": services.deployment_preflight(deployment=deployment),
        "scale_form": forms.get("scale_form") or ScaleForm.for_deployment(deployment),
        "admission_form": forms.get("admission_form") or AdmissionForm.for_deployment(deployment),
        "replica_history": history,
        "replica_chart": replica_chart(history),
        "serve_app_json": json.dumps(compile_application(deployment), indent=2),
        "routes": deployment.route_targets.select_related("route"),
    }


class DeploymentDetailView(ReadsEverythingRequiredMixin, View):
    """Status, replicas, events and the compiled Serve application of one deployment."""

    def get(self, request, pk: int):
        deployment = get_object_or_404(
            Deployment.objects.select_related("model_version__model", "gpu_type", "created_by"), pk=pk
        )
        if request.htmx and request.GET.get("part") == "status":
            context = {
                "deployment": deployment,
                "events": selectors.deployment_events(deployment=deployment, limit=50),
                "last_reconcile": selectors.last_reconcile(),
                "poll_seconds": POLL_SECONDS,
            }
            return render(request, "deployments/partials/deployment_status.html", context)
        return render(request, "deployments/deployment_detail.html", _detail_context(request, deployment))


class DeploymentCreateView(PlatformAdminRequiredMixin, View):
    def _render(self, request, form, status=200):
        template = (
            "deployments/partials/deployment_form.html"
            if request.htmx
            else "deployments/deployment_form.html"
        )
        return render(request, template, {"form": form}, status=status)

    def get(self, request):
        initial = {}
        version_id = request.GET.get("model_version")
        if version_id and version_id.isdigit():
            initial["model_version"] = int(version_id)
        return self._render(request, DeploymentForm(initial=initial))

    def post(self, request):
        form = DeploymentForm(request.POST)
        if not form.is_valid():
            return self._render(request, form, status=422 if request.htmx else 200)
        fields = {f: form.cleaned_data[f] for f in form.Meta.fields}
        try:
            deployment, preflight = services.deployment_create(actor=request.user, **fields)
        except ValidationError as exc:
            form.add_error(None, exc)
            return self._render(request, form, status=422 if request.htmx else 200)
        messages.success(request, f"Created {deployment}; the reconciler is sending it to Ray.")
        for warning in preflight.warnings:
            messages.warning(request, warning)
        if request.htmx:
            return HttpResponseClientRedirect(deployment.get_absolute_url())
        return redirect(deployment.get_absolute_url())


class _ActionView(PlatformAdminRequiredMixin, View):
    """POST-only admin action on one deployment; errors become messages, then back to the page."""

    def act(self, request, deployment: Deployment) -> str:
        raise NotImplementedError

    def post(self, request, pk: int):
        deployment = get_object_or_404(Deployment, pk=pk)
        target = deployment.get_absolute_url()
        try:
            text = self.act(request, deployment)
            messages.success(request, text)
            if deployment.is_deleted or getattr(self, "to_list", False):
                target = reverse("deployments:list")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        if request.htmx:
            return HttpResponseClientRedirect(target)
        return redirect(target)


def _form_errors(form: forms.Form, exc: ValidationError) -> None:
    """The service's refusal, on the field it names when the form has it, else on the form."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc.messages)
        return
    for name, messages_ in exc.message_dict.items():
        form.add_error(name if name in form.fields else None, messages_)


class _DeploymentFormView(PlatformAdminRequiredMixin, View):
    """POST a form of the detail page. Valid: the service acts (audited) and the page reloads with a
    message. Invalid, or refused by the service: the form comes back with its errors and nothing
    changed (422 into the htmx swap, or the whole page without htmx)."""

    form_class: type[forms.Form]
    form_name: str
    partial: str

    def apply(self, request, deployment: Deployment, data: dict) -> str:
        raise NotImplementedError

    def post(self, request, pk: int):
        deployment = get_object_or_404(
            Deployment.objects.select_related("model_version__model", "gpu_type"), pk=pk
        )
        form = self.form_class(request.POST)
        if form.is_valid():
            try:
                text = self.apply(request, deployment, form.cleaned_data)
            except ValidationError as exc:
                _form_errors(form, exc)
            else:
                messages.success(request, text)
                target = deployment.get_absolute_url()
                return HttpResponseClientRedirect(target) if request.htmx else redirect(target)
        deployment.refresh_from_db()
        context = _detail_context(request, deployment, **{self.form_name: form})
        if request.htmx:
            return render(request, self.partial, context, status=422)
        return render(request, "deployments/deployment_detail.html", context, status=400)


class DeploymentScaleView(_DeploymentFormView):
    form_class = ScaleForm
    form_name = "scale_form"
    partial = "deployments/partials/scaling.html"

    def apply(self, request, deployment, data):
        fields = {k: v for k, v in data.items() if k != "reason"}
        d = services.deployment_scale(
            deployment=deployment, actor=request.user, reason=data["reason"], **fields
        )
        return f"Scaling {d} to {d.replicas_summary()} replicas."


class DeploymentAdmissionView(_DeploymentFormView):
    form_class = AdmissionForm
    form_name = "admission_form"
    partial = "deployments/partials/admission.html"

    def apply(self, request, deployment, data):
        d = services.deployment_admission_set(
            deployment=deployment,
            max_inflight=data["max_inflight"],
            actor=request.user,
            reason=data["reason"],
        )
        if d.max_inflight:
            return f"{d}: at most {d.max_inflight} requests in flight."
        return f"{d}: in-flight limit from its measured capacity."


class DeploymentStopView(_ActionView):
    def act(self, request, deployment):
        services.deployment_stop(deployment=deployment, actor=request.user)
        return f"Stopping {deployment}."


class DeploymentStartView(_ActionView):
    def act(self, request, deployment):
        services.deployment_start(deployment=deployment, actor=request.user)
        return f"Starting {deployment}."


class DeploymentDeleteView(_ActionView):
    to_list = True

    def act(self, request, deployment):
        services.deployment_delete(deployment=deployment, actor=request.user)
        return f"Deleted {deployment}; Ray removes its application at the next reconcile."


class ReconcileNowView(PlatformAdminRequiredMixin, View):
    def post(self, request):
        from deployments.tasks import reconcile

        reconcile.delay(trigger="console")
        messages.info(request, "Reconcile requested.")
        return redirect(request.POST.get("next") or reverse("deployments:list"))


class ServeConfigView(ReadsEverythingRequiredMixin, View):
    """The whole Ray Serve config the reconciler sends (what `serve deploy` would take)."""

    def get(self, request):
        config = serve_config_preview()
        return render(
            request,
            "deployments/serve_config.html",
            {"config_json": json.dumps(config, indent=2), "last_reconcile": selectors.last_reconcile()},
        )


# --- routes --------------------------------------------------------------------------------------


class RouteListView(ReadsEverythingRequiredMixin, View):
    def get(self, request):
        return render(request, "deployments/modelroute_list.html", {"routes": selectors.route_list()})


class RouteDetailView(ReadsEverythingRequiredMixin, View):
    def get(self, request, pk: int):
        route = get_object_or_404(ModelRoute, pk=pk)
        targets = route.targets.select_related("deployment").filter(deployment__deleted_at__isnull=True)
        total = sum(t.weight for t in targets) or 0
        rows = [(t, (t.weight * 100 / total) if total else 0) for t in targets]
        # The isolation figure's window and cut (ADR 0039); bad values: 400, the form says why.
        isolation_form = RouteIsolationForm(request.GET or None)
        isolation = None
        if not isolation_form.is_bound or isolation_form.is_valid():
            asked = isolation_form.cleaned_data if isolation_form.is_bound else {}
            until = timezone.now()
            isolation = route_isolation_ttft(
                route=route,
                since=until - RouteIsolationForm.window_length(asked.get("window")),
                until=until,
                short_at_most=asked.get("short"),
            )
        return render(
            request,
            "deployments/modelroute_detail.html",
            {
                "route": route,
                "rows": rows,
                "target_form": RouteTargetForm(),
                "free_form": RouteFreeForm(initial={"free": not route.free_reason}),
                "route_form": ModelRouteForm(instance=route),
                "rollouts": rollout_list(route=route)[:50],
                "active_rollout": rollout_list(route=route).filter(outcome="").first(),
                "isolation": isolation,
                "isolation_form": isolation_form,
                "cache": route_cache_report(route=route),
                "cache_form": route_cache_form(route=route),
            },
            status=200 if isolation is not None else 400,
        )


class RouteFormView(PlatformAdminRequiredMixin, View):
    def get(self, request, pk: int | None = None):
        route = get_object_or_404(ModelRoute, pk=pk) if pk else None
        return render(
            request,
            "deployments/modelroute_form.html",
            {"form": ModelRouteForm(instance=route), "route": route},
        )

    def post(self, request, pk: int | None = None):
        route = get_object_or_404(ModelRoute, pk=pk) if pk else None
        form = ModelRouteForm(request.POST, instance=route)
        if not form.is_valid():
            return render(request, "deployments/modelroute_form.html", {"form": form, "route": route})
        saved = services.model_route_save(
            route=form.save(commit=False),
            allowed_tenants=form.cleaned_data["allowed_tenants"],
            actor=request.user,
        )
        messages.success(request, f"Saved route {saved}.")
        return redirect(saved.get_absolute_url())


class RouteDeleteView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        route = get_object_or_404(ModelRoute, pk=pk)
        services.model_route_delete(route=route, actor=request.user)
        messages.success(request, f"Deleted route {route.public_name}.")
        return redirect("deployments:route_list")


class RouteTargetSetView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        route = get_object_or_404(ModelRoute, pk=pk)
        form = RouteTargetForm(request.POST)
        if form.is_valid():
            try:
                services.route_target_set(
                    route=route,
                    deployment=form.cleaned_data["deployment"],
                    weight=form.cleaned_data["weight"],
                    actor=request.user,
                )
                messages.success(request, "Saved the target.")
            except ValidationError as exc:
                messages.error(request, " ".join(exc.messages))
        else:
            messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect(route.get_absolute_url())


class RouteFreeView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int):
        route = get_object_or_404(ModelRoute, pk=pk)
        form = RouteFreeForm(request.POST)
        if not form.is_valid():
            messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
            return redirect(route.get_absolute_url())
        try:
            services.model_route_free_set(
                route=route,
                free=form.cleaned_data["free"],
                reason=form.cleaned_data["reason"],
                actor=request.user,
            )
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, "Marked free." if form.cleaned_data["free"] else "No longer free.")
        return redirect(route.get_absolute_url())


class RouteTargetDeleteView(PlatformAdminRequiredMixin, View):
    def post(self, request, pk: int, target_pk: int):
        target = get_object_or_404(RouteTarget, pk=target_pk, route_id=pk)
        services.route_target_delete(target=target, actor=request.user)
        messages.success(request, "Removed the target.")
        return redirect(target.route.get_absolute_url())
