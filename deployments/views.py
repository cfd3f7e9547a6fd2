"""Deployment pages: list and detail with live status (htmx polling), admin actions, routes.

Platform admins and auditors read; only admins act; tenant members and outsiders get 403.
"""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django_htmx.http import HttpResponseClientRedirect

from core.access import PlatformAdminRequiredMixin, ReadsEverythingRequiredMixin
from deployments import selectors, services
from deployments.compiler import compile_application
from deployments.forms import (
    DeploymentFilterForm,
    DeploymentForm,
    ModelRouteForm,
    RouteFreeForm,
    RouteTargetForm,
    ScaleForm,
)
from deployments.models import Deployment, ModelRoute, RouteTarget
from deployments.reconciler import serve_config_preview
from deployments.rollouts.selectors import rollout_list

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


class DeploymentDetailView(ReadsEverythingRequiredMixin, View):
    """Status, replicas, events and the compiled Serve application of one deployment."""

    def get(self, request, pk: int):
        deployment = get_object_or_404(
            Deployment.objects.select_related("model_version__model", "gpu_type", "created_by"), pk=pk
        )
        context = {
            "deployment": deployment,
            "events": selectors.deployment_events(deployment=deployment, limit=50),
            "last_reconcile": selectors.last_reconcile(),
            "poll_seconds": POLL_SECONDS,
        }
        if request.htmx and request.GET.get("part") == "status":
            return render(request, "deployments/partials/deployment_status.html", context)
        preflight = services.deployment_preflight(deployment=deployment)
        context.update(
            preflight=preflight,
            scale_form=ScaleForm(
                initial={
                    "scaling_mode": deployment.scaling_mode,
                    "num_replicas": deployment.num_replicas,
                    "min_replicas": deployment.min_replicas,
                    "max_replicas": deployment.max_replicas,
                    "target_ongoing_requests": deployment.target_ongoing_requests,
                }
            ),
            serve_app_json=json.dumps(compile_application(deployment), indent=2),
            routes=deployment.route_targets.select_related("route"),
        )
        return render(request, "deployments/deployment_detail.html", context)


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


class DeploymentScaleView(_ActionView):
    def act(self, request, deployment):
        form = ScaleForm(request.POST)
        if not form.is_valid():
            raise ValidationError([f"{k}: {' '.join(v)}" for k, v in form.errors.items()])
        d = services.deployment_scale(deployment=deployment, actor=request.user, **form.cleaned_data)
        return f"Scaling {d} to {d.replicas_summary()} replicas."


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
            },
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
